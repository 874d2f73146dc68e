"""A resource URL parsed: type, namespace, name, subresource (API concepts, "Resource URIs").

``/api/v1/<plural>[/<name>[/<sub>]]``, ``/api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]`` and
the same under ``/apis/<group>/<version>``; the legacy ``/watch/`` prefix is accepted. Shared by
the server (routing), the handlers and the listing, which import it and nothing of each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ApiError
from .resources import Registry, ResourceType

NOT_FOUND_PATH = ApiError(404, "NotFound", "the server could not find the requested resource", details={})


@dataclass
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


def parse_target(registry: Registry, group: str, version: str, segs: list[str]) -> Target:
    """Resolve path segments after ``/api/v1`` or ``/apis/<g>/<v>`` against the types ``registry``
    serves; raises ApiError 404 (``NOT_FOUND_PATH``) when not served."""
    watch_path = bool(segs) and segs[0] == "watch"
    if watch_path:
        segs = segs[1:]
    ns: str | None = None
    if len(segs) >= 3 and segs[0] == "namespaces" and segs[2] not in ("status", "finalize"):
        ns, segs = segs[1], segs[2:]
    if not segs or len(segs) > 3:
        raise NOT_FOUND_PATH
    rt = registry.get(group, version, segs[0])
    if rt is None:
        raise NOT_FOUND_PATH
    name = segs[1] if len(segs) > 1 else None
    sub = segs[2] if len(segs) > 2 else None
    if sub is not None and not ((sub == "status" and rt.status_subresource) or (sub == "scale" and rt.scale_subresource)
                                or (sub == "finalize" and rt.plural == "namespaces")):
        raise NOT_FOUND_PATH
    if (ns is not None and not rt.namespaced) or (rt.namespaced and ns is None and name is not None):
        raise NOT_FOUND_PATH
    return Target(rt, ns, name, sub, watch_path)
