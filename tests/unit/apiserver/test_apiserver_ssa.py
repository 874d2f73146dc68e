"""Server-side apply and managedFields: SMD merge, prune, ownership and conflicts (SSA docs)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.testing.apiserver.ssa import (
    ApplyConflict,
    decode_fields,
    encode_fields,
    server_side_apply,
    update_managed_fields,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "image": {"type": "string"},
                "disks": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "sizeGiB": {"type": "integer"}}},
                },
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def _cfg(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "vm", "namespace": "ns", **meta}}
    if spec is not None:
        out["spec"] = spec
    return out


def _apply(live: dict[str, Any] | None, cfg: dict[str, Any], manager: str, *, force: bool = False, now: str = "2026-01-01T00:00:00Z",
           sub: str | None = None) -> dict[str, Any]:  # fmt: skip
    return server_side_apply(live, cfg, manager=manager, force=force, schema=SCHEMA, subresource=sub, now=now)


def _entry(obj: dict[str, Any], manager: str, operation: str = "Apply") -> dict[str, Any]:
    [e] = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager and e["operation"] == operation]
    return e


def test_first_apply_creates_entry_in_fieldsv1_format() -> None:
    cfg = _cfg({"replicas": 1, "disks": [{"name": "a", "sizeGiB": 10}], "tags": ["x"]}, labels={"app": "vm"})
    before = copy.deepcopy(cfg)
    obj = _apply(None, cfg, "mgr", now="2026-01-01T00:00:01Z")
    assert cfg == before
    assert obj["spec"] == cfg["spec"] and obj["metadata"]["labels"] == {"app": "vm"}
    assert obj["metadata"]["managedFields"] == [{
        "manager": "mgr", "operation": "Apply", "apiVersion": "banlieue.io/v1alpha1", "time": "2026-01-01T00:00:01Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:disks": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:sizeGiB": {}}},
                "f:replicas": {},
                "f:tags": {'v:"x"': {}},
            },
        },
    }]  # fmt: skip


def test_conflict_on_other_managers_field() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a")
    with pytest.raises(ApplyConflict) as ei:
        _apply(obj, _cfg({"replicas": 2}), "b")
    e = ei.value
    assert e.conflicts == [("a", ".spec.replicas")]
    assert e.message == 'Apply failed with 1 conflict: conflict with "a": .spec.replicas'
    assert e.causes == [{"reason": "FieldManagerConflict", "message": 'conflict with "a"', "field": ".spec.replicas"}]


def test_conflict_paths_in_lists_and_multiple() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "disks": [{"name": "a", "sizeGiB": 1}]}), "a")
    with pytest.raises(ApplyConflict) as ei:
        _apply(obj, _cfg({"replicas": 2, "disks": [{"name": "a", "sizeGiB": 2}]}), "b")
    assert ei.value.conflicts == [("a", '.spec.disks[name="a"].sizeGiB'), ("a", ".spec.replicas")]
    assert ei.value.message.startswith('Apply failed with 2 conflicts: conflicts with "a":\n- ')


def test_force_moves_ownership() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "image": "i"}), "a")
    obj = _apply(obj, _cfg({"replicas": 2}), "b", force=True)
    assert obj["spec"] == {"replicas": 2, "image": "i"}
    assert _entry(obj, "a")["fieldsV1"] == {"f:spec": {"f:image": {}}}
    assert _entry(obj, "b")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}


def test_equal_value_is_co_owned_and_survives_one_owner_leaving() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "image": "i"}), "a")
    obj = _apply(obj, _cfg({"replicas": 1}), "b")  # same value: no conflict
    assert _entry(obj, "b")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    obj = _apply(obj, _cfg({"image": "i"}), "a")  # a stops applying replicas; b still owns it
    assert obj["spec"] == {"replicas": 1, "image": "i"}
    obj = _apply(obj, _cfg({}), "b")  # b leaves too: now nobody owns it -> removed
    assert obj["spec"] == {"image": "i"}


def test_omitted_fields_removed_others_kept() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "image": "i"}, labels={"x": "1", "y": "2"}), "a")
    obj = _apply(obj, _cfg({"replicas": 1}, labels={"y": "2"}), "a")
    assert obj["spec"] == {"replicas": 1} and obj["metadata"]["labels"] == {"y": "2"}
    assert obj["metadata"]["name"] == "vm" and obj["metadata"]["namespace"] == "ns"


def test_fields_set_by_update_are_not_pruned_by_apply() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a")
    new = copy.deepcopy(obj)
    new["spec"]["image"] = "j"
    update_managed_fields(obj, new, manager="editor", operation="Update", subresource=None, now="T2", schema=SCHEMA)
    obj = _apply(new, _cfg({"replicas": 3}), "a")
    assert obj["spec"] == {"replicas": 3, "image": "j"}


def test_list_map_merges_by_key_keeping_other_owners_items() -> None:
    obj = _apply(None, _cfg({"disks": [{"name": "a", "sizeGiB": 1}]}), "a")
    obj = _apply(obj, _cfg({"disks": [{"name": "b", "sizeGiB": 2}]}), "b")
    assert obj["spec"]["disks"] == [{"name": "a", "sizeGiB": 1}, {"name": "b", "sizeGiB": 2}]
    obj = _apply(obj, _cfg({"disks": [{"name": "c"}, {"name": "a", "sizeGiB": 1}]}), "a")
    assert [d["name"] for d in obj["spec"]["disks"]] == ["c", "a", "b"]
    obj = _apply(obj, _cfg({"disks": [{"name": "c"}]}), "a")  # a drops its item "a"
    assert obj["spec"]["disks"] == [{"name": "c"}, {"name": "b", "sizeGiB": 2}]


def test_set_list_union_and_removal() -> None:
    obj = _apply(None, _cfg({"tags": ["x", "y"]}), "a")
    obj = _apply(obj, _cfg({"tags": ["z", "y"]}), "b")
    assert obj["spec"]["tags"] == ["x", "z", "y"]
    obj = _apply(obj, _cfg({"tags": []}), "a")
    assert obj["spec"]["tags"] == ["z", "y"]  # y still owned by b


@pytest.mark.parametrize(
    ("field", "first", "second"),
    [("args", ["a", "b"], ["c"]), ("selector", {"a": "1", "b": "2"}, {"c": "3"})],
    ids=["atomic-list-replaced", "atomic-map-replaced"],
)
def test_atomic_values_replace_whole(field: str, first: Any, second: Any) -> None:
    obj = _apply(None, _cfg({field: first}), "a")
    assert _entry(obj, "a")["fieldsV1"] == {"f:spec": {f"f:{field}": {}}}
    obj = _apply(obj, _cfg({field: second}), "a")
    assert obj["spec"][field] == second
    with pytest.raises(ApplyConflict):
        _apply(obj, _cfg({field: first}), "b")


def test_granular_map_keys_owned_separately() -> None:
    obj = _apply(None, _cfg({"env": {"A": "1"}}), "a")
    obj = _apply(obj, _cfg({"env": {"B": "2"}}), "b")
    assert obj["spec"]["env"] == {"A": "1", "B": "2"}


def test_status_ignored_on_main_resource_and_applied_on_status() -> None:
    cfg = _cfg({"replicas": 1})
    cfg["status"] = {"phase": "Running"}
    obj = _apply(None, cfg, "a")
    assert "status" not in obj and "f:status" not in _entry(obj, "a")["fieldsV1"]
    st_cfg = _cfg()
    st_cfg["status"] = {"phase": "Running"}
    obj = _apply(obj, st_cfg, "ctl", sub="status")
    assert obj["status"] == {"phase": "Running"} and obj["spec"] == {"replicas": 1}
    e = _entry(obj, "ctl")
    assert e["subresource"] == "status" and e["fieldsV1"]["f:status"] == {"f:phase": {}}


def test_noop_apply_keeps_time() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a", now="T1")
    again = _apply(obj, _cfg({"replicas": 1}), "a", now="T2")
    assert _entry(again, "a")["time"] == "T1" and again == obj


# --- Update operations --------------------------------------------------------------------------


def test_create_records_update_entry_with_dot_for_new_objects() -> None:
    new = _cfg({"replicas": 1, "env": {"A": "1"}}, labels={"a": "b"})
    update_managed_fields(None, new, manager="kubectl-create", operation="Update", subresource=None, now="T1", schema=SCHEMA)
    assert new["metadata"]["managedFields"] == [{
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "banlieue.io/v1alpha1", "time": "T1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
            "f:spec": {".": {}, "f:env": {".": {}, "f:A": {}}, "f:replicas": {}},
        },
    }]  # fmt: skip


def test_update_takes_fields_from_appliers_then_apply_conflicts() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "image": "i"}), "a")
    new = copy.deepcopy(obj)
    new["spec"]["replicas"] = 5
    update_managed_fields(obj, new, manager="kubectl-edit", operation="Update", subresource=None, now="T2", schema=SCHEMA)
    assert _entry(new, "a")["fieldsV1"] == {"f:spec": {"f:image": {}}}
    assert _entry(new, "kubectl-edit", "Update")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    with pytest.raises(ApplyConflict) as ei:
        _apply(new, _cfg({"replicas": 1, "image": "i"}), "a")
    assert ei.value.causes[0]["message"] == 'conflict with "kubectl-edit" using banlieue.io/v1alpha1 at T2'


def test_update_removal_drops_ownership() -> None:
    obj = _apply(None, _cfg({"replicas": 1, "image": "i"}), "a")
    new = copy.deepcopy(obj)
    del new["spec"]["image"]
    update_managed_fields(obj, new, manager="m", operation="Update", subresource=None, now="T2", schema=SCHEMA)
    assert _entry(new, "a")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert all(e["manager"] != "m" for e in new["metadata"]["managedFields"])  # removing owns nothing


def test_noop_update_changes_nothing() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a")
    new = copy.deepcopy(obj)
    update_managed_fields(obj, new, manager="m", operation="Update", subresource=None, now="T9", schema=SCHEMA)
    assert new == obj


def test_update_same_manager_accumulates() -> None:
    new = _cfg({"replicas": 1})
    update_managed_fields(None, new, manager="m", operation="Update", subresource=None, now="T1", schema=SCHEMA)
    newer = copy.deepcopy(new)
    newer["spec"]["image"] = "i"
    update_managed_fields(new, newer, manager="m", operation="Update", subresource=None, now="T2", schema=SCHEMA)
    e = _entry(newer, "m", "Update")
    assert e["time"] == "T2" and e["fieldsV1"]["f:spec"] == {".": {}, "f:image": {}, "f:replicas": {}}
    assert len(newer["metadata"]["managedFields"]) == 1


@pytest.mark.parametrize("reset", [[], [{}]], ids=["empty-list", "list-of-empty-entry"])
def test_managed_fields_reset(reset: list[Any]) -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a")
    new = copy.deepcopy(obj)
    new["metadata"]["managedFields"] = reset
    update_managed_fields(obj, new, manager="m", operation="Update", subresource=None, now="T2", schema=SCHEMA)
    assert "managedFields" not in new["metadata"]


def test_status_update_recorded_with_subresource() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "a")
    new = copy.deepcopy(obj)
    new["status"] = {"phase": "Ready"}
    update_managed_fields(obj, new, manager="ctl", operation="Update", subresource="status", now="T2", schema=SCHEMA)
    e = _entry(new, "ctl", "Update")
    assert e["subresource"] == "status" and e["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}


def test_entries_sorted_apply_first_then_time() -> None:
    obj = _apply(None, _cfg({"replicas": 1}), "z", now="T1")
    new = copy.deepcopy(obj)
    new["spec"]["image"] = "i"
    update_managed_fields(obj, new, manager="a", operation="Update", subresource=None, now="T0", schema=SCHEMA)
    newer = _apply(new, _cfg({"env": {"k": "v"}}), "b", now="T3")
    assert [(e["operation"], e["manager"]) for e in newer["metadata"]["managedFields"]] == [("Apply", "z"), ("Apply", "b"), ("Update", "a")]


# --- builtins (no schema) -----------------------------------------------------------------------


def test_builtin_known_lists_merge() -> None:
    base = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
    a = copy.deepcopy(base)
    a["metadata"]["finalizers"] = ["x/a"]
    a["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "K", "name": "o1", "uid": "u1"}]
    a["data"] = {"k1": "v1"}
    obj = server_side_apply(None, a, manager="a", force=False, schema=None, now="T1")
    b = copy.deepcopy(base)
    b["metadata"]["finalizers"] = ["x/b"]
    b["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "K", "name": "o2", "uid": "u2"}]
    b["data"] = {"k2": "v2"}
    obj = server_side_apply(obj, b, manager="b", force=False, schema=None, now="T2")
    assert obj["metadata"]["finalizers"] == ["x/a", "x/b"]
    assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == ["u1", "u2"]
    assert obj["data"] == {"k1": "v1", "k2": "v2"}
    assert _entry(obj, "b")["fieldsV1"]["f:metadata"]["f:ownerReferences"] == {
        'k:{"uid":"u2"}': {".": {}, "f:apiVersion": {}, "f:kind": {}, "f:name": {}, "f:uid": {}}
    }


def test_builtin_status_conditions_map_on_type() -> None:
    def cond(t: str, s: str) -> dict[str, str]:
        return {"type": t, "status": s}

    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}, "status": {"conditions": [cond("A", "True")]}}
    obj = server_side_apply(None, ns, manager="a", force=False, schema=None, subresource="status", now="T1")
    ns2 = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}, "status": {"conditions": [cond("B", "False")]}}
    obj = server_side_apply(obj, ns2, manager="b", force=False, schema=None, subresource="status", now="T2")
    assert obj["status"]["conditions"] == [cond("A", "True"), cond("B", "False")]


# --- FieldsV1 encoding --------------------------------------------------------------------------

_pe = st.one_of(
    st.from_regex(r"\Af:[a-z]{1,3}\Z"),
    st.builds(lambda n: 'k:{"name":"' + n + '"}', st.from_regex(r"\A[a-z]{1,2}\Z")),
    st.builds(lambda n: 'v:"' + n + '"', st.from_regex(r"\A[a-z]{1,2}\Z")),
)


@given(st.sets(st.lists(_pe, min_size=1, max_size=4).map(tuple), max_size=12))
def test_fieldsv1_round_trip(paths: set[tuple[str, ...]]) -> None:
    assert decode_fields(encode_fields(paths)) == paths


def test_fieldsv1_order_dot_first_then_fields_then_keys() -> None:
    enc = encode_fields({("f:spec",), ("f:spec", "k:{}"), ("f:spec", "f:b"), ("f:spec", "f:a")})
    assert list(enc["f:spec"]) == [".", "f:a", "f:b", "k:{}"]


def test_first_apply_to_unmanaged_object_records_before_first_apply() -> None:
    live = _cfg({"replicas": 1, "image": "i"})
    with pytest.raises(ApplyConflict) as ei:
        _apply(live, _cfg({"replicas": 2}), "a")
    assert ei.value.conflicts == [("before-first-apply", ".spec.replicas")]
    obj = _apply(live, _cfg({"replicas": 1}), "a", now="T5")
    assert _entry(obj, "before-first-apply", "Update")["fieldsV1"] == {"f:spec": {".": {}, "f:image": {}, "f:replicas": {}}}
    assert _entry(obj, "a")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}


def test_update_managers_capped_into_ancient_changes() -> None:
    obj = _cfg({"env": {}})
    update_managed_fields(None, obj, manager="m00", operation="Update", subresource=None, now="T00", schema=SCHEMA)
    for i in range(1, 12):
        new = copy.deepcopy(obj)
        new["spec"]["env"][f"K{i}"] = "v"
        update_managed_fields(obj, new, manager=f"m{i:02d}", operation="Update", subresource=None, now=f"T{i:02d}", schema=SCHEMA)
        obj = new
    entries = obj["metadata"]["managedFields"]
    assert len(entries) == 10
    ancient = _entry(obj, "ancient-changes", "Update")
    assert set(ancient["fieldsV1"]["f:spec"]["f:env"]) >= {"f:K1", "f:K2"}
    assert "m00" not in {e["manager"] for e in entries} and "m11" in {e["manager"] for e in entries}
