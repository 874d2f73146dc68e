"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) as kube-apiserver applies them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.testing.apiserver.patch import PatchError, json_equal, json_merge_patch, json_patch

# RFC 7386 appendix A test cases (top-level objects only: kube patches whole objects).
MERGE_CASES = [
    ("replace-value", {"a": "b"}, {"a": "c"}, {"a": "c"}),
    ("add-key", {"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ("null-deletes", {"a": "b"}, {"a": None}, {}),
    ("null-deletes-one", {"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ("list-replaces", {"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ("value-to-list", {"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ("nested-merge", {"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ("list-of-objects-replaced", {"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ("null-missing-key-noop", {"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ("object-into-scalar", {"a": "foo"}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ("empty-patch-identity", {"a": {"b": 1}}, {}, {"a": {"b": 1}}),
]


@pytest.mark.parametrize(("target", "patch", "want"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_patch_rfc7386(target: dict[str, Any], patch: dict[str, Any], want: dict[str, Any]) -> None:
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    assert json_merge_patch(target, patch) == want
    assert target == before_t and patch == before_p  # inputs are not mutated


def test_merge_patch_non_object_rejected() -> None:
    with pytest.raises(PatchError):
        json_merge_patch({"a": 1}, [1, 2])


_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3))
_json = st.recursive(
    _scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text("abc", max_size=2), c, max_size=3), max_leaves=8
)
_obj = st.dictionaries(st.text("abc", max_size=2), _json, max_size=4)


def _no_nulls(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _no_nulls(v) for k, v in x.items() if v is not None}
    return x


@given(_obj, _obj)
def test_merge_patch_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = json_merge_patch(target, patch)
    assert json_merge_patch(once, patch) == once


@given(_obj)
def test_merge_patch_self_is_identity_without_nulls(doc: dict[str, Any]) -> None:
    clean = _no_nulls(doc)
    assert json_merge_patch(clean, clean) == clean
    assert json_merge_patch({}, clean) == clean


DOC = {"metadata": {"name": "x", "labels": {"a/b": "1"}}, "spec": {"list": [1, 2, 3], "n": 1}}

PATCH_CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    ("add-key", [{"op": "add", "path": "/spec/m", "value": 2}], {**DOC, "spec": {**DOC["spec"], "m": 2}}),
    ("add-replaces-existing-key", [{"op": "add", "path": "/spec/n", "value": 5}], {**DOC, "spec": {"list": [1, 2, 3], "n": 5}}),
    ("add-array-insert", [{"op": "add", "path": "/spec/list/1", "value": 9}], {**DOC, "spec": {"list": [1, 9, 2, 3], "n": 1}}),
    ("add-array-append-dash", [{"op": "add", "path": "/spec/list/-", "value": 4}], {**DOC, "spec": {"list": [1, 2, 3, 4], "n": 1}}),
    ("add-array-at-end-index", [{"op": "add", "path": "/spec/list/3", "value": 4}], {**DOC, "spec": {"list": [1, 2, 3, 4], "n": 1}}),
    ("remove-key", [{"op": "remove", "path": "/spec/n"}], {**DOC, "spec": {"list": [1, 2, 3]}}),
    ("remove-array-element", [{"op": "remove", "path": "/spec/list/0"}], {**DOC, "spec": {"list": [2, 3], "n": 1}}),
    ("replace", [{"op": "replace", "path": "/spec/n", "value": "s"}], {**DOC, "spec": {"list": [1, 2, 3], "n": "s"}}),
    (
        "escaped-pointer-tilde1",
        [{"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"}],
        {**DOC, "metadata": {"name": "x", "labels": {"a/b": "2"}}},
    ),
    ("move", [{"op": "move", "from": "/spec/n", "path": "/spec/k"}], {**DOC, "spec": {"list": [1, 2, 3], "k": 1}}),
    ("copy", [{"op": "copy", "from": "/spec/n", "path": "/spec/k"}], {**DOC, "spec": {"list": [1, 2, 3], "n": 1, "k": 1}}),
    ("test-pass-then-replace", [{"op": "test", "path": "/spec/n", "value": 1}, {"op": "replace", "path": "/spec/n", "value": 2}], {**DOC, "spec": {"list": [1, 2, 3], "n": 2}}),
    ("test-int-equals-float", [{"op": "test", "path": "/spec/n", "value": 1.0}], DOC),
    ("empty-ops", [], DOC),
]


@pytest.mark.parametrize(("ops", "want"), [c[1:] for c in PATCH_CASES], ids=[c[0] for c in PATCH_CASES])
def test_json_patch(ops: list[dict[str, Any]], want: dict[str, Any]) -> None:
    before = copy.deepcopy(DOC)
    assert json_patch(DOC, ops) == want
    assert before == DOC


BAD_PATCHES = [
    ("test-fails", [{"op": "test", "path": "/spec/n", "value": 2}], "testing value /spec/n failed"),
    ("test-bool-vs-int", [{"op": "test", "path": "/spec/n", "value": True}], "test failed"),
    ("remove-missing", [{"op": "remove", "path": "/spec/zz"}], "missing"),
    ("replace-missing", [{"op": "replace", "path": "/spec/zz", "value": 1}], "replace operation does not apply"),
    ("add-missing-parent", [{"op": "add", "path": "/nope/x", "value": 1}], "missing path"),
    ("index-out-of-range", [{"op": "add", "path": "/spec/list/5", "value": 1}], "invalid index"),
    ("leading-zero-index", [{"op": "replace", "path": "/spec/list/01", "value": 1}], "invalid array index"),
    ("unknown-op", [{"op": "frob", "path": "/spec"}], "Unexpected kind"),
    ("missing-value", [{"op": "add", "path": "/spec/x"}], "missing value"),
    ("move-into-child", [{"op": "move", "from": "/spec", "path": "/spec/x"}], "prefix"),
    ("pointer-without-slash", [{"op": "add", "path": "spec", "value": 1}], "JSON pointer"),
    ("result-not-object", [{"op": "replace", "path": "", "value": [1]}], "object"),
]


@pytest.mark.parametrize(("ops", "msg"), [c[1:] for c in BAD_PATCHES], ids=[c[0] for c in BAD_PATCHES])
def test_json_patch_errors(ops: list[dict[str, Any]], msg: str) -> None:
    before = copy.deepcopy(DOC)
    with pytest.raises(PatchError, match=msg):
        json_patch(DOC, ops)
    assert before == DOC


def test_failed_patch_is_atomic() -> None:
    ops = [{"op": "replace", "path": "/spec/n", "value": 7}, {"op": "test", "path": "/spec/n", "value": 1}]
    with pytest.raises(PatchError):
        json_patch(DOC, ops)
    assert DOC["spec"]["n"] == 1


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(1, 1.0, True), (True, 1, False), ({"a": [1]}, {"a": [1]}, True), ({"a": 1}, {"a": 1, "b": 2}, False), ("1", 1, False)],
    ids=["int-float", "bool-not-int", "nested", "extra-key", "string-not-int"],
)
def test_json_equal(a: Any, b: Any, want: bool) -> None:
    assert json_equal(a, b) is want
