"""Discovery documents: /version, /api, /apis, /apis/<g>, /api/v1, /apis/<g>/<v>.

Shapes from meta/v1 (APIVersions, APIGroupList, APIGroup, APIResourceList) and, when the client
asks for it, aggregated discovery (``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``, kube
1.30 GA; v2beta1 before) with the Content-Type naming the served type, as kubectl expects.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .resources import Registry, ResourceType

JSON = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "32"}
AGGREGATED_CT = "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"


def version_info() -> JSON:
    """``/version`` (version.Info)."""
    return {
        "major": KUBE_VERSION["major"],
        "minor": KUBE_VERSION["minor"],
        "gitVersion": f"v{KUBE_VERSION['major']}.{KUBE_VERSION['minor']}.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def wants_aggregated(accept: str) -> str | None:
    """The aggregated discovery version the Accept header asks for (``v2``/``v2beta1``) or None."""
    for part in accept.split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip() for p in part.split(";")[1:] if "=" in p}
        if params.get("as") == "APIGroupDiscoveryList" and params.get("g") == "apidiscovery.k8s.io":
            if params.get("v") in ("v2", "v2beta1"):
                return params["v"]
    return None


def api_versions(host: str) -> JSON:
    """``/api`` (APIVersions)."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group(registry: Registry, name: str, versions: list[str]) -> JSON:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def api_group_list(registry: Registry) -> JSON:
    """``/apis`` (APIGroupList), groups in registration order (builtin first)."""
    groups = [_group(registry, g, vs) for g, vs in registry.group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> JSON | None:
    """``/apis/<group>`` (APIGroup) or None when not served."""
    vs = registry.group_versions().get(group)
    if not vs:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, group, vs)}


def _storage_hash(rt: ResourceType) -> str:
    return hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).digest()[:8].hex()


def api_resource_list(registry: Registry, group: str, version: str) -> JSON | None:
    """``/api/v1`` or ``/apis/<g>/<v>`` (APIResourceList) or None when not served."""
    rts = registry.resources_in(group, version)
    if not rts:
        return None
    resources: list[JSON] = []
    for rt in rts:
        r: JSON = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": rt.verbs,
            "storageVersionHash": _storage_hash(rt),
        }
        if rt.short_names:
            r["shortNames"] = rt.short_names
        if rt.categories:
            r["categories"] = rt.categories
        resources.append(r)
        if rt.status_subresource:
            resources.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": ["get", "patch", "update"]})
        if rt.scale_subresource:
            resources.append({"name": f"{rt.plural}/scale", "singularName": "", "namespaced": rt.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _aggregated_resource(rt: ResourceType) -> JSON:
    r: JSON = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": rt.verbs,
    }
    if rt.short_names:
        r["shortNames"] = rt.short_names
    if rt.categories:
        r["categories"] = rt.categories
    subs = []
    if rt.status_subresource:
        subs.append({"subresource": "status", "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                     "verbs": ["get", "patch", "update"]})
    if rt.scale_subresource:
        subs.append({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                     "verbs": ["get", "patch", "update"]})
    if subs:
        r["subresources"] = subs
    return r


def aggregated(registry: Registry, *, legacy: bool, version: str) -> JSON:
    """APIGroupDiscoveryList for ``/api`` (``legacy``: the core group) or ``/apis``."""
    items = []
    for g, vs in registry.group_versions().items():
        if (g == "") != legacy:
            continue
        versions = [
            {"version": v, "resources": [_aggregated_resource(rt) for rt in registry.resources_in(g, v)],
             "freshness": "Current"}
            for v in vs
        ]
        md: JSON = {"name": g} if g else {}
        items.append({"metadata": md, "versions": versions})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{version}", "metadata": {},
            "items": items}
