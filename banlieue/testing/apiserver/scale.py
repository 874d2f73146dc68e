"""The ``/scale`` subresource of custom resources (autoscaling/v1 Scale).

Source: apiextensions ``CustomResourceSubresourceScale``: ``specReplicasPath``,
``statusReplicasPath`` and optional ``labelSelectorPath`` are simple JSON paths (``.spec.replicas``);
reading builds a Scale from the object, writing sets only the spec replicas path (kube's
``scaleUpdatedObjectInfo``), with the Scale's resourceVersion as precondition.
"""

from __future__ import annotations

import json
from typing import Any

from . import errors
from .patch import PatchError, json_merge_patch, json_patch
from .resources import ResourceType
from .rest import Rest, WriteOptions

JSON = dict[str, Any]


def _path(p: str) -> list[str]:
    return [part for part in p.strip().lstrip(".").split(".") if part]


def _get(obj: JSON, p: str | None) -> Any:
    if not p:
        return None
    cur: Any = obj
    for part in _path(p or ""):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def to_scale(rt: ResourceType, obj: JSON) -> JSON:
    """The autoscaling/v1 Scale view of ``obj``."""
    sub = rt.scale_subresource or {}
    md = obj["metadata"]
    scale: JSON = {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md},
        "spec": {"replicas": _get(obj, sub.get("specReplicasPath")) or 0},
        "status": {"replicas": _get(obj, sub.get("statusReplicasPath")) or 0},
    }
    selector = _get(obj, sub.get("labelSelectorPath"))
    if selector:
        scale["status"]["selector"] = selector
    return scale


def write_scale(rest: Rest, rt: ResourceType, ns: str, name: str, scale: JSON, opts: WriteOptions) -> JSON:
    """Set spec replicas from ``scale``; returns the new Scale. Raises ApiError (404, 409, 422)."""
    obj = rest.get_or_404(rt, ns, name)
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid("autoscaling", "Scale", name, [{
            "reason": "FieldValueInvalid", "field": "spec.replicas",
            "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0"}])
    rv = (scale.get("metadata") or {}).get("resourceVersion")
    if rv and rv != obj["metadata"]["resourceVersion"]:
        raise errors.conflict(rt.group, rt.plural, name)
    new = json.loads(json.dumps(obj))
    cur = new
    parts = _path((rt.scale_subresource or {}).get("specReplicasPath", ".spec.replicas"))
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = replicas
    return to_scale(rt, rest.update(rt, ns, name, new, opts))


def patch_scale(rest: Rest, rt: ResourceType, ns: str, name: str, content_type: str, raw: bytes,
                opts: WriteOptions) -> JSON:
    """PATCH the Scale (merge or JSON patch) and write it back."""
    current = to_scale(rt, rest.get_or_404(rt, ns, name))
    ctype = content_type.split(";", 1)[0].strip().lower()
    try:
        doc = json.loads(raw or b"null")
    except ValueError as e:
        raise errors.bad_request(f"error decoding patch: {e}") from e
    try:
        if ctype == "application/json-patch+json" and isinstance(doc, list):
            patched = json_patch(current, doc)
        elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json") and isinstance(doc, dict):
            patched = json_merge_patch(current, doc)
        else:
            raise errors.unsupported_media_type(ctype, ["application/json-patch+json", "application/merge-patch+json"])
    except PatchError as e:
        raise errors.ApiError(422, "Invalid", e.message) from e
    return write_scale(rest, rt, ns, name, patched, opts)
