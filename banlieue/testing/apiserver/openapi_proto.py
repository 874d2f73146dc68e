"""Encode a swagger 2.0 document (JSON form) as gnostic ``openapi.v2.Document`` protobuf.

kubectl up to 1.2x reads ``/openapi/v2`` only as protobuf (``Accept:
application/com.github.proto-openapi.spec.v2@v1.0+protobuf``) for validation, ``explain`` and
strategic merge. Field numbers follow github.com/google/gnostic ``openapiv2/OpenAPIv2.proto``.
Values of ``default``, ``enum``, ``example`` and vendor extensions (``x-...``) are gnostic
``Any`` messages carrying YAML text, as kube-openapi writes them.
"""

from __future__ import annotations

import struct
from typing import Any

import yaml

JSON = dict[str, Any]

# swagger keyword -> (field number, kind)
_SCHEMA_FIELDS: dict[str, tuple[int, str]] = {
    "$ref": (1, "str"), "format": (2, "str"), "title": (3, "str"), "description": (4, "str"),
    "default": (5, "any"), "multipleOf": (6, "double"), "maximum": (7, "double"), "exclusiveMaximum": (8, "bool"),
    "minimum": (9, "double"), "exclusiveMinimum": (10, "bool"), "maxLength": (11, "int"), "minLength": (12, "int"),
    "pattern": (13, "str"), "maxItems": (14, "int"), "minItems": (15, "int"), "uniqueItems": (16, "bool"),
    "maxProperties": (17, "int"), "minProperties": (18, "int"), "required": (19, "strs"), "enum": (20, "anys"),
    "additionalProperties": (21, "addl"), "type": (22, "type"), "items": (23, "items"), "allOf": (24, "schemas"),
    "properties": (25, "props"), "discriminator": (26, "str"), "readOnly": (27, "bool"), "example": (30, "any"),
}
_QUERY_PARAM: dict[str, tuple[int, str]] = {
    "required": (1, "bool"), "in": (2, "str"), "description": (3, "str"), "name": (4, "str"),
    "allowEmptyValue": (5, "bool"), "type": (6, "str"), "format": (7, "str"), "uniqueItems": (20, "bool"),
}
_PATH_PARAM: dict[str, tuple[int, str]] = {
    "required": (1, "bool"), "in": (2, "str"), "description": (3, "str"), "name": (4, "str"), "type": (5, "str"),
    "format": (6, "str"), "uniqueItems": (19, "bool"),
}
_HEADER_PARAM = _PATH_PARAM
_OPERATION: dict[str, tuple[int, str]] = {
    "tags": (1, "strs"), "summary": (2, "str"), "description": (3, "str"), "operationId": (5, "str"),
    "produces": (6, "strs"), "consumes": (7, "strs"), "schemes": (10, "strs"), "deprecated": (11, "bool"),
}
_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num: int, wire: int) -> bytes:
    return _varint(num << 3 | wire)


def _ld(num: int, payload: bytes) -> bytes:
    return _key(num, 2) + _varint(len(payload)) + payload


def _str(num: int, s: str) -> bytes:
    return _ld(num, s.encode())


def _any(v: Any) -> bytes:
    return _str(2, yaml.safe_dump(v, default_flow_style=False).rstrip("\n") if not isinstance(v, str) else v)


def _named_any(name: str, v: Any) -> bytes:
    return _str(1, name) + _ld(2, _any(v))


def _scalar(num: int, kind: str, v: Any) -> bytes:
    if kind == "str":
        return _str(num, str(v))
    if kind == "bool":
        return _key(num, 0) + _varint(1 if v else 0)
    if kind == "int":
        return _key(num, 0) + _varint(int(v))
    if kind == "double":
        return _key(num, 1) + struct.pack("<d", float(v))
    if kind == "strs":
        return b"".join(_str(num, str(x)) for x in v)
    if kind == "any":
        return _ld(num, _any(v))
    if kind == "anys":
        return b"".join(_ld(num, _any(x)) for x in v)
    raise ValueError(kind)


def _fields(obj: JSON, table: dict[str, tuple[int, str]], ext_field: int | None) -> bytes:
    out = bytearray()
    for k, v in obj.items():
        if k in table:
            out += _scalar(*table[k], v)
        elif k.startswith("x-") and ext_field is not None:
            out += _ld(ext_field, _named_any(k, v))
    return bytes(out)


def schema(s: JSON) -> bytes:
    """Encode one Schema object."""
    out = bytearray()
    for k, v in s.items():
        spec = _SCHEMA_FIELDS.get(k)
        if spec is None:
            if k.startswith("x-"):
                out += _ld(31, _named_any(k, v))
            continue
        num, kind = spec
        if kind == "addl":
            out += _ld(num, _ld(1, schema(v)) if isinstance(v, dict) else _key(2, 0) + _varint(1 if v else 0))
        elif kind == "type":
            out += _ld(num, b"".join(_str(1, t) for t in (v if isinstance(v, list) else [v])))
        elif kind == "items":
            items = v if isinstance(v, list) else [v]
            out += _ld(num, b"".join(_ld(1, schema(i)) for i in items))
        elif kind == "schemas":
            out += b"".join(_ld(num, schema(i)) for i in v)
        elif kind == "props":
            out += _ld(num, b"".join(_ld(1, _str(1, name) + _ld(2, schema(sub))) for name, sub in v.items()))
        else:
            out += _scalar(num, kind, v)
    return bytes(out)


def _parameter(p: JSON) -> bytes:
    if "$ref" in p:
        return _ld(2, _str(1, p["$ref"]))
    where = p.get("in")
    if where == "body":
        body = _fields({k: v for k, v in p.items() if k != "schema"},
                       {"description": (1, "str"), "name": (2, "str"), "in": (3, "str"), "required": (4, "bool")}, 6)
        if "schema" in p:
            body += _ld(5, schema(p["schema"]))
        return _ld(1, _ld(1, body))
    table, slot = {"query": (_QUERY_PARAM, 3), "path": (_PATH_PARAM, 4), "header": (_HEADER_PARAM, 1)}.get(
        str(where), (_QUERY_PARAM, 3))
    ext = {"query": 23, "path": 22, "header": 22}.get(str(where), 23)
    return _ld(1, _ld(2, _ld(slot, _fields(p, table, ext))))


def _operation(op: JSON) -> bytes:
    out = bytearray(_fields(op, _OPERATION, 13))
    for p in op.get("parameters") or []:
        out += _ld(8, _parameter(p))
    return bytes(out)


def _path_item(item: JSON) -> bytes:
    out = bytearray()
    for k, v in item.items():
        if k in _METHODS:
            out += _ld(_METHODS[k], _operation(v))
        elif k == "parameters":
            out += b"".join(_ld(9, _parameter(p)) for p in v)
        elif k.startswith("x-"):
            out += _ld(10, _named_any(k, v))
    return bytes(out)


def document(doc: JSON) -> bytes:
    """Encode a swagger 2.0 document dict into ``openapi.v2.Document`` bytes."""
    out = bytearray(_str(1, str(doc.get("swagger", "2.0"))))
    info = doc.get("info") or {}
    out += _ld(2, _str(1, str(info.get("title", ""))) + _str(2, str(info.get("version", ""))))
    paths = b"".join(_ld(2, _str(1, name) + _ld(2, _path_item(item))) for name, item in (doc.get("paths") or {}).items())
    out += _ld(8, paths)
    defs = b"".join(_ld(1, _str(1, name) + _ld(2, schema(s))) for name, s in (doc.get("definitions") or {}).items())
    out += _ld(9, defs)
    return bytes(out)
