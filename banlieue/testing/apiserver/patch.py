"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as kube-apiserver applies them.

kube-apiserver uses evanphx/json-patch for both; error wording here follows that library so the
messages A1 puts in a 422 Status read the same. Inputs are never mutated. Pure: no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PatchError", "json_equal", "json_merge_patch", "json_patch"]


class PatchError(ValueError):
    """A patch that cannot be applied (kube answers 422 with ``message``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality: unlike Python ``==``, ``true`` differs from ``1``; 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def json_merge_patch(target: Any, patch: Any) -> dict[str, Any]:
    """Apply an RFC 7386 merge patch and return a new document.

    ``null`` deletes a key, objects merge recursively, anything else (lists included) replaces.
    Raises PatchError when the result is not a JSON object (kube patches whole objects only).
    Untouched sub-trees of ``target`` are shared with the result, never modified.
    """
    result = _merge(target, patch)
    if not isinstance(result, dict):
        raise PatchError("merge patch result must be a JSON object")
    return result


def _parse_pointer(ptr: Any) -> list[str]:
    if not isinstance(ptr, str):
        raise PatchError(f"invalid JSON pointer: {ptr!r}")
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchError(f'JSON pointer must be empty or start with a "/": "{ptr}"')
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]


def _index(token: str, length: int, *, allow_end: bool, path: str) -> int:
    if allow_end and token == "-":
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f'invalid array index "{token}" in path "{path}"')
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchError(f"Unable to access invalid index: {i}: invalid index referenced")
    return i


def _container(doc: Any, parts: list[str], path: str) -> Any:
    """Walk to the parent of the last token; raise the 'missing path' error like evanphx."""
    cur = doc
    for tok in parts[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise PatchError(f'doc is missing path: "{path}": missing value')
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(tok, len(cur), allow_end=False, path=path)]
        else:
            raise PatchError(f'doc is missing path: "{path}": missing value')
    if not isinstance(cur, dict | list):
        raise PatchError(f'doc is missing path: "{path}": missing value')
    return cur


def _get(doc: Any, path: str, op: str) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        return doc
    parent = _container(doc, parts, path)
    tok = parts[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise PatchError(f"{op} operation does not apply: doc is missing path: {path}: missing value")
        return parent[tok]
    return parent[_index(tok, len(parent), allow_end=False, path=path)]


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        return value
    parent = _container(doc, parts, path)
    tok = parts[-1]
    if isinstance(parent, dict):
        parent[tok] = value
    else:
        parent.insert(_index(tok, len(parent), allow_end=True, path=path), value)
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> tuple[Any, Any]:
    parts = _parse_pointer(path)
    if not parts:
        raise PatchError(f"{op} operation does not apply: cannot remove the whole document")
    parent = _container(doc, parts, path)
    tok = parts[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise PatchError(f"{op} operation does not apply: doc is missing key: {path}: missing value")
        return doc, parent.pop(tok)
    return doc, parent.pop(_index(tok, len(parent), allow_end=False, path=path))


def _replace(doc: Any, path: str, value: Any) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        return value
    parent = _container(doc, parts, path)
    tok = parts[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}: missing value")
        parent[tok] = value
    else:
        parent[_index(tok, len(parent), allow_end=False, path=path)] = value
    return doc


def _field(op: dict[str, Any], name: str, kind: str) -> Any:
    if name not in op:
        raise PatchError(f"{kind} operation missing '{name}' field" if name != "value" else f"missing value for {kind}")
    return op[name]


def json_patch(target: Any, ops: list[Any]) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test); return a new document.

    ``target`` is deep-copied first, so a failing patch leaves it untouched. Raises PatchError
    (kube: 422) on a failed ``test`` ("testing value <path> failed: test failed"), a missing path,
    a bad array index, an unknown op or a malformed operation; and when the result is not an object.
    """
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for raw in ops:
        if not isinstance(raw, dict):
            raise PatchError("json: cannot unmarshal non-object into Go value of type jsonpatch.Operation")
        kind = raw.get("op")
        if kind == "add":
            doc = _add(doc, _field(raw, "path", kind), copy.deepcopy(_field(raw, "value", kind)))
        elif kind == "remove":
            doc, _ = _remove(doc, _field(raw, "path", kind))
        elif kind == "replace":
            doc = _replace(doc, _field(raw, "path", kind), copy.deepcopy(_field(raw, "value", kind)))
        elif kind == "move":
            src, dst = _field(raw, "from", kind), _field(raw, "path", kind)
            if isinstance(dst, str) and isinstance(src, str) and dst.startswith(src + "/"):
                raise PatchError(f'move operation does not apply: "{src}" is a prefix of "{dst}"')
            if src == dst:
                continue
            doc, value = _remove(doc, src, "move")
            doc = _add(doc, dst, value)
        elif kind == "copy":
            value = copy.deepcopy(_get(doc, _field(raw, "from", kind), "copy"))
            doc = _add(doc, _field(raw, "path", kind), value)
        elif kind == "test":
            path = _field(raw, "path", kind)
            want = _field(raw, "value", kind)
            try:
                have = _get(doc, path, "test")
            except PatchError:
                if want is None:
                    continue  # evanphx: testing null against an absent value succeeds
                raise PatchError(f"testing value {path} failed: test failed") from None
            if not json_equal(have, want):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    if not isinstance(doc, dict):
        raise PatchError("json patch result must be a JSON object")
    return doc
