"""CRD structural schemas: validation, defaulting, pruning and the structural check.

Follows apiextensions-apiserver for ``apiextensions.k8s.io/v1`` ``openAPIV3Schema``:

- validation: kube-openapi ``validate`` (the go-openapi fork) whose errors
  ``kubeOpenAPIResultToFieldErrors`` turns into ``field.Error`` causes (reason, message, field);
  list-type uniqueness from ``apiserver/schema/listtype``; embedded resources from
  ``apiserver/schema/objectmeta``;
- defaulting: ``structural/defaulting`` (``PruneNonNullableNullsWithoutDefaults`` then
  ``Default``);
- pruning: ``structural/pruning`` (root apiVersion/kind/metadata kept, metadata cut to ObjectMeta);
- the structural check: ``structural/validation.go`` and the CRD docs "Specifying a structural
  schema".

Schemas are compiled once into :class:`CompiledSchema` (cached by identity) because validation
runs on every write. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import functools
import ipaddress
import json
import math
import re
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from banlieue.testing.apiserver.patch import json_equal

__all__ = [
    "OBJECT_META_FIELDS",
    "CompiledSchema",
    "apply_defaults",
    "compile",
    "compile_schema",
    "prune",
    "structural_causes",
    "structural_errors",
    "validate",
]

# metav1.ObjectMeta JSON fields: what survives pruning of ``metadata``.
OBJECT_META_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
        "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip

Cause = dict[str, str]

# Marks "no old value" (create, or a field the old object did not have) for ratcheting.
_NO_OLD: Any = object()


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "unknown"


def go_value(v: Any) -> str:
    """Render a bad value the way ``field.Error.ErrorBody`` does: strings quoted, numbers bare."""
    if v is None:
        return '"null"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int | float):
        return go_number(v)
    return _go_syntax(v)


def _go_syntax(v: Any) -> str:
    """Go ``%#v`` of an unstructured value (``map[string]interface {}{"a":1}``), keys sorted."""
    if v is None:
        return "interface {}(nil)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int | float):
        return go_number(v)
    if isinstance(v, dict):
        inner = ", ".join(f"{json.dumps(k, ensure_ascii=False)}:{_go_syntax(v[k])}" for k in sorted(v))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(v, list):
        return "[]interface {}{" + ", ".join(_go_syntax(x) for x in v) + "}"
    return str(v)


def go_number(v: float) -> str:
    """Go ``%v``: int64 as is; float64 shortest, ``%e`` form for exponents < -4 or >= 21 digits rule.

    Matches ``fmt``'s shortest ``%g`` (precision 6 for the switch): ``1``, ``0.5``, ``100000``,
    ``1e+06``, ``1.234567e+06``, ``1e-05``.
    """
    if isinstance(v, int):
        return str(v)
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else ("+Inf" if v > 0 else ("-Inf" if v < 0 else "NaN"))
    d = Decimal(repr(v)).normalize()
    digits = "".join(str(x) for x in d.as_tuple().digits)
    exp = d.adjusted()
    nd, dp = len(digits), exp + 1
    eprec = 6
    if eprec > nd and nd >= dp:
        eprec = nd
    sign = "-" if v < 0 else ""
    if exp < -4 or exp >= eprec:
        mant = digits[0] + ("." + digits[1:] if nd > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return sign + format(abs(d), "f")


def go_float(v: float) -> str:
    """Go ``%v`` of a float64 schema bound (``minimum: 1000000`` prints ``1e+06``)."""
    return go_number(float(v))


def _cause(reason: str, field: str, message: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def _invalid(field: str, value: Any, detail: str) -> Cause:
    return _cause("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {detail}")


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Node:
    """One compiled schema node; attributes mirror JSONSchemaProps fields."""

    __slots__ = (
        "additional", "additional_any", "all_of", "any_of", "default_value", "embedded", "enum", "enum_msg",
        "excl_max", "excl_min", "format", "has_default", "int_or_string", "items", "list_map_keys",
        "list_type", "max_items", "max_length", "max_props", "maximum", "min_items", "min_length",
        "min_props", "minimum", "multiple_of", "not_", "nullable", "one_of", "pattern", "pattern_src",
        "preserve", "properties", "raw", "required", "rules", "type", "type_label",
    )  # fmt: skip

    def __init__(self, s: dict[str, Any]) -> None:
        self.raw = s
        self.type: str = s.get("type") or ""
        self.int_or_string = bool(s.get("x-kubernetes-int-or-string"))
        self.type_label = "integer,string" if self.int_or_string else self.type
        self.nullable = bool(s.get("nullable"))
        self.preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
        self.embedded = bool(s.get("x-kubernetes-embedded-resource"))
        self.properties = {k: _Node(v) for k, v in (s.get("properties") or {}).items()}
        self.required: list[str] = list(s.get("required") or [])
        ap = s.get("additionalProperties")
        self.additional = _Node(ap) if isinstance(ap, dict) else None
        self.additional_any = ap is True
        items = s.get("items")
        self.items = _Node(items) if isinstance(items, dict) else None
        self.enum: list[Any] | None = s.get("enum")
        self.enum_msg = ""
        if self.enum is not None:
            vals = [v if isinstance(v, str) else json.dumps(v) for v in self.enum]
            self.enum_msg = "supported values: " + ", ".join(json.dumps(v) for v in vals)
        self.minimum = s.get("minimum")
        self.maximum = s.get("maximum")
        self.excl_min = bool(s.get("exclusiveMinimum"))
        self.excl_max = bool(s.get("exclusiveMaximum"))
        self.multiple_of = s.get("multipleOf")
        self.min_length = s.get("minLength")
        self.max_length = s.get("maxLength")
        self.pattern_src: str | None = s.get("pattern")
        self.pattern = _compile_pattern(self.pattern_src) if self.pattern_src is not None else None
        self.min_items = s.get("minItems")
        self.max_items = s.get("maxItems")
        self.min_props = s.get("minProperties")
        self.max_props = s.get("maxProperties")
        self.format: str = s.get("format") or ""
        self.has_default = "default" in s
        self.default_value = s.get("default")
        self.list_type: str | None = s.get("x-kubernetes-list-type")
        self.list_map_keys: list[str] = list(s.get("x-kubernetes-list-map-keys") or [])
        self.all_of = [_Node(x) for x in s.get("allOf") or []]
        self.any_of = [_Node(x) for x in s.get("anyOf") or []]
        self.one_of = [_Node(x) for x in s.get("oneOf") or []]
        self.not_ = _Node(s["not"]) if isinstance(s.get("not"), dict) else None
        self.rules: list[dict[str, Any]] = [r for r in s.get("x-kubernetes-validations") or [] if isinstance(r, dict)]

    # --- validation (kube-openapi SchemaValidator) ---------------------------------------------

    def validate(self, v: Any, path: str, out: list[Cause], old: Any = _NO_OLD) -> None:
        if old is not _NO_OLD and json_equal(v, old):
            return  # CRD validation ratcheting: an unchanged value keeps passing
        if v is None:
            if (self.type or self.int_or_string) and not self.nullable:
                msg = f'{path} in body must be of type {self.type_label}: "null"'
                out.append(_cause("FieldValueTypeInvalid", path, f'Invalid value: "null": {msg}'))
            return
        jt = _json_type(v)
        ok = True
        if self.type or self.int_or_string:
            ok = (
                jt == self.type
                or (self.int_or_string and jt in ("integer", "string"))
                or (jt == "integer" and self.type == "number")
                or (jt == "number" and v.is_integer() and (self.type == "integer" or self.int_or_string))
            )
            if not ok:
                msg = f'{path} in body must be of type {self.type_label}: "{jt}"'
                out.append(_cause("FieldValueTypeInvalid", path, f'Invalid value: "{jt}": {msg}'))
        if self.all_of or self.any_of or self.one_of or self.not_ is not None:
            self._validate_props(v, path, out)
        if jt == "string":
            self._validate_string(v, path, out)
        elif jt in ("integer", "number"):
            self._validate_number(v, path, out)
        elif jt == "array":
            self._validate_array(v, path, out, old)
        elif jt == "object":
            self._validate_object(v, path, out, old)
        if self.enum is not None and not any(_enum_eq(v, e) for e in self.enum):
            out.append(_cause("FieldValueNotSupported", path, f"Unsupported value: {go_value(v)}: {self.enum_msg}"))
        if self.rules and ok:
            _run_rules(self.rules, v, old, self.type, path, out)

    def _validate_props(self, v: Any, path: str, out: list[Cause]) -> None:
        for sub in self.all_of:
            sub.validate(v, path, out)
        if self.any_of and not any(_ok(sub, v, path) for sub in self.any_of):
            out.append(_invalid("", "", f"{path} must validate at least one schema (anyOf)"))
        if self.one_of and sum(_ok(sub, v, path) for sub in self.one_of) != 1:
            out.append(_invalid("", "", f"{path} must validate one and only one schema (oneOf)"))
        if self.not_ is not None and _ok(self.not_, v, path):
            out.append(_invalid("", "", f"{path} must not validate the schema (not)"))

    def _validate_string(self, v: str, path: str, out: list[Cause]) -> None:
        n = len(v)
        if self.max_length is not None and n > self.max_length:
            out.append(_cause("FieldValueTooLong", path, f"Too long: may not be more than {self.max_length} bytes"))
        if self.min_length is not None and n < self.min_length:
            out.append(_invalid(path, v, f"{path} in body should be at least {self.min_length} chars long"))
        if self.pattern is not None and not self.pattern.search(v):
            out.append(_invalid(path, v, f"{path} in body should match '{self.pattern_src}'"))
        if self.format and not check_format(self.format, v):
            msg = f"{path} in body must be of type {self.format}: {json.dumps(v, ensure_ascii=False)}"
            out.append(_cause("FieldValueTypeInvalid", path, f"Invalid value: {go_value(v)}: {msg}"))

    def _validate_number(self, v: float, path: str, out: list[Cause]) -> None:
        if self.multiple_of is not None and self.multiple_of > 0:
            q = v / self.multiple_of
            if not (math.isfinite(q) and q == math.floor(q)):
                out.append(_invalid(path, v, f"{path} in body should be a multiple of {go_float(self.multiple_of)}"))
        if self.maximum is not None and (v >= self.maximum if self.excl_max else v > self.maximum):
            rel = "less than" if self.excl_max else "less than or equal to"
            out.append(_invalid(path, v, f"{path} in body should be {rel} {go_float(self.maximum)}"))
        if self.minimum is not None and (v <= self.minimum if self.excl_min else v < self.minimum):
            rel = "greater than" if self.excl_min else "greater than or equal to"
            out.append(_invalid(path, v, f"{path} in body should be {rel} {go_float(self.minimum)}"))

    def _validate_array(self, v: list[Any], path: str, out: list[Cause], old: Any = _NO_OLD) -> None:
        if self.items is not None:
            olds = self._correlate(old)
            for i, x in enumerate(v):
                prev = olds.get(self._item_key(x), _NO_OLD) if olds else _NO_OLD
                self.items.validate(x, f"{path}[{i}]", out, prev)
        n = len(v)
        if self.min_items is not None and n < self.min_items:
            out.append(_invalid(path, n, f"{path} in body should have at least {self.min_items} items"))
        if self.max_items is not None and n > self.max_items:
            out.append(_cause("FieldValueTooMany", path, f"Too many: {n}: must have at most {self.max_items} items"))
        if self.list_type in ("set", "map"):
            self._validate_list_type(v, path, out)

    def _item_key(self, x: Any) -> str:
        if self.list_type == "map" and isinstance(x, dict):
            return json.dumps({k: x.get(k) for k in self.list_map_keys}, sort_keys=True)
        return json.dumps(x, sort_keys=True)

    def _correlate(self, old: Any) -> dict[str, Any]:
        """Old items matched for ratcheting: list-map items by key, set items by value; atomic
        lists are not correlated (apiextensions ratcheting ``CorrelatableOldValue``)."""
        if not isinstance(old, list) or self.list_type not in ("map", "set"):
            return {}
        out: dict[str, Any] = {}
        for x in old:
            out.setdefault(self._item_key(x), x)
        return out

    def _validate_list_type(self, v: list[Any], path: str, out: list[Cause]) -> None:
        # apiserver/schema/listtype: duplicates are reported at the later index.
        seen: set[str] = set()
        for i, x in enumerate(v):
            if self.list_type == "set":
                key: Any = x
            elif isinstance(x, dict):
                key = {k: x[k] for k in self.list_map_keys if k in x}
            else:
                continue
            token = json.dumps(key, sort_keys=True)
            if token in seen:
                out.append(_cause("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {go_value(key)}"))
            seen.add(token)

    def _validate_object(self, v: dict[str, Any], path: str, out: list[Cause], old: Any = _NO_OLD) -> None:
        for k in self.required:
            if k not in v:
                out.append(_cause("FieldValueRequired", _child(path, k), "Required value"))
        n = len(v)
        if self.min_props is not None and n < self.min_props:
            out.append(_invalid(path, self.min_props, f"{path} in body should have at least {self.min_props} properties"))
        if self.max_props is not None and n > self.max_props:
            out.append(_cause("FieldValueTooMany", path, f"Too many: {n}: must have at most {self.max_props} items"))
        props = self.properties
        for k, x in v.items():
            sub = props.get(k) or self.additional
            if sub is not None:
                prev = old.get(k, _NO_OLD) if isinstance(old, dict) else _NO_OLD
                sub.validate(x, _child(path, k), out, prev)
        if self.embedded and v:
            for k in ("apiVersion", "kind"):
                if k not in v:
                    out.append(_cause("FieldValueRequired", _child(path, k), "Required value: must not be empty"))

    # --- defaulting (structural/defaulting) ---------------------------------------------------

    def prune_nulls(self, v: Any) -> None:
        if isinstance(v, dict):
            for k in list(v):
                sub = self.properties.get(k) or self.additional
                if sub is None:
                    continue
                x = v[k]
                if x is None and not sub.has_default and not sub.nullable:
                    del v[k]
                else:
                    sub.prune_nulls(x)
        elif isinstance(v, list) and self.items is not None:
            for x in v:
                self.items.prune_nulls(x)

    def apply_default(self, v: Any) -> None:
        if isinstance(v, dict):
            for k, sub in self.properties.items():
                if sub.has_default and (k not in v or (v[k] is None and not sub.nullable)):
                    v[k] = _deepcopy(sub.default_value)
            for k, x in v.items():
                known = self.properties.get(k)
                if known is not None:
                    known.apply_default(x)
                elif self.additional is not None:
                    if x is None and not self.additional.nullable and self.additional.has_default:
                        v[k] = x = _deepcopy(self.additional.default_value)
                    self.additional.apply_default(x)
        elif isinstance(v, list) and self.items is not None:
            for i, x in enumerate(v):
                if x is None and not self.items.nullable and self.items.has_default:
                    v[i] = x = _deepcopy(self.items.default_value)
                self.items.apply_default(x)

    # --- pruning (structural/pruning) ---------------------------------------------------------

    def prune(self, v: Any, path: str, out: list[str], *, root: bool = False) -> None:
        if isinstance(v, dict):
            for k in list(v):
                cpath = f"{path}.{k}" if path else k
                if (root or self.embedded) and k in ("apiVersion", "kind"):
                    continue
                if (root or self.embedded) and k == "metadata":
                    _prune_meta(v[k], cpath, out)
                    continue
                sub = self.properties.get(k) or self.additional
                if sub is not None:
                    sub.prune(v[k], cpath, out)
                elif not (self.preserve or self.additional_any):
                    del v[k]
                    out.append(cpath)
        elif isinstance(v, list) and self.items is not None:
            for i, x in enumerate(v):
                self.items.prune(x, f"{path}[{i}]", out)


def _prune_meta(meta: Any, path: str, out: list[str]) -> None:
    if isinstance(meta, dict):
        for k in [k for k in meta if k not in OBJECT_META_FIELDS]:
            del meta[k]
            out.append(f"{path}.{k}" if path else k)


def _ok(node: _Node, v: Any, path: str) -> bool:
    errs: list[Cause] = []
    node.validate(v, path, errs)
    return not errs


def _enum_eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _deepcopy(v: Any) -> Any:
    # JSON values only: much faster than copy.deepcopy on hot paths.
    if isinstance(v, dict):
        return {k: _deepcopy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_deepcopy(x) for x in v]
    return v


def _compile_pattern(src: str) -> re.Pattern[str] | None:
    try:
        return re.compile(src)
    except re.error:
        return None  # structural_errors reports it at CRD creation


class CompiledSchema:
    """A schema compiled for repeated use; same operations as the module functions."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.root = _Node(schema)
        self.has_rules = "x-kubernetes-validations" in json.dumps(schema)

    def validate(self, obj: Any, *, path: str = "", old: Any = None) -> list[Cause]:
        """See :func:`validate`."""
        out: list[Cause] = []
        rule_causes: list[Cause] = []
        token = _RULE_CAUSES.set(rule_causes)
        try:
            self.root.validate(obj, path, out, _NO_OLD if old is None else old)
        finally:
            _RULE_CAUSES.reset(token)
        if self.has_rules and any(c["reason"] in _BLOCKING_REASONS for c in out):
            # apiextensions customResourceStrategy.Validate (hasBlockingErr): after a blocking
            # schema error the CEL rules are not run, and one cause says so.
            out = [c for c in out if not any(c is r for r in rule_causes)]
            out.append(_cause("FieldValueInvalid", "<nil>", "Invalid value: null: some validation rules were not "
                              "checked because the object was invalid; correct the existing errors to complete validation"))
        return out

    def apply_defaults(self, obj: dict[str, Any]) -> None:
        """See :func:`apply_defaults`."""
        self.root.prune_nulls(obj)
        self.root.apply_default(obj)

    def prune(self, obj: dict[str, Any]) -> list[str]:
        """See :func:`prune`."""
        out: list[str] = []
        self.root.prune(obj, "", out, root=True)
        out.sort()  # structural/pruning PruneWithOptions sorts the unknown field paths
        return out


_RULE_CAUSES: contextvars.ContextVar[list[Cause] | None] = contextvars.ContextVar("rule_causes", default=None)
"""The causes the x-kubernetes-validations rules added during one CompiledSchema.validate."""
_BLOCKING_REASONS = frozenset({"FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong",
                               "FieldValueTooMany", "FieldValueTypeInvalid"})
"""Schema errors after which kube-apiserver does not evaluate CEL rules (apiextensions hasBlockingErr)."""

_CACHE: dict[int, tuple[dict[str, Any], CompiledSchema]] = {}
_CACHE_MAX = 256


def compile_schema(schema: dict[str, Any]) -> CompiledSchema:
    """Compile ``schema`` (an ``openAPIV3Schema`` dict), cached by identity.

    The cache keeps a reference to the dict so its id cannot be reused; callers must not mutate a
    schema dict after first use (store a new dict when a CRD changes).
    """
    hit = _CACHE.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    compiled = CompiledSchema(schema)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(schema)] = (schema, compiled)
    return compiled


compile: Callable[[dict[str, Any]], CompiledSchema] = compile_schema


def validate(obj: Any, schema: dict[str, Any], *, path: str = "", old: Any = None) -> list[Cause]:
    """Validate ``obj`` against a structural schema; return StatusCause dicts (empty when valid).

    Each cause is ``{"reason", "message", "field"}`` as kube-apiserver reports them, e.g.
    ``{"reason": "FieldValueInvalid", "field": "spec.cpus", "message": "Invalid value: 0:
    spec.cpus in body should be greater than or equal to 1"}``. Reasons: FieldValueRequired,
    FieldValueTypeInvalid, FieldValueNotSupported (enum), FieldValueInvalid, FieldValueTooLong
    (maxLength), FieldValueTooMany (maxItems/maxProperties), FieldValueDuplicate (list-type
    set/map). ``path`` prefixes every field path. ``old`` (updates): CRD validation ratcheting
    (beta, on by default since 1.30): a value deep-equal to the old one at the same place
    (properties by name, list-map items by key, set items by value) is not re-validated.
    Source: kube-openapi validate + ``kubeOpenAPIResultToFieldErrors``.
    """
    return compile_schema(schema).validate(obj, path=path, old=old)


def apply_defaults(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    """Default ``obj`` in place (structural/defaulting).

    First drops ``null`` values of non-nullable fields that have no default
    (``PruneNonNullableNullsWithoutDefaults``), then sets ``default`` for absent fields and for
    ``null`` in non-nullable ones, recursively through properties, array items and map values.
    """
    compile_schema(schema).apply_defaults(obj)


def prune(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Drop fields unknown to ``schema`` in place; return their paths sorted (``spec.foo``, ``spec.a[0].b``).

    Root ``apiVersion``/``kind`` are kept and root ``metadata`` is cut to ObjectMeta fields (same
    for ``x-kubernetes-embedded-resource`` objects); ``x-kubernetes-preserve-unknown-fields``
    keeps unknown fields while known ones are still pruned beneath. Strict field validation
    reports each path as ``unknown field "<path>"`` (kube's wording, no leading dot).
    """
    return compile_schema(schema).prune(obj)



# --- string formats (kube-openapi strfmt.Default) ----------------------------------------------

_UUID_RE = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_UUID_V_RE = {
    "uuid3": re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I),
    "uuid4": re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$", re.I),
    "uuid5": re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$", re.I),
}
_MAC_RE = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$|^([0-9a-f]{4}\.){2}[0-9a-f]{4}$", re.I)
_HOSTNAME_RE = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*\.?$", re.I)
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
_DURATION_RE = re.compile(r"^\s*(\d+(\.\d+)?\s*(ns|us|µs|ms|s|m|h|d|w)\s*)+$")
_DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$")


def _is_datetime(v: str) -> bool:
    if not _DATETIME_RE.match(v):
        return False
    try:
        datetime.fromisoformat(v[:10] + "T" + v[11:].upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _is_date(v: str) -> bool:
    try:
        return len(v) == 10 and date.fromisoformat(v) is not None
    except ValueError:
        return False


def _is_byte(v: str) -> bool:
    try:
        base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _is_ip(v: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(v).version == version
    except ValueError:
        return False


def _is_cidr(v: str) -> bool:
    try:
        ipaddress.ip_network(v, strict=False)
    except ValueError:
        return False
    return "/" in v


_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_datetime,
    "datetime": _is_datetime,
    "date": _is_date,
    "uuid": lambda v: bool(_UUID_RE.match(v)),
    "uuid3": lambda v: bool(_UUID_V_RE["uuid3"].match(v)),
    "uuid4": lambda v: bool(_UUID_V_RE["uuid4"].match(v)),
    "uuid5": lambda v: bool(_UUID_V_RE["uuid5"].match(v)),
    "byte": _is_byte,
    "ipv4": lambda v: _is_ip(v, 4),
    "ipv6": lambda v: _is_ip(v, 6),
    "cidr": _is_cidr,
    "mac": lambda v: bool(_MAC_RE.match(v)),
    "hostname": lambda v: len(v) <= 255 and bool(_HOSTNAME_RE.match(v)),
    "email": lambda v: bool(_EMAIL_RE.match(v)),
    "duration": lambda v: bool(_DURATION_RE.match(v)),
}


def check_format(fmt: str, v: str) -> bool:
    """True when ``v`` satisfies string format ``fmt``; unknown formats (int32, ...) always pass."""
    check = _FORMATS.get(fmt)
    return True if check is None else check(v)


# --- the structural check (structural/validation.go, CRD docs "structural schema") -------------

_TYPES = ("array", "boolean", "integer", "number", "object", "string")
_JUNCTOR_FORBIDDEN = ("type", "description", "default", "nullable", "additionalProperties", "title")


def structural_errors(schema: dict[str, Any], *, path: str = "openAPIV3Schema") -> list[str]:
    """Return why ``schema`` is not a valid structural schema (empty list when it is).

    Each entry reads like a kube field error, ``<path>: <Type>: <detail>``, e.g.
    ``openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified
    object fields``; A1 prefixes ``spec.versions[i].schema.`` and answers 422. Checks: a type on
    every specified node (unless int-or-string or preserve-unknown-fields), no ``$ref``, no
    ``additionalProperties`` with ``properties`` or set to false, no ``uniqueItems``, arrays have
    ``items``, value validations only inside allOf/anyOf/oneOf/not, root metadata limited to
    name/generateName, list/map types well-formed, valid regex patterns, defaults that validate.
    """
    errs: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path}: Required value: must not be empty"]
    t = schema.get("type")
    if not t:
        errs.append(f"{path}.type: Required value: must not be empty at the root")
    elif t != "object":
        errs.append(f"{path}.type: Invalid value: {go_value(t)}: must be object at the root")
    if schema.get("nullable"):
        errs.append(f"{path}.nullable: Forbidden: must be false at the root")
    meta = (schema.get("properties") or {}).get("metadata")
    if isinstance(meta, dict):
        extra = set(meta) - {"type", "properties", "description"}
        names = set(meta.get("properties") or {}) - {"name", "generateName"}
        if extra or names or meta.get("type", "object") != "object":
            errs.append(
                f"{path}.properties[metadata]: Forbidden: must not specify anything other than name and "
                "generateName, but metadata is implicitly specified"
            )
    _check_node(schema, path, "at the root", errs, in_metadata=False)
    if not errs and schema.get("properties"):
        _check_defaults(_Node(schema), path, errs)
    return errs


_CAUSE_REASONS = {
    "Required value": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
    "Invalid value": "FieldValueInvalid",
    "Unsupported value": "FieldValueNotSupported",
}


def structural_causes(schema: dict[str, Any], *, field_prefix: str = "spec.validation.openAPIV3Schema") -> list[Cause]:
    """:func:`structural_errors` as StatusCauses for the CRD's 422 (field split from message).

    ``field_prefix`` replaces ``openAPIV3Schema``, e.g. ``spec.versions[0].schema.openAPIV3Schema``
    gives ``{"field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
    "reason": "FieldValueRequired", "message": "Required value: must not be empty for specified
    object fields"}``.
    """
    out: list[Cause] = []
    for e in structural_errors(schema, path=field_prefix):
        field, _, message = e.partition(": ")
        reason = next((r for p, r in _CAUSE_REASONS.items() if message.startswith(p)), "FieldValueInvalid")
        out.append(_cause(reason, field, message))
    return out


def _check_node(s: dict[str, Any], p: str, where: str, errs: list[str], *, in_metadata: bool) -> None:
    if "$ref" in s:
        errs.append(f"{p}.$ref: Forbidden: $ref is not supported")
    t = s.get("type")
    ios = bool(s.get("x-kubernetes-int-or-string"))
    preserve = s.get("x-kubernetes-preserve-unknown-fields")
    if preserve is False:
        errs.append(f"{p}.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined")
    if ios and t:
        errs.append(f"{p}.type: Invalid value: {go_value(t)}: must be empty if x-kubernetes-int-or-string is true")
    elif not t and not ios and not preserve and where != "at the root":
        errs.append(f"{p}.type: Required value: must not be empty for specified {where}")
    elif t and t not in _TYPES:
        errs.append(f"{p}.type: Unsupported value: {go_value(t)}: supported values: " + ", ".join(f'"{x}"' for x in _TYPES))
    if s.get("x-kubernetes-embedded-resource"):
        if t != "object":
            errs.append(f"{p}.type: Invalid value: {go_value(t or '')}: must be object if x-kubernetes-embedded-resource is true")
        if not s.get("properties") and not preserve:
            errs.append(
                f"{p}.properties: Required value: must not be empty if x-kubernetes-embedded-resource is true "
                "without x-kubernetes-preserve-unknown-fields"
            )
    if in_metadata and "default" in s:
        errs.append(f"{p}.default: Forbidden: must not be set for metadata")
    ap = s.get("additionalProperties")
    if ap is not None and s.get("properties"):
        errs.append(f"{p}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive")
    if ap is False:
        errs.append(f"{p}.additionalProperties: Forbidden: additionalProperties cannot be set to false")
    if s.get("uniqueItems"):
        errs.append(f"{p}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic")
    pat = s.get("pattern")
    if pat is not None:
        try:
            re.compile(pat)
        except (re.error, TypeError) as e:
            errs.append(f"{p}.pattern: Invalid value: {go_value(pat)}: must be a valid regular expression, but isn't: {e}")
    items = s.get("items")
    if t == "array" and items is None:
        errs.append(f"{p}.items: Required value: must be specified")
    if isinstance(items, list):
        errs.append(f"{p}.items: Forbidden: items must be a schema object and not an array")
    elif isinstance(items, dict):
        _check_node(items, f"{p}.items", "array items", errs, in_metadata=False)
    _check_list_type(s, p, errs)
    mt = s.get("x-kubernetes-map-type")
    if mt is not None and mt not in ("granular", "atomic"):
        errs.append(f'{p}.x-kubernetes-map-type: Unsupported value: {go_value(mt)}: supported values: "atomic", "granular"')
    for k, sub in (s.get("properties") or {}).items():
        if not isinstance(sub, dict):
            errs.append(f"{p}.properties[{k}]: Invalid value: {go_value(sub)}: must be a schema object")
            continue
        meta = in_metadata or (where == "at the root" and k == "metadata")
        _check_node(sub, f"{p}.properties[{k}]", "object fields", errs, in_metadata=meta)
    if isinstance(ap, dict):
        _check_node(ap, f"{p}.additionalProperties", "object fields", errs, in_metadata=in_metadata)
    for j in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(s.get(j) or []):
            _check_junctor(sub, f"{p}.{j}[{i}]", ios, errs, s)
    if isinstance(s.get("not"), dict):
        _check_junctor(s["not"], f"{p}.not", ios, errs, s)


def _check_junctor(s: dict[str, Any], p: str, ios: bool, errs: list[str], outer: dict[str, Any] | None) -> None:
    """Value validations only; every property/items they mention exists in the structural part."""
    for k in _JUNCTOR_FORBIDDEN:
        if k in s and not (ios and k == "type" and s[k] in ("integer", "string")):
            errs.append(f"{p}.{k}: Forbidden: must be empty to be structural")
    for k in s:
        if k.startswith("x-kubernetes-"):
            errs.append(f"{p}.{k}: Forbidden: must be undefined to be structural")
    outer_props = (outer or {}).get("properties") or {}
    outer_items = (outer or {}).get("items")
    for k, sub in (s.get("properties") or {}).items():
        if k not in outer_props and not (outer or {}).get("x-kubernetes-preserve-unknown-fields"):
            errs.append(f"{p}.properties[{k}]: Required value: must be specified in the structural part "
                        "(outside of allOf, anyOf, oneOf and not)")  # fmt: skip
        if isinstance(sub, dict):
            nested = outer_props.get(k)
            _check_junctor(sub, f"{p}.properties[{k}]", False, errs, nested if isinstance(nested, dict) else None)
    if isinstance(s.get("items"), dict):
        if not isinstance(outer_items, dict) and not (outer or {}).get("x-kubernetes-preserve-unknown-fields"):
            errs.append(f"{p}.items: Required value: must be specified in the structural part (outside of allOf, anyOf, oneOf and not)")
        _check_junctor(s["items"], f"{p}.items", False, errs, outer_items if isinstance(outer_items, dict) else None)


def _check_list_type(s: dict[str, Any], p: str, errs: list[str]) -> None:
    lt = s.get("x-kubernetes-list-type")
    keys = s.get("x-kubernetes-list-map-keys") or []
    if lt is None:
        if keys:
            errs.append(f"{p}.x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty")
        return
    if lt not in ("atomic", "set", "map"):
        errs.append(f'{p}.x-kubernetes-list-type: Unsupported value: {go_value(lt)}: supported values: "atomic", "set", "map"')
        return
    if s.get("type") != "array":
        errs.append(f"{p}.x-kubernetes-list-type: Invalid value: {go_value(lt)}: must only be used if type is array")
        return
    raw_items = s.get("items")
    items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {}
    if lt == "map":
        if not keys:
            errs.append(f"{p}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map")
        if items.get("type") != "object":
            errs.append(f"{p}.items.type: Invalid value: {go_value(items.get('type') or '')}: must be object if parent array's x-kubernetes-list-type is map")
        props = items.get("properties") or {}
        required = set(items.get("required") or [])
        for k in keys:
            if k not in props:
                errs.append(f"{p}.x-kubernetes-list-map-keys: Invalid value: {go_value(k)}: entries must all be names of item properties")
            elif props[k].get("type") not in ("string", "integer", "number", "boolean") and not props[k].get("x-kubernetes-int-or-string"):
                errs.append(f"{p}.items.properties[{k}].type: Invalid value: {go_value(props[k].get('type') or '')}: must be a scalar type if parent array's x-kubernetes-list-type is map")
            elif k not in required and "default" not in props[k]:
                errs.append(f"{p}.items.properties[{k}]: Invalid value: {go_value(k)}: all map keys must be required or have a default value")
    elif keys:
        errs.append(f"{p}.x-kubernetes-list-type: Invalid value: {go_value(lt)}: must be map if x-kubernetes-list-map-keys is non-empty")
    if lt == "set" and items.get("type") in ("object", "array") and items.get("x-kubernetes-map-type") != "atomic" and items.get("x-kubernetes-list-type") != "atomic":
        errs.append(f"{p}.items: Invalid value: {go_value(items.get('type'))}: must be scalar or atomic if x-kubernetes-list-type is set")


def _check_defaults(node: _Node, p: str, errs: list[str]) -> None:
    """Each default must validate against its own node and contain nothing that pruning drops."""
    for k, sub in node.properties.items():
        _check_default_at(sub, f"{p}.properties[{k}]", errs)
    if node.additional is not None:
        _check_default_at(node.additional, f"{p}.additionalProperties", errs)
    if node.items is not None:
        _check_default_at(node.items, f"{p}.items", errs)


def _check_default_at(node: _Node, p: str, errs: list[str]) -> None:
    if node.has_default:
        value = _deepcopy(node.default_value)
        if value is None and not node.nullable:
            errs.append(f"{p}.default: Invalid value: \"null\": must not be null unless nullable is true")
        else:
            for c in _validate_default(node, value):
                errs.append(f"{p}.{c['field']}: {c['message']}")
            pruned: list[str] = []
            node.prune(value, "", pruned)
            for x in pruned:
                errs.append(f"{p}.default: Invalid value: {go_value(node.default_value)}: must not have unknown fields, got {x}")
    _check_defaults(node, p, errs)


def _validate_default(node: _Node, value: Any) -> list[Cause]:
    out: list[Cause] = []
    node.prune_nulls(value)
    node.apply_default(value)
    node.validate(value, "default", out)
    return out


# --- x-kubernetes-validations: a CEL subset (apiextensions "Validation rules") ------------------
#
# Supported: literals (int, double, string, bool, null, list, map), self / oldSelf, field
# selection and indexing, has(), size(), int()/double()/string(), the operators ! - * / % + -
# < <= > >= == != in && || ?:, string methods startsWith/endsWith/contains/matches/lowerAscii/
# upperAscii/trim, the strings extension's split/substring/join, list/map macros
# all/exists/exists_one/filter/map, and the Kubernetes IP/CIDR library (Kubernetes 1.31+,
# k8s.io/apiserver/pkg/cel/library ip.go and cidr.go): isIP, isCIDR, ip(), cidr(),
# ip.isCanonical(), an IP's family/isUnspecified/isLoopback/isLinkLocalMulticast/
# isLinkLocalUnicast/isGlobalUnicast and a CIDR's ip/masked/prefixLength/containsIP/containsCIDR,
# with ip and cidr values (Python ``ipaddress`` addresses and interfaces) compared by ==. A rule
# calling any other function is skipped (treated as passing) rather than rejecting a CRD the real
# server would accept; tests/unit/apiserver checks that no rule of config/crd is skipped.


class CelError(Exception):
    """A CEL rule failed to evaluate (kube reports it as an invalid value) or to parse."""


class _Unsupported(CelError):
    pass


_CEL_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>0x[0-9a-fA-F]+u?|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?|\d+u?)
    | (?P<str>[rR]?(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'))
    | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    )""",
    re.X,
)


def _cel_lex(src: str) -> list[tuple[str, Any]]:
    toks: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(src):
        if src[pos:].strip() == "":
            break
        m = _CEL_TOKEN.match(src, pos)
        if m is None:
            raise _Unsupported(f"unexpected character at {pos}")
        pos = m.end()
        if m.group("num") is not None:
            t = m.group("num").rstrip("u")
            toks.append(("lit", int(t, 16) if t.startswith("0x") else (float(t) if any(c in t for c in ".eE") else int(t))))
        elif m.group("str") is not None:
            raw = m.group("str")
            if raw[0] in "rR":
                toks.append(("lit", raw[2:-1]))
            else:
                try:
                    toks.append(("lit", json.loads('"' + raw[1:-1].replace('"', '\\"').replace("\\'", "'") + '"')))
                except ValueError as e:
                    raise _Unsupported(f"string literal {raw}") from e
        elif m.group("id") is not None:
            word = m.group("id")
            if word in ("true", "false", "null"):
                toks.append(("lit", {"true": True, "false": False, "null": None}[word]))
            elif word == "in":
                toks.append(("op", "in"))
            else:
                toks.append(("id", word))
        else:
            toks.append(("op", m.group("op")))
    toks.append(("eof", None))
    return toks


_BINARY_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
                "+": 4, "-": 4, "*": 5, "/": 5, "%": 5}  # fmt: skip


class _CelParser:
    def __init__(self, src: str) -> None:
        self.toks = _cel_lex(src)
        self.i = 0

    def peek(self) -> tuple[str, Any]:
        return self.toks[self.i]

    def take(self, kind: str | None = None, value: Any = None) -> tuple[str, Any]:
        tok = self.toks[self.i]
        if (kind and tok[0] != kind) or (value is not None and tok[1] != value):
            raise _Unsupported(f"unexpected token {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        e = self.expr()
        self.take("eof")
        return e

    def expr(self) -> Any:
        cond = self.binary(1)
        if self.peek() == ("op", "?"):
            self.take()
            a = self.expr()
            self.take("op", ":")
            return ("?", cond, a, self.expr())
        return cond

    def binary(self, min_prec: int) -> Any:
        left = self.unary()
        while True:
            kind, op = self.peek()
            prec = _BINARY_PREC.get(op) if kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            self.take()
            left = ("bin", op, left, self.binary(prec + 1))

    def unary(self) -> Any:
        if self.peek() in (("op", "!"), ("op", "-")):
            op = self.take()[1]
            return ("un", op, self.unary())
        return self.postfix(self.primary())

    def args(self, close: str) -> list[Any]:
        out: list[Any] = []
        while self.peek() != ("op", close):
            out.append(self.expr())
            if self.peek() == ("op", ","):
                self.take()
        self.take("op", close)
        return out

    def primary(self) -> Any:
        kind, v = self.take()
        if kind == "lit":
            return ("lit", v)
        if kind == "id":
            if self.peek() == ("op", "("):
                self.take()
                return ("call", v, None, self.args(")"))
            return ("var", v)
        if v == "(":
            e = self.expr()
            self.take("op", ")")
            return e
        if v == "[":
            return ("list", self.args("]"))
        if v == "{":
            items = []
            while self.peek() != ("op", "}"):
                k = self.expr()
                self.take("op", ":")
                items.append((k, self.expr()))
                if self.peek() == ("op", ","):
                    self.take()
            self.take("op", "}")
            return ("map", items)
        raise _Unsupported(f"unexpected token {v!r}")

    def postfix(self, e: Any) -> Any:
        while True:
            if self.peek() == ("op", "."):
                self.take()
                name = self.take("id")[1]
                if self.peek() == ("op", "("):
                    self.take()
                    e = ("call", name, e, self.args(")"))
                else:
                    e = ("sel", e, name)
            elif self.peek() == ("op", "["):
                self.take()
                idx = self.expr()
                self.take("op", "]")
                e = ("idx", e, idx)
            else:
                return e


def _called(node: Any) -> set[str]:
    """Names of the functions and methods ``node`` (a parsed rule) calls."""
    if isinstance(node, tuple):
        own = {node[1]} if node and node[0] == "call" else set()
        return own.union(*(_called(x) for x in node))
    if isinstance(node, list):
        return set().union(*(_called(x) for x in node))
    return set()


def _uses_old_self(node: Any) -> bool:
    if isinstance(node, tuple):
        if node == ("var", "oldSelf"):
            return True
        return any(_uses_old_self(x) for x in node)
    if isinstance(node, list):
        return any(_uses_old_self(x) for x in node)
    return False


_MISSING = object()


def _cel_eval(node: Any, env: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "var":
        if node[1] not in env:
            raise _Unsupported(f"undeclared reference to '{node[1]}'")
        return env[node[1]]
    if kind == "list":
        return [_cel_eval(x, env) for x in node[1]]
    if kind == "map":
        return {_cel_eval(k, env): _cel_eval(v, env) for k, v in node[1]}
    if kind == "sel":
        obj = _cel_eval(node[1], env)
        if not isinstance(obj, dict):
            raise CelError(f"no such key: {node[2]}")
        if node[2] not in obj:
            raise CelError(f"no such key: {node[2]}")
        return obj[node[2]]
    if kind == "idx":
        obj, i = _cel_eval(node[1], env), _cel_eval(node[2], env)
        try:
            return obj[i]
        except (KeyError, IndexError, TypeError):
            raise CelError(f"no such key: {i}" if isinstance(obj, dict) else f"index out of bounds: {i}") from None
    if kind == "?":
        return _cel_eval(node[2] if _cel_bool(_cel_eval(node[1], env)) else node[3], env)
    if kind == "un":
        v = _cel_eval(node[2], env)
        if node[1] == "!":
            return not _cel_bool(v)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CelError("no such overload: -_")
        return -v
    if kind == "bin":
        return _cel_binary(node, env)
    if kind == "call":
        return _cel_call(node, env)
    raise _Unsupported(kind)


def _cel_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise CelError("no such overload: expected bool")
    return v


def _cel_binary(node: Any, env: dict[str, Any]) -> Any:
    op = node[1]
    if op in ("&&", "||"):
        # CEL's commutative logic: an error on one side is absorbed when the other decides.
        try:
            a: Any = _cel_bool(_cel_eval(node[2], env))
        except _Unsupported:
            raise
        except CelError as e:
            a = e
        if a is (op == "||"):
            return a
        b = _cel_bool(_cel_eval(node[3], env))
        if b is (op == "||"):
            return b
        if isinstance(a, CelError):
            raise a
        return b
    a, b = _cel_eval(node[2], env), _cel_eval(node[3], env)
    if op == "==":
        return json_equal(a, b)
    if op == "!=":
        return not json_equal(a, b)
    if op == "in":
        if isinstance(b, dict):
            return a in b
        if isinstance(b, list):
            return any(json_equal(a, x) for x in b)
        raise CelError("no such overload: in")
    try:
        if op in ("<", "<=", ">", ">="):
            if isinstance(a, bool) != isinstance(b, bool):
                raise TypeError
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        if op == "+":
            if isinstance(a, bool) or isinstance(b, bool) or (type(a) is not type(b) and not (
                isinstance(a, int | float) and isinstance(b, int | float)
            )):
                raise TypeError
            return a + b
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
            raise TypeError
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0 and isinstance(b, int):
            raise CelError("division by zero" if op == "/" else "modulus by zero")
        if op == "/":
            return int(a / b) if isinstance(a, int) and isinstance(b, int) else a / b
        return int(math.fmod(a, b)) if isinstance(a, int) and isinstance(b, int) else math.fmod(a, b)
    except TypeError:
        raise CelError(f"no such overload: {op}") from None


_MACROS = ("all", "exists", "exists_one", "filter", "map")


def _cel_call(node: Any, env: dict[str, Any]) -> Any:
    _, name, target, args = node
    if target is None and name == "has":
        if len(args) != 1 or args[0][0] != "sel":
            raise _Unsupported("has() needs a field selection")
        obj = _cel_eval(args[0][1], env)
        return isinstance(obj, dict) and args[0][2] in obj
    if target == ("var", "ip") and name == "isCanonical" and "ip" not in env:
        # ip.isCanonical(string): a namespaced function, not a method of a variable.
        vals = [_cel_eval(a, env) for a in args]
        if len(vals) != 1 or not isinstance(vals[0], str):
            raise CelError("no such overload: ip.isCanonical")
        addr = _cel_parse_ip(vals[0])
        return str(addr) == vals[0]
    if target is not None and name in _MACROS:
        coll = _cel_eval(target, env)
        if len(args) != 2 or args[0][0] != "var":
            raise _Unsupported(f"{name} macro form")
        var = args[0][1]
        items = list(coll) if isinstance(coll, dict | list) else None
        if items is None:
            raise CelError(f"no such overload: {name}")
        results = [(x, _cel_eval(args[1], {**env, var: x})) for x in items]
        if name == "map":
            return [r for _, r in results]
        flags = [_cel_bool(r) for _, r in results]
        if name == "all":
            return all(flags)
        if name == "exists":
            return any(flags)
        if name == "exists_one":
            return sum(flags) == 1
        return [x for (x, _), f in zip(results, flags, strict=True) if f]
    vals = [_cel_eval(a, env) for a in args]
    recv = _cel_eval(target, env) if target is not None else _MISSING
    if name in _NET_FUNCTIONS:
        got = _cel_net(name, recv, vals)
        if got is not _MISSING:
            return got
    if recv is not _MISSING:
        vals = [recv, *vals]
    return _cel_function(name, vals)


@functools.lru_cache(maxsize=4096)  # one address is parsed by several rules of one write
def _cel_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` parses to under the Kubernetes CEL IP library's rules (Go
    ``netip.ParseAddr``: no leading zeros in IPv4 octets; then no zone and no IPv4-mapped IPv6
    address), else None. Source: k8s.io/apiserver/pkg/cel/library/ip.go ``parseIPAddr``."""
    if "%" in text:
        return None
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return None
    return addr


@functools.lru_cache(maxsize=4096)
def _cel_is_cidr(text: str) -> bool:
    """Kubernetes CEL ``isCIDR``: an address (as ``_cel_ip``), ``/`` and a decimal prefix length
    without leading zeros, at most the address's bit length (Go ``netip.ParsePrefix``); host bits
    may be set. Source: k8s.io/apiserver/pkg/cel/library/cidr.go ``parseCIDR``."""
    address, slash, bits = text.rpartition("/")
    if not slash or re.fullmatch(r"0|[1-9][0-9]{0,2}", bits) is None:
        return False
    addr = _cel_ip(address)
    return addr is not None and int(bits) <= addr.max_prefixlen


_CelIP = ipaddress.IPv4Address | ipaddress.IPv6Address
_CelCIDR = ipaddress.IPv4Interface | ipaddress.IPv6Interface
"""A CEL ``net.IPAddr`` value is an address; a ``net.CIDR`` value an interface (address with its
prefix length, host bits kept, as Go's ``netip.Prefix``). An interface is also an address in
Python: test for ``_CelCIDR`` first."""


def _is_cel_ip(v: Any) -> bool:
    return isinstance(v, _CelIP) and not isinstance(v, _CelCIDR)


def _cel_parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``ip(text)``; raises CelError as the IP library does for what ``isIP`` refuses."""
    addr = _cel_ip(text)
    if addr is None:
        raise CelError(f"IP Address {json.dumps(text)} parse error during conversion from string")
    return addr


def _cel_parse_cidr(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """``cidr(text)``; raises CelError as the CIDR library does for what ``isCIDR`` refuses."""
    if not _cel_is_cidr(text):
        raise CelError(f"network address parse error during conversion from string: {json.dumps(text)}")
    return ipaddress.ip_interface(text)


def _link_local_multicast(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go ``netip.Addr.IsLinkLocalMulticast``: 224.0.0.0/24; ff02::/16 with any flags (ffX2::)."""
    if a.version == 4:
        return int(a) >> 8 == 0xE00000
    return (int(a) >> 112) & 0xFF0F == 0xFF02


def _global_unicast(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go ``netip.Addr.IsGlobalUnicast`` (not Python's ``is_global``: private and ULA addresses
    count): not unspecified, loopback, multicast, link-local unicast nor 255.255.255.255."""
    if a.version == 4 and int(a) == 0xFFFFFFFF:
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


_IP_METHODS: dict[str, Callable[[Any], Any]] = {
    "family": lambda a: a.version,
    "isUnspecified": lambda a: a.is_unspecified,
    "isLoopback": lambda a: a.is_loopback,
    "isLinkLocalMulticast": _link_local_multicast,
    "isLinkLocalUnicast": lambda a: a.is_link_local,
    "isGlobalUnicast": _global_unicast,
}
_CIDR_METHODS = ("ip", "masked", "prefixLength", "containsIP", "containsCIDR")
_NET_FUNCTIONS = frozenset({"ip", "cidr", *_IP_METHODS, *_CIDR_METHODS})


def _cel_net(name: str, recv: Any, vals: list[Any]) -> Any:
    """The Kubernetes CEL IP/CIDR library's functions and methods (``ip("10.0.0.1")``,
    ``cidr(s).containsIP(ip)``...); ``_MISSING`` when ``name`` does not apply to these values.
    Source: k8s.io/apiserver/pkg/cel/library ip.go, cidr.go (Go ``net/netip`` semantics)."""
    if recv is _MISSING:
        if name in ("ip", "cidr") and len(vals) == 1 and isinstance(vals[0], str):
            return _cel_parse_ip(vals[0]) if name == "ip" else _cel_parse_cidr(vals[0])
        return _MISSING
    if _is_cel_ip(recv) and name in _IP_METHODS and not vals:
        return _IP_METHODS[name](recv)
    if not isinstance(recv, _CelCIDR):
        return _MISSING
    if not vals:
        if name == "ip":
            return recv.ip
        if name == "masked":
            return ipaddress.ip_interface(recv.network)
        if name == "prefixLength":
            return recv.network.prefixlen
        return _MISSING
    if len(vals) != 1:
        return _MISSING
    arg = vals[0]
    if name == "containsIP":
        addr = _cel_parse_ip(arg) if isinstance(arg, str) else arg
        if not _is_cel_ip(addr):
            raise CelError("no such overload: containsIP")
        return addr.version == recv.version and addr in recv.network
    if name == "containsCIDR":
        other = _cel_parse_cidr(arg) if isinstance(arg, str) else arg
        if not isinstance(other, _CelCIDR):
            raise CelError("no such overload: containsCIDR")
        # The other network lies inside this one (host bits of either ignored; measured on
        # kube-apiserver v1.34: cidr('10.0.0.5/24').containsCIDR('10.0.0.128/25') is true).
        return (other.version == recv.version and recv.network.prefixlen <= other.network.prefixlen
                and other.network.network_address in recv.network)
    return _MISSING


_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = 1 << 63


def _cel_int(v: Any) -> int:
    """CEL ``int()``: of a string, Go ``strconv.ParseInt(s, 10, 64)`` (no spaces nor ``_``); of a
    double, truncated toward zero; out of the int64 range is an error."""
    if isinstance(v, str) and _GO_INT.fullmatch(v) is None:
        raise CelError(f"cannot convert {json.dumps(v)} to int")
    out = int(v)
    if not -_INT64 <= out < _INT64:
        raise CelError("integer overflow")
    return out


def _cel_split(s: str, sep: str, n: int = -1) -> list[str]:
    """Strings extension ``split``: Go ``strings.SplitN`` (``n`` < 0 all, 0 none, else at most
    ``n`` parts; an empty separator splits into characters)."""
    if n == 0:
        return []
    parts = list(s) if sep == "" else s.split(sep)
    if 0 < n < len(parts):
        parts = [*parts[: n - 1], sep.join(parts[n - 1:])]
    return parts


def _cel_substring(s: str, start: int, end: int | None = None) -> str:
    """Strings extension ``substring`` (code point indices; errors as cel-go's)."""
    stop = len(s) if end is None else end
    if start < 0 or start > len(s):
        raise CelError(f"index out of range: {start}")
    if stop > len(s):
        raise CelError(f"index out of range: {stop}")
    if stop < start:
        raise CelError(f"invalid substring range. start: {start}, end: {stop}")
    return s[start:stop]


def _cel_function(name: str, vals: list[Any]) -> Any:
    try:
        if name == "split" and len(vals) in (2, 3) and isinstance(vals[0], str) and isinstance(vals[1], str):
            if len(vals) == 3 and (isinstance(vals[2], bool) or not isinstance(vals[2], int)):
                raise TypeError
            return _cel_split(*vals)
        if name == "substring" and len(vals) in (2, 3) and isinstance(vals[0], str):
            if any(isinstance(i, bool) or not isinstance(i, int) for i in vals[1:]):
                raise TypeError
            return _cel_substring(*vals)
        if name == "join" and len(vals) in (1, 2) and isinstance(vals[0], list):
            sep = vals[1] if len(vals) == 2 else ""
            if not isinstance(sep, str) or not all(isinstance(x, str) for x in vals[0]):
                raise TypeError
            return sep.join(vals[0])
        if name in ("isIP", "isCIDR") and len(vals) == 1:
            if not isinstance(vals[0], str):
                raise TypeError
            return _cel_ip(vals[0]) is not None if name == "isIP" else _cel_is_cidr(vals[0])
        if name == "size" and len(vals) == 1:
            if isinstance(vals[0], str | list | dict):
                return len(vals[0])
            raise TypeError
        if name in ("startsWith", "endsWith", "contains", "matches") and len(vals) == 2:
            s, arg = vals
            if not isinstance(s, str) or not isinstance(arg, str):
                raise TypeError
            if name == "startsWith":
                return s.startswith(arg)
            if name == "endsWith":
                return s.endswith(arg)
            if name == "contains":
                return arg in s
            return re.search(arg, s) is not None
        if name in ("lowerAscii", "upperAscii", "trim") and len(vals) == 1 and isinstance(vals[0], str):
            return {"lowerAscii": vals[0].lower(), "upperAscii": vals[0].upper(), "trim": vals[0].strip()}[name]
        if name == "int" and len(vals) == 1:
            return _cel_int(vals[0])
        if name == "double" and len(vals) == 1:
            return float(vals[0])
        if name == "string" and len(vals) == 1:
            v = vals[0]
            return ("true" if v else "false") if isinstance(v, bool) else (go_number(v) if isinstance(v, int | float) else str(v))
    except (TypeError, ValueError, re.error):
        raise CelError(f"no such overload: {name}") from None
    raise _Unsupported(f"function {name}")


_RULE_CACHE: dict[str, Any] = {}


CEL_FUNCTIONS = frozenset({
    "has", "size", "int", "double", "string", "isIP", "isCIDR", "isCanonical",
    "startsWith", "endsWith", "contains", "matches", "lowerAscii", "upperAscii", "trim",
    "split", "substring", "join", *_MACROS, *_NET_FUNCTIONS,
})
"""Every function and method the double evaluates; a rule calling another is skipped."""


_OLD_SELF_CACHE: dict[str, bool] = {}


def _rule_uses_old_self(rule: str, ast: Any) -> bool:
    """Whether ``rule`` (parsed: ``ast``) is a transition rule; cached, as walking the tree on
    every evaluation took half the time of validating a VSphereMachine."""
    hit = _OLD_SELF_CACHE.get(rule)
    if hit is None:
        hit = _OLD_SELF_CACHE[rule] = _uses_old_self(ast)
    return hit


def compile_rule(rule: str) -> Any:
    """The parsed rule, or False when it is outside the subset the double evaluates (skipped)."""
    hit = _RULE_CACHE.get(rule)
    if hit is None:
        try:
            hit = _CelParser(rule).parse()
        except _Unsupported:
            hit = False  # outside the subset: skipped
        else:
            if not _called(hit) <= CEL_FUNCTIONS:
                hit = False
        _RULE_CACHE[rule] = hit
    return hit



_RULE_REASONS = {
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
}


def _run_rules(rules: list[dict[str, Any]], v: Any, old: Any, node_type: str, path: str, out: list[Cause]) -> None:
    """Evaluate ``x-kubernetes-validations`` at one node; transition rules need an old value."""
    for r in rules:
        rule = r.get("rule") or ""
        ast = compile_rule(rule)
        if ast is False:
            continue
        if old is _NO_OLD and _rule_uses_old_self(rule, ast):
            continue
        env = {"self": v, "oldSelf": None if old is _NO_OLD else old}
        try:
            ok = _cel_eval(ast, env) is True
            detail = ""
        except _Unsupported:
            continue
        except CelError as e:
            ok, detail = False, f"{e} evaluating rule: {rule}"
        if ok:
            continue
        if not detail:
            detail = r.get("message") or ""
            if r.get("messageExpression"):
                mast = compile_rule(r["messageExpression"])
                try:
                    m = _cel_eval(mast, env) if mast is not False else None
                except CelError:
                    m = None
                if isinstance(m, str) and m.strip():
                    detail = m
            if not detail:
                detail = f"failed rule: {rule}"
        field = path + (r.get("fieldPath") or "") if r.get("fieldPath") else path
        reason = r.get("reason") or "FieldValueInvalid"
        typ = node_type or "object"
        if reason in _RULE_REASONS:
            prefix = _RULE_REASONS[reason]
            message = f'{prefix}: "{typ}"' if reason == "FieldValueDuplicate" else f"{prefix}: {detail}"
        else:
            reason, message = "FieldValueInvalid", f'Invalid value: "{typ}": {detail}'
        cause = _cause(reason, field.lstrip("."), message)
        out.append(cause)
        rule_causes = _RULE_CAUSES.get()
        if rule_causes is not None:
            rule_causes.append(cause)
