"""Map the API double's request log to RBAC (verb, apiGroup, resource) triples and compare them with
the ClusterRoles of config/rbac.

``used(requests)``: the triples a request log shows, kube-apiserver's RequestInfo rules:
GET of a named object ``get``, of a collection ``list`` (``watch`` with ``watch=true``), POST
``create``, PUT ``update``, PATCH ``patch``, DELETE ``delete`` (``deletecollection`` without a
name); a subresource is ``<resource>/<subresource>``. Non-resource URLs (/api, /apis, /version,
/openapi) are left out: every authenticated user may read them (system:discovery).

``granted(role)``: the triples of one ClusterRole (resourceNames noted separately).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import yaml

Triple = tuple[str, str, str]  # (verb, apiGroup, resource[/subresource])


@dataclass(frozen=True)
class Access:
    verb: str
    group: str
    resource: str
    name: str


def parse(method: str, path: str, query: str) -> Access | None:
    """The RBAC view of one request, None for a non-resource URL."""
    segs = [s for s in path.split("/") if s]
    if segs[:2] == ["api", "v1"]:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        group, rest = segs[1], segs[3:]
    else:
        return None
    if not rest:
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    watch = parse_qs(query).get("watch", [""])[0] in ("true", "1")
    verb = {
        "GET": "watch" if watch else ("get" if name else "list"),
        "POST": "create", "PUT": "update", "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method.upper())
    if verb is None:
        return None
    return Access(verb, group, f"{resource}/{sub}" if sub else resource, name)


def used(requests: Iterable[dict[str, Any]]) -> dict[Triple, set[str]]:
    """Triples used -> object names seen (for resourceNames checks)."""
    out: dict[Triple, set[str]] = {}
    for r in requests:
        access = parse(r["method"], r["path"], r.get("query") or "")
        if access is not None:
            out.setdefault((access.verb, access.group, access.resource), set()).add(access.name)
    return out


@dataclass(frozen=True)
class Grant:
    triple: Triple
    resource_names: tuple[str, ...]


def granted(path: Path, role: str) -> list[Grant]:
    """Every (verb, group, resource) the ClusterRole ``role`` in ``path`` grants."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == role:
            return [Grant((verb, group, resource), tuple(rule.get("resourceNames") or ()))
                    for rule in doc.get("rules") or []
                    for group in rule.get("apiGroups") or []
                    for resource in rule.get("resources") or []
                    for verb in rule.get("verbs") or []]
    raise LookupError(f"no ClusterRole {role} in {path}")


def wildcards(paths: Iterable[Path]) -> list[str]:
    """Every ``*`` in apiGroups, resources, verbs or nonResourceURLs of the given manifests."""
    out = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in (doc or {}).get("rules") or []:
                for key in ("apiGroups", "resources", "verbs", "nonResourceURLs", "resourceNames"):
                    if any("*" in str(v) for v in rule.get(key) or []):
                        out.append(f"{path.name} {doc['metadata']['name']}: {key} {rule.get(key)}")
    return out


def allows(grants: list[Grant], triple: Triple, name: str) -> bool:
    return any(g.triple == triple and (not g.resource_names or name in g.resource_names) for g in grants)
