"""Strategic merge patch for the builtin kinds the double serves.

Source: apimachinery ``strategicpatch`` semantics, restricted to what these kinds need: maps merge
recursively and ``null`` deletes; lists replace, except the merge-strategy lists of ObjectMeta
(``finalizers``: set union of primitives; ``ownerReferences``: merged by ``uid``); directives
``$patch: replace|delete`` (maps and merge-keyed list items), ``$deleteFromPrimitiveList/<key>``;
``$setElementOrder/<key>`` and ``$retainKeys`` are accepted and ignored (ordering only).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]

# path (tuple of keys from the object root) -> merge key (None: list of primitives, merged as a set)
MERGE_LISTS: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
}
_DELETE = object()


def strategic_merge(target: JSON, patch: JSON) -> JSON:
    """``target`` with ``patch`` applied (neither is mutated)."""
    out = _merge_map(copy.deepcopy(target), patch, ())
    return out if isinstance(out, dict) else {}


def _merge_map(target: JSON, patch: JSON, path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    out = dict(target)
    deletions: list[tuple[str, list[Any]]] = []
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            deletions.append((k.split("/", 1)[1], v if isinstance(v, list) else []))
            continue
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
            continue
        p = (*path, k)
        if p in MERGE_LISTS and isinstance(v, list):
            out[k] = _merge_list(list(out.get(k) or []), v, MERGE_LISTS[p])
        elif isinstance(v, dict):
            merged = _merge_map(out[k] if isinstance(out.get(k), dict) else {}, v, p)
            if merged is _DELETE:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = copy.deepcopy(v)
    for key, values in deletions:
        if isinstance(out.get(key), list):
            out[key] = [x for x in out[key] if x not in values]
    return out


def _merge_list(current: list[Any], patch: list[Any], merge_key: str | None) -> list[Any]:
    if merge_key is None:
        return current + [x for x in patch if x not in current]
    for item in patch:
        if not isinstance(item, dict):
            continue
        key = item.get(merge_key)
        idx = next((i for i, c in enumerate(current) if isinstance(c, dict) and c.get(merge_key) == key), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                current.pop(idx)
            continue
        if idx is None:
            current.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            merged = _merge_map(current[idx], item, ())
            if isinstance(merged, dict):
                current[idx] = merged
    return current
