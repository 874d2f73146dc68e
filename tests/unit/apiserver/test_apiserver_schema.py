"""CRD structural schemas: validation causes, defaulting, pruning, structural check (kube rules)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from banlieue.testing.apiserver.schema import (
    apply_defaults,
    compile_rule,
    compile_schema,
    go_number,
    prune,
    structural_causes,
    structural_errors,
    validate,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["cpus"],
            "properties": {
                "cpus": {"type": "integer", "minimum": 1, "maximum": 64},
                "memoryMiB": {"type": "integer", "multipleOf": 4, "default": 1024},
                "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "exclusiveMaximum": True, "maximum": 1},
                "power": {"type": "string", "enum": ["On", "Off"], "default": "On"},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "uid": {"type": "string", "format": "uuid"},
                "when": {"type": "string", "format": "date-time"},
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "minItems": 1, "x-kubernetes-list-type": "set"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": "x"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True},
                "disks": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "sizeGiB": {"type": "integer", "minimum": 1, "default": 10},
                            "mode": {"type": "string", "default": "thin"},
                        },
                    },
                },
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def _obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"cpus": 2, **spec}}


VALID = [
    ("minimal", _obj()),
    ("int-or-string-int", _obj(port=80)),
    ("int-or-string-string", _obj(port="http")),
    ("nullable-null", _obj(note=None)),
    ("float-that-is-integer", _obj(cpus=2.0)),
    ("integer-for-number", _obj(ratio=0.5)),
    ("uuid-format", _obj(uid="6ba7b810-9dad-11d1-80b4-00c04fd430c8")),
    ("date-time-format", _obj(when="2024-01-02T03:04:05Z")),
    ("map-values", _obj(labels={"a": "b"})),
    ("preserve-unknown", _obj(extra={"anything": [1, {"x": None}]})),
    ("embedded-resource", _obj(template={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
    ("embedded-empty-ok", _obj(template={})),
    ("list-map-distinct-keys", _obj(disks=[{"name": "a"}, {"name": "b"}])),
]


@pytest.mark.parametrize("obj", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_objects_have_no_causes(obj: dict[str, Any]) -> None:
    assert validate(obj, SCHEMA) == []


INVALID = [
    ("required", _obj() | {"spec": {}}, "FieldValueRequired", "spec.cpus", "Required value"),
    ("minimum", _obj(cpus=0), "FieldValueInvalid", "spec.cpus", "Invalid value: 0: spec.cpus in body should be greater than or equal to 1"),
    ("maximum", _obj(cpus=65), "FieldValueInvalid", "spec.cpus", "Invalid value: 65: spec.cpus in body should be less than or equal to 64"),
    ("exclusive-minimum", _obj(ratio=0), "FieldValueInvalid", "spec.ratio", "Invalid value: 0: spec.ratio in body should be greater than 0"),
    ("exclusive-maximum", _obj(ratio=1), "FieldValueInvalid", "spec.ratio", "Invalid value: 1: spec.ratio in body should be less than 1"),
    ("multiple-of", _obj(memoryMiB=1023), "FieldValueInvalid", "spec.memoryMiB", "Invalid value: 1023: spec.memoryMiB in body should be a multiple of 4"),
    ("type-string-for-integer", _obj(cpus="two"), "FieldValueTypeInvalid", "spec.cpus", 'Invalid value: "string": spec.cpus in body must be of type integer: "string"'),
    ("type-float-for-integer", _obj(cpus=1.5), "FieldValueTypeInvalid", "spec.cpus", 'Invalid value: "number": spec.cpus in body must be of type integer: "number"'),
    ("type-bool-for-integer", _obj(cpus=True), "FieldValueTypeInvalid", "spec.cpus", 'Invalid value: "boolean": spec.cpus in body must be of type integer: "boolean"'),
    ("null-not-nullable", _obj(name=None), "FieldValueTypeInvalid", "spec.name", 'Invalid value: "null": spec.name in body must be of type string: "null"'),
    ("int-or-string-bool", _obj(port=True), "FieldValueTypeInvalid", "spec.port", 'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"'),
    ("enum", _obj(power="Standby"), "FieldValueNotSupported", "spec.power", 'Unsupported value: "Standby": supported values: "On", "Off"'),
    ("max-length", _obj(name="abcdef"), "FieldValueTooLong", "spec.name", "Too long: may not be more than 5 bytes"),
    ("min-length", _obj(name="a"), "FieldValueInvalid", "spec.name", 'Invalid value: "a": spec.name in body should be at least 2 chars long'),
    ("pattern", _obj(name="AB"), "FieldValueInvalid", "spec.name", "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"),
    ("max-items", _obj(tags=["a", "b", "c"]), "FieldValueTooMany", "spec.tags", "Too many: 3: must have at most 2 items"),
    ("min-items", _obj(tags=[]), "FieldValueInvalid", "spec.tags", "Invalid value: 0: spec.tags in body should have at least 1 items"),
    ("set-duplicate", _obj(tags=["a", "a"]), "FieldValueDuplicate", "spec.tags[1]", 'Duplicate value: "a"'),
    ("map-list-duplicate-key", _obj(disks=[{"name": "a"}, {"name": "a", "sizeGiB": 2}]), "FieldValueDuplicate", "spec.disks[1]", 'Duplicate value: map[string]interface {}{"name":"a"}'),
    ("item-path", _obj(disks=[{"name": "a", "sizeGiB": 0}]), "FieldValueInvalid", "spec.disks[0].sizeGiB", "Invalid value: 0: spec.disks[0].sizeGiB in body should be greater than or equal to 1"),
    ("item-required", _obj(disks=[{"sizeGiB": 1}]), "FieldValueRequired", "spec.disks[0].name", "Required value"),
    ("map-value-type", _obj(labels={"a": 1}), "FieldValueTypeInvalid", "spec.labels.a", 'Invalid value: "integer": spec.labels.a in body must be of type string: "integer"'),
    ("uuid-format", _obj(uid="nope"), "FieldValueTypeInvalid", "spec.uid", 'Invalid value: "nope": spec.uid in body must be of type uuid: "nope"'),
    ("date-time-format", _obj(when="yesterday"), "FieldValueTypeInvalid", "spec.when", 'Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'),
    ("embedded-needs-kind", _obj(template={"apiVersion": "v1"}), "FieldValueRequired", "spec.template.kind", "Required value: must not be empty"),
    ("object-type", _obj() | {"spec": []}, "FieldValueTypeInvalid", "spec", 'Invalid value: "array": spec in body must be of type object: "array"'),
]


@pytest.mark.parametrize(
    ("obj", "reason", "field", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_objects_report_kube_cause(obj: dict[str, Any], reason: str, field: str, message: str) -> None:
    assert validate(obj, SCHEMA) == [{"reason": reason, "field": field, "message": message}]


def test_several_causes_all_reported() -> None:
    causes = validate(_obj(cpus=0, power="x", name="A"), SCHEMA)
    assert {c["field"] for c in causes} == {"spec.cpus", "spec.power", "spec.name"}


def test_path_prefix() -> None:
    causes = validate({"cpus": 0}, SCHEMA["properties"]["spec"], path="spec")
    assert causes[0]["field"] == "spec.cpus"


def test_compiled_schema_is_cached_by_identity() -> None:
    assert compile_schema(SCHEMA) is compile_schema(SCHEMA)
    assert compile_schema(copy.deepcopy(SCHEMA)) is not compile_schema(SCHEMA)


# --- defaulting -------------------------------------------------------------------------------

DEFAULTS = [
    ("absent-field-defaulted", {"spec": {"cpus": 1}}, {"spec": {"cpus": 1, "memoryMiB": 1024, "power": "On"}}),
    ("present-field-kept", {"spec": {"cpus": 1, "power": "Off", "memoryMiB": 8}}, {"spec": {"cpus": 1, "power": "Off", "memoryMiB": 8}}),
    ("null-non-nullable-gets-default", {"spec": {"cpus": 1, "power": None}}, {"spec": {"cpus": 1, "memoryMiB": 1024, "power": "On"}}),
    ("null-without-default-dropped", {"spec": {"cpus": 1, "name": None}}, {"spec": {"cpus": 1, "memoryMiB": 1024, "power": "On"}}),
    ("null-nullable-kept", {"spec": {"cpus": 1, "note": None}}, {"spec": {"cpus": 1, "note": None, "memoryMiB": 1024, "power": "On"}}),
    (
        "array-items-defaulted",
        {"spec": {"cpus": 1, "disks": [{"name": "a"}, {"name": "b", "sizeGiB": 5}]}},
        {"spec": {"cpus": 1, "memoryMiB": 1024, "power": "On", "disks": [{"name": "a", "sizeGiB": 10, "mode": "thin"}, {"name": "b", "sizeGiB": 5, "mode": "thin"}]}},
    ),
    ("map-null-value-defaulted", {"spec": {"cpus": 1, "labels": {"k": None}}}, {"spec": {"cpus": 1, "memoryMiB": 1024, "power": "On", "labels": {"k": "x"}}}),
    ("missing-parent-not-created", {}, {}),
]


@pytest.mark.parametrize(("obj", "want"), [c[1:] for c in DEFAULTS], ids=[c[0] for c in DEFAULTS])
def test_apply_defaults(obj: dict[str, Any], want: dict[str, Any]) -> None:
    apply_defaults(obj, SCHEMA)
    assert obj == want


def test_defaults_are_copies() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "default": {"x": [1]}, "properties": {"x": {"type": "array", "items": {"type": "integer"}}}}}}
    o1: dict[str, Any] = {}
    o2: dict[str, Any] = {}
    apply_defaults(o1, schema)
    apply_defaults(o2, schema)
    o1["a"]["x"].append(2)
    assert o2 == {"a": {"x": [1]}}
    assert schema["properties"]["a"]["default"] == {"x": [1]}


# --- pruning ----------------------------------------------------------------------------------

PRUNE = [
    ("unknown-spec-field", _obj(foo=1), ["spec.foo"]),
    ("unknown-top-level", _obj() | {"bogus": 1}, ["bogus"]),
    ("unknown-metadata-field", _obj() | {"metadata": {"name": "a", "foo": 1}}, ["metadata.foo"]),
    ("array-item-field", _obj(disks=[{"name": "a", "zz": 1}]), ["spec.disks[0].zz"]),
    ("preserve-keeps-unknown", _obj(extra={"x": 1, "known": {"a": "b", "drop": 1}}), ["spec.extra.known.drop"]),
    ("embedded-keeps-type-meta", _obj(template={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}}), ["spec.template.metadata.junk"]),
    ("map-values-recursed", _obj(labels={"a": "b"}), []),
]


@pytest.mark.parametrize(("obj", "paths"), [c[1:] for c in PRUNE], ids=[c[0] for c in PRUNE])
def test_prune(obj: dict[str, Any], paths: list[str]) -> None:
    before = copy.deepcopy(obj)
    assert prune(obj, SCHEMA) == paths
    for p in paths:  # the field is gone from the object
        parent: Any = obj
        for part in p.replace("[", ".[").split(".")[:-1]:
            parent = parent[int(part[1:-1])] if part.startswith("[") else parent[part]
        assert p.rsplit(".", 1)[-1] not in parent
    if not paths:
        assert obj == before


def test_prune_keeps_root_type_meta() -> None:
    obj = {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}}
    assert prune(obj, {"type": "object"}) == []
    assert obj == {"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}}}


# --- structural check -------------------------------------------------------------------------


def _root(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


STRUCTURAL = [
    ("root-needs-type", {"properties": {}}, "openAPIV3Schema.type: Required value: must not be empty at the root"),
    ("root-must-be-object", {"type": "string"}, 'openAPIV3Schema.type: Invalid value: "string": must be object at the root'),
    ("field-needs-type", _root(spec={"properties": {}}), "openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"),
    ("items-need-type", _root(a={"type": "array", "items": {}}), "openAPIV3Schema.properties[a].items.type: Required value: must not be empty for specified array items"),
    ("array-needs-items", _root(a={"type": "array"}), "openAPIV3Schema.properties[a].items: Required value: must be specified"),
    ("no-ref", _root(a={"type": "object", "$ref": "#/x"}), "openAPIV3Schema.properties[a].$ref: Forbidden: $ref is not supported"),
    ("props-and-additional", _root(a={"type": "object", "properties": {"b": {"type": "string"}}, "additionalProperties": {"type": "string"}}), "openAPIV3Schema.properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"),
    ("additional-false", _root(a={"type": "object", "additionalProperties": False}), "openAPIV3Schema.properties[a].additionalProperties: Forbidden: additionalProperties cannot be set to false"),
    ("unique-items", _root(a={"type": "array", "items": {"type": "string"}, "uniqueItems": True}), "openAPIV3Schema.properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"),
    ("junctor-type", _root(a={"type": "string", "anyOf": [{"type": "string"}]}), "openAPIV3Schema.properties[a].anyOf[0].type: Forbidden: must be empty to be structural"),
    ("int-or-string-with-type", _root(a={"type": "string", "x-kubernetes-int-or-string": True}), 'openAPIV3Schema.properties[a].type: Invalid value: "string": must be empty if x-kubernetes-int-or-string is true'),
    ("metadata-only-name", _root(metadata={"type": "object", "properties": {"labels": {"type": "object"}}}), "openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"),
    ("list-map-needs-keys", _root(a={"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}), "openAPIV3Schema.properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"),
    ("bad-pattern", _root(a={"type": "string", "pattern": "("}), "openAPIV3Schema.properties[a].pattern: Invalid value"),
    ("default-must-validate", _root(a={"type": "integer", "minimum": 1, "default": 0}), "openAPIV3Schema.properties[a].default: Invalid value: 0: default in body should be greater than or equal to 1"),
]


@pytest.mark.parametrize(("schema", "msg"), [c[1:] for c in STRUCTURAL], ids=[c[0] for c in STRUCTURAL])
def test_structural_errors(schema: dict[str, Any], msg: str) -> None:
    errs = structural_errors(schema)
    assert any(e.startswith(msg) for e in errs), errs


@pytest.mark.parametrize(
    "schema",
    [
        SCHEMA,
        _root(port={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
        _root(meta={"x-kubernetes-preserve-unknown-fields": True}),
        _root(metadata={"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}),
        _root(a={"type": "string", "anyOf": [{"pattern": "^a"}, {"maxLength": 3}]}),
    ],
    ids=["vm-schema", "int-or-string-anyof", "preserve-without-type", "metadata-name-restriction", "value-validation-junctors"],
)
def test_structural_ok(schema: dict[str, Any]) -> None:
    assert structural_errors(schema) == []


@pytest.mark.parametrize(
    ("value", "want"),
    [(1, "1"), (1.0, "1"), (0.5, "0.5"), (100000.0, "100000"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
     (0.0001, "0.0001"), (0.00001, "1e-05"), (-2.5, "-2.5"), (10**7, "10000000")],
    ids=["int", "integral-float", "half", "below-exp-switch", "million", "seven-digits", "small", "tiny", "negative", "big-int"],
)
def test_go_number_formatting(value: float, want: str) -> None:
    assert go_number(value) == want


def test_float_bound_rendered_like_go() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 1000000}}}
    assert validate({"n": 2000000}, schema)[0]["message"] == "Invalid value: 2000000: n in body should be less than or equal to 1e+06"


def test_structural_causes_split_field_and_reason() -> None:
    causes = structural_causes(_root(spec={"properties": {}}, a={"type": "object", "$ref": "#/x"}),
                               field_prefix="spec.versions[0].schema.openAPIV3Schema")
    assert {"field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].type", "reason": "FieldValueRequired",
            "message": "Required value: must not be empty for specified object fields"} in causes
    assert {"field": "spec.versions[0].schema.openAPIV3Schema.properties[a].$ref", "reason": "FieldValueForbidden",
            "message": "Forbidden: $ref is not supported"} in causes


RATCHET = [
    ("unchanged-invalid-field-passes", _obj(cpus=0), _obj(cpus=0) | {"metadata": {"name": "a", "labels": {"x": "y"}}}, []),
    ("changed-invalid-field-fails", _obj(cpus=0), _obj(cpus=-1), ["spec.cpus"]),
    ("newly-invalid-field-fails", _obj(), _obj(power="x"), ["spec.power"]),
    ("unchanged-list-map-item-by-key", _obj(disks=[{"name": "a", "sizeGiB": 0}]),
     _obj(disks=[{"name": "b", "sizeGiB": 0}, {"name": "a", "sizeGiB": 0}]), ["spec.disks[0].sizeGiB"]),
    ("unchanged-missing-required-in-unchanged-object", {"spec": {"memoryMiB": 4}}, {"spec": {"memoryMiB": 4}, "status": {"phase": "x"}}, []),
]


@pytest.mark.parametrize(("old", "new", "fields"), [c[1:] for c in RATCHET], ids=[c[0] for c in RATCHET])
def test_validation_ratcheting(old: dict[str, Any], new: dict[str, Any], fields: list[str]) -> None:
    assert [c["field"] for c in validate(new, SCHEMA, old=old)] == fields


def test_prune_paths_sorted() -> None:
    obj = _obj(zz=1, aa=2) | {"bogus": 1}
    assert prune(obj, SCHEMA) == ["bogus", "spec.aa", "spec.zz"]


def test_docs_non_structural_example_reports_each_rule() -> None:
    # The "Specifying a structural schema" counter-example from the CRD docs.
    schema = {
        "properties": {
            "foo": {"pattern": "abc"},
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^a"},
                                                          "finalizers": {"type": "array", "items": {"type": "string", "pattern": "my-finalizer"}}}},
        },
        "anyOf": [{"properties": {"bar": {"type": "integer", "minimum": 42}}, "required": ["bar"], "description": "foo bar object"}],
    }
    errs = structural_errors(schema)
    expected = [
        "openAPIV3Schema.type: Required value: must not be empty at the root",
        "openAPIV3Schema.properties[foo].type: Required value",
        "openAPIV3Schema.anyOf[0].properties[bar]: Required value: must be specified in the structural part",
        "openAPIV3Schema.anyOf[0].properties[bar].type: Forbidden",
        "openAPIV3Schema.anyOf[0].description: Forbidden",
        "openAPIV3Schema.properties[metadata]: Forbidden",
    ]
    for want in expected:
        assert any(e.startswith(want) for e in errs), (want, errs)


# --- x-kubernetes-validations (CEL subset) -----------------------------------------------------

CEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.replicas", "message": "replicas must be at least minReplicas"},
                {"rule": "!(has(self.datastore) && has(self.storageClass))", "message": "at most one of datastore or storageClass may be set"},
                {"rule": "[has(self.inline), has(self.ref)].filter(x, x).size() <= 1"},
                {"rule": "self.name.startsWith('vm-') || self.name == ''", "fieldPath": ".name", "reason": "FieldValueForbidden"},
                {"rule": "self.tags.all(t, size(t) < 5) && (self.tags.exists(t, t == 'a') || size(self.tags) == 0)",
                 "messageExpression": "'bad tags: ' + string(size(self.tags))"},
                {"rule": "self.replicas % 2 == 0 ? self.replicas / 2 >= 1 : true"},
            ],
            "properties": {
                "replicas": {"type": "integer"},
                "minReplicas": {"type": "integer"},
                "datastore": {"type": "string"},
                "storageClass": {"type": "string"},
                "inline": {"type": "string"},
                "ref": {"type": "string"},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "uuid": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]},
                "lax": {"type": "string", "x-kubernetes-validations": [{"rule": "self.?foo.orValue('x') == 'x'"}]},
            },
        }
    },
}


def _cel_obj(**spec: Any) -> dict[str, Any]:
    return {"spec": {"replicas": 2, "minReplicas": 1, "name": "vm-a", "tags": ["a"], **spec}}


CEL_CASES = [
    ("all-rules-pass", _cel_obj(), None, []),
    ("cross-field-comparison", _cel_obj(minReplicas=3), None,
     [("FieldValueInvalid", "spec", 'Invalid value: "object": replicas must be at least minReplicas')]),
    ("mutually-exclusive-has", _cel_obj(datastore="d", storageClass="s"), None,
     [("FieldValueInvalid", "spec", 'Invalid value: "object": at most one of datastore or storageClass may be set')]),
    ("filter-size-default-message", _cel_obj(inline="i", ref="r"), None,
     [("FieldValueInvalid", "spec", 'Invalid value: "object": failed rule: [has(self.inline), has(self.ref)].filter(x, x).size() <= 1')]),
    ("field-path-and-reason", _cel_obj(name="x"), None,
     [("FieldValueForbidden", "spec.name", "Forbidden: failed rule: self.name.startsWith('vm-') || self.name == ''")]),
    ("message-expression", _cel_obj(tags=["toolong"]), None, [("FieldValueInvalid", "spec", 'Invalid value: "object": bad tags: 1')]),
    ("missing-field-is-eval-error", {"spec": {"minReplicas": 1, "name": "vm-a", "tags": []}}, None,
     [("FieldValueInvalid", "spec", 'Invalid value: "object": no such key: replicas evaluating rule: self.minReplicas <= self.replicas'),
      ("FieldValueInvalid", "spec", 'Invalid value: "object": no such key: replicas evaluating rule: '
       "self.replicas % 2 == 0 ? self.replicas / 2 >= 1 : true")]),
    ("transition-rule-skipped-on-create", _cel_obj(uuid="u1"), None, []),
    ("transition-rule-unchanged-ok", _cel_obj(uuid="u1", replicas=4), _cel_obj(uuid="u1"), []),
    ("transition-rule-immutable", _cel_obj(uuid="u2"), _cel_obj(uuid="u1"),
     [("FieldValueInvalid", "spec.uuid", 'Invalid value: "string": field is immutable')]),
    ("unsupported-syntax-skipped", _cel_obj(lax="y"), None, []),
]


@pytest.mark.parametrize(("obj", "old", "want"), [c[1:] for c in CEL_CASES], ids=[c[0] for c in CEL_CASES])
def test_cel_validation_rules(obj: dict[str, Any], old: dict[str, Any] | None, want: list[tuple[str, str, str]]) -> None:
    got = [(c["reason"], c["field"], c["message"]) for c in validate(obj, CEL_SCHEMA, old=old)]
    assert got == want


def test_project_crd_rules_evaluate() -> None:
    # Rules as controller-gen writes them in config/crd (immutability and one-of checks).
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "ref": {"type": "object", "x-kubernetes-validations": [{"rule": "has(self.portGroup) != has(self.distributedPortGroup)",
                                                              "message": "exactly one of portGroup or distributedPortGroup must be set"}],
                "properties": {"portGroup": {"type": "string"}, "distributedPortGroup": {"type": "string"}}}}}}}
    assert validate({"spec": {"ref": {"portGroup": "a"}}}, schema) == []
    assert [c["message"] for c in validate({"spec": {"ref": {}}}, schema)] == [
        'Invalid value: "object": exactly one of portGroup or distributedPortGroup must be set'
    ]


# --- the Kubernetes CEL IP/CIDR library and the strings extension ------------------------------
# Expected values are Go net/netip's, which k8s.io/apiserver/pkg/cel/library ip.go and cidr.go
# call (private and ULA addresses are global unicast there; Python's is_global says otherwise).

IP_CASES = [
    ("ip(self).family() == 4", "10.0.0.1", True),
    ("ip(self).family() == 6", "fd00::1", True),
    ("ip(self) == ip('fd00::1')", "fd00:0::1", True),
    ("ip(self) == ip('10.0.0.1')", "fd00::1", False),
    ("ip(self).isGlobalUnicast()", "10.0.0.1", True),
    ("ip(self).isGlobalUnicast()", "fd00::1", True),
    ("ip(self).isGlobalUnicast()", "255.255.255.255", False),
    ("ip(self).isGlobalUnicast()", "224.0.0.1", False),
    ("ip(self).isGlobalUnicast()", "169.254.1.1", False),
    ("ip(self).isGlobalUnicast()", "::", False),
    ("ip(self).isUnspecified()", "0.0.0.0", True),
    ("ip(self).isLoopback()", "127.1.2.3", True),
    ("ip(self).isLoopback()", "::1", True),
    ("ip(self).isLinkLocalUnicast()", "fe80::1", True),
    ("ip(self).isLinkLocalMulticast()", "224.0.0.251", True),
    ("ip(self).isLinkLocalMulticast()", "224.0.1.1", False),
    ("ip(self).isLinkLocalMulticast()", "ff12::1", True),
    ("ip(self).isLinkLocalMulticast()", "ff05::1", False),
    ("ip.isCanonical(self)", "fd00::1", True),
    ("ip.isCanonical(self)", "FD00:0::1", False),
    ("string(ip(self)) == 'fd00::1'", "fd00:0:0::1", True),
    ("cidr(self).prefixLength() == 24", "10.0.0.5/24", True),
    ("cidr(self).ip() == ip('10.0.0.5')", "10.0.0.5/24", True),
    ("cidr(self).masked() == cidr('10.0.0.0/24')", "10.0.0.5/24", True),
    ("cidr(self) == cidr('10.0.0.0/24')", "10.0.0.5/24", False),
    ("string(cidr(self)) == 'fd00::5/64'", "fd00:0::5/64", True),
    ("cidr(self).containsIP('10.0.0.255')", "10.0.0.5/24", True),
    ("cidr(self).containsIP(ip('10.0.1.1'))", "10.0.0.5/24", False),
    ("cidr(self).containsIP('fd00::1')", "fd00::/8", True),
    ("cidr(self).containsIP('fd00::1')", "0.0.0.0/0", False),
    ("cidr(self).containsCIDR('10.0.0.0/25')", "10.0.0.5/24", True),
    ("cidr(self).containsCIDR('10.0.0.128/25')", "10.0.0.5/24", True),
    ("cidr(self).containsCIDR('10.0.1.0/25')", "10.0.0.5/24", False),
    ("cidr(self).containsCIDR('fd00::/64')", "10.0.0.0/0", False),
    ("cidr(self).containsCIDR(cidr('10.0.0.0/16'))", "10.0.0.5/24", False),
    ("self.split('/')[1] == '24' && self.split('.', 2) == ['10', '0.0.5/24']", "10.0.0.5/24", True),
    ("self.split('.', 0) == [] && 'ab'.split('') == ['a', 'b']", "10.0.0.5/24", True),
    ("self.substring(5) == '0.5/24' && self.substring(0, 2) == '10'", "10.0.0.5/24", True),
    ("['a', 'b'].join(', ') == 'a, b' && ['a'].join() == 'a'", "x", True),
    ("int(self.split('.')[3]) == 9", "10.0.0.09", True),
]


@pytest.mark.parametrize(("rule", "value", "want"), IP_CASES, ids=[f"{r} [{v}]" for r, v, _ in IP_CASES])
def test_ip_cidr_library_and_string_extension(rule: str, value: str, want: bool) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "x-kubernetes-validations": [{"rule": rule}]}}}
    assert compile_rule(rule) is not False, "skipped"
    causes = validate({"s": value}, schema)
    assert causes == ([] if want else [{"reason": "FieldValueInvalid", "field": "s",
                                        "message": f'Invalid value: "string": failed rule: {rule}'}])


@pytest.mark.parametrize(("rule", "value", "error"), [
    ("ip(self).isLoopback()", "10.0.0.1/8", 'IP Address "10.0.0.1/8" parse error'),
    ("cidr(self).prefixLength() > 0", "10.0.0.1", 'network address parse error during conversion from string: "10.0.0.1"'),
    ("cidr('10.0.0.0/8').containsIP(self)", "::ffff:10.0.0.1", 'IP Address "::ffff:10.0.0.1" parse error'),
    ("self.substring(4) == ''", "abc", "index out of range: 4"),
    ("int(self) > 0", " 5", 'cannot convert " 5" to int'),
])
def test_ip_cidr_errors_are_evaluation_errors(rule: str, value: str, error: str) -> None:
    """A bad argument is an error evaluating the rule (kube reports it as an invalid value)."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "x-kubernetes-validations": [{"rule": rule}]}}}
    [cause] = validate({"s": value}, schema)
    assert cause["field"] == "s" and error in cause["message"] and f"evaluating rule: {rule}" in cause["message"], cause


def _crd_rules(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [r[k] for r in node.get("x-kubernetes-validations") or [] for k in ("rule", "messageExpression") if k in r]
        return own + [x for v in node.values() for x in _crd_rules(v)]
    if isinstance(node, list):
        return [x for v in node for x in _crd_rules(v)]
    return []


def test_the_double_evaluates_every_rule_of_config_crd() -> None:
    """No rule nor messageExpression of banlieue's CRDs is outside the double's CEL subset (it
    would be skipped: a bad object passing on the double that kube-apiserver refuses)."""
    root = Path(__file__).resolve().parents[3] / "config" / "crd"
    rules = [r for path in sorted(root.glob("*.yaml")) for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader)
             for r in _crd_rules(doc)]
    assert len(rules) > 100
    assert [r for r in rules if compile_rule(r) is False] == []


def _crd_schema(file: str) -> dict[str, Any]:
    doc = yaml.load((Path(__file__).resolve().parents[3] / "config" / "crd" / file).read_text(), Loader=yaml.CSafeLoader)
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize(("servers", "field"), [
    (["10.0.0.53", "fd00::53"], None),
    (["dns.example.com"], "spec.network.devices[0].nameservers[0]"),
    (["10.0.0.53", "10.0.0.53:53"], "spec.network.devices[0].nameservers[1]"),
    ([""], "spec.network.devices[0].nameservers[0]"),
])
def test_vspheremachine_name_servers_are_ip_addresses(servers: list[str], field: str | None) -> None:
    """A VSphereMachine's name servers are IP addresses, as a VirtualMachine's (CRD rule isIP):
    netplan refuses the guest's whole network configuration for one that is not."""
    schema = _crd_schema("infrastructure.banlieue.io_vspheremachines.yaml")
    obj = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine", "metadata": {"name": "m"},
           "spec": {"template": "t", "numCPUs": 1, "memoryMiB": 512,
                    "network": {"devices": [{"name": "eth0", "networkClass": "default", "dhcp4": True, "nameservers": servers}]}}}
    causes = validate(obj, schema)
    assert {c["field"] for c in causes} == (set() if field is None else {field}), causes
