"""Server-side printing Tables: column definitions, typed cells, ages, includeObject (kube rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from banlieue.testing.apiserver.tables import evaluate_jsonpath, human_duration, to_table

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


def _ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


AGES = [
    ("seconds", 5, "5s"),
    ("under-two-minutes-in-seconds", 119, "119s"),
    ("minutes-and-seconds", 182, "3m2s"),
    ("whole-minutes", 300, "5m"),
    ("minutes-under-three-hours", 170 * 60, "170m"),
    ("hours-and-minutes", 3 * 3600 + 5 * 60, "3h5m"),
    ("whole-hours", 4 * 3600, "4h"),
    ("hours-under-two-days", 47 * 3600, "47h"),
    ("days-and-hours", 2 * 86400 + 3 * 3600, "2d3h"),
    ("whole-days", 2 * 86400, "2d"),
    ("days-under-two-years", 400 * 86400, "400d"),
    ("years-and-days", (3 * 365 + 4) * 86400, "3y4d"),
    ("years", 10 * 365 * 86400, "10y"),
    ("small-skew-is-zero", -1, "0s"),
    ("large-skew-invalid", -5, "<invalid>"),
]


@pytest.mark.parametrize(("seconds", "want"), [c[1:] for c in AGES], ids=[c[0] for c in AGES])
def test_human_duration(seconds: float, want: str) -> None:
    assert human_duration(seconds) == want


VM = {
    "apiVersion": "banlieue.io/v1alpha1",
    "kind": "VirtualMachine",
    "metadata": {"name": "vm-1", "namespace": "ns", "creationTimestamp": _ts(65), "resourceVersion": "7"},
    "spec": {"cpus": 2, "ratio": 1, "on": True, "tags": ["a", "b"], "labels": {"x": "y"}},
    "status": {
        "conditions": [{"type": "Progressing", "status": "False"}, {"type": "Ready", "status": "True"}],
        "addresses": [{"address": "10.0.0.1"}, {"address": "10.0.0.2"}],
        "bootTime": _ts(4 * 3600),
    },
}

JSONPATHS = [
    ("field", ".spec.cpus", [2]),
    ("braces", "{.spec.cpus}", [2]),
    ("filter-eq", '.status.conditions[?(@.type=="Ready")].status', ["True"]),
    ("filter-single-quote", ".status.conditions[?(@.type=='Progressing')].status", ["False"]),
    ("filter-ne", '.status.conditions[?(@.type!="Ready")].type', ["Progressing"]),
    ("index", ".status.addresses[0].address", ["10.0.0.1"]),
    ("negative-index", ".status.addresses[-1].address", ["10.0.0.2"]),
    ("wildcard", ".status.addresses[*].address", ["10.0.0.1", "10.0.0.2"]),
    ("quoted-key", ".metadata['name']", ["vm-1"]),
    ("missing", ".spec.nothing", []),
    ("out-of-range", ".status.addresses[5]", []),
]


@pytest.mark.parametrize(("path", "want"), [c[1:] for c in JSONPATHS], ids=[c[0] for c in JSONPATHS])
def test_jsonpath_subset(path: str, want: list[Any]) -> None:
    assert evaluate_jsonpath(path, VM) == want


def test_jsonpath_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        evaluate_jsonpath(".spec.{", VM)


def _crd_table(columns: list[dict[str, Any]], include: str = "Metadata") -> dict[str, Any]:
    return to_table([VM], columns, list_rv="42", continue_token="c1", include_object=include, now=NOW)


def test_table_envelope_and_name_column() -> None:
    t = _crd_table([])
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert t["metadata"] == {"resourceVersion": "42", "continue": "c1"}
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Age"]
    name_col = t["columnDefinitions"][0]
    assert (name_col["type"], name_col["format"], name_col["priority"]) == ("string", "name", 0)
    assert t["rows"][0]["cells"] == ["vm-1", "65s"]


CELLS = [
    ("integer", {"name": "CPUs", "type": "integer", "jsonPath": ".spec.cpus"}, 2),
    ("number-from-int", {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"}, 1.0),
    ("boolean", {"name": "On", "type": "boolean", "jsonPath": ".spec.on"}, True),
    ("string-condition", {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}, "True"),
    ("string-of-integer", {"name": "C", "type": "string", "jsonPath": ".spec.cpus"}, "2"),
    ("string-of-list-go-format", {"name": "Tags", "type": "string", "jsonPath": ".spec.tags"}, "[a b]"),
    ("string-of-map-go-format", {"name": "L", "type": "string", "jsonPath": ".spec.labels"}, "map[x:y]"),
    ("first-match-only", {"name": "IP", "type": "string", "jsonPath": ".status.addresses[*].address"}, "10.0.0.1"),
    ("date-rendered-as-age", {"name": "Booted", "type": "date", "jsonPath": ".status.bootTime"}, "4h"),
    ("missing-is-null", {"name": "X", "type": "string", "jsonPath": ".spec.nothing"}, None),
    ("wrong-type-is-null", {"name": "X", "type": "integer", "jsonPath": ".metadata.name"}, None),
    ("bad-date-invalid", {"name": "X", "type": "date", "jsonPath": ".metadata.name"}, "<invalid>"),
]


@pytest.mark.parametrize(("column", "cell"), [c[1:] for c in CELLS], ids=[c[0] for c in CELLS])
def test_printer_column_cells(column: dict[str, Any], cell: Any) -> None:
    t = _crd_table([column])
    assert t["rows"][0]["cells"] == ["vm-1", cell]
    assert t["columnDefinitions"][1]["type"] == column["type"]


def test_printer_column_definition_fields() -> None:
    col = {"name": "CPUs", "type": "integer", "format": "int32", "description": "vCPUs", "priority": 1, "jsonPath": ".spec.cpus"}
    t = _crd_table([col])
    assert t["columnDefinitions"][1] == {"name": "CPUs", "type": "integer", "format": "int32", "description": "vCPUs", "priority": 1}


@pytest.mark.parametrize(
    ("include", "want"),
    [
        ("Metadata", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": VM["metadata"]}),
        ("Object", VM),
        ("None", None),
    ],
    ids=["metadata-partial-object", "object-full", "none-null"],
)
def test_include_object(include: str, want: Any) -> None:
    assert _crd_table([], include)["rows"][0]["object"] == want


def test_no_continue_token_omitted() -> None:
    t = to_table([], [], list_rv="1", continue_token=None, now=NOW)
    assert t["metadata"] == {"resourceVersion": "1"} and t["rows"] == []


BUILTIN = [
    ("configmap-data-count", {"kind": "ConfigMap", "metadata": {"name": "c", "creationTimestamp": _ts(10)}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}, ["Name", "Data", "Age"], ["c", 3, "10s"]),
    ("namespace-status", {"kind": "Namespace", "metadata": {"name": "n", "creationTimestamp": _ts(3600 * 5)}, "status": {"phase": "Active"}}, ["Name", "Status", "Age"], ["n", "Active", "5h"]),
    ("secret-type-data", {"kind": "Secret", "metadata": {"name": "s", "creationTimestamp": _ts(1)}, "type": "Opaque", "data": {"k": "dg=="}}, ["Name", "Type", "Data", "Age"], ["s", "Opaque", 1, "1s"]),
    ("lease-holder", {"kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}, ["Name", "Holder", "Age"], ["l", "me", "<unknown>"]),
    ("default-created-at", {"kind": "CustomResourceDefinition", "metadata": {"name": "x.y", "creationTimestamp": "2026-01-01T00:00:00Z"}}, ["Name", "Created At"], ["x.y", "2026-01-01T00:00:00Z"]),
    (
        "core-event",
        {"kind": "Event", "metadata": {"name": "e1"}, "type": "Warning", "reason": "Failed", "message": " boom ", "count": 3,
         "involvedObject": {"kind": "VirtualMachine", "name": "vm-1", "fieldPath": "spec"}, "source": {"component": "banlieue"},
         "firstTimestamp": _ts(600), "lastTimestamp": _ts(30)},
        ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"],
        ["30s", "Warning", "Failed", "virtualmachine/vm-1", "spec", "banlieue", "boom", "10m", 3, "e1"],
    ),
    (
        "events-k8s-io-event",
        {"kind": "Event", "metadata": {"name": "e2"}, "type": "Normal", "reason": "Created", "note": "ok", "eventTime": "2026-01-10T11:59:00.000000Z",
         "regarding": {"kind": "Pod", "name": "p"}, "reportingController": "ctl", "reportingInstance": "host-1"},
        ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"],
        ["60s", "Normal", "Created", "pod/p", "", "ctl, host-1", "ok", "60s", 1, "e2"],
    ),
]


@pytest.mark.parametrize(("obj", "cols", "cells"), [c[1:] for c in BUILTIN], ids=[c[0] for c in BUILTIN])
def test_builtin_printers(obj: dict[str, Any], cols: list[str], cells: list[Any]) -> None:
    t = to_table([obj], None, list_rv="1", continue_token=None, now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == cols
    assert t["rows"][0]["cells"] == cells


def test_builtin_kind_for_empty_list() -> None:
    t = to_table([], None, list_rv="1", continue_token=None, now=NOW, kind="ConfigMap")
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Data", "Age"]


def test_remaining_item_count_in_list_meta() -> None:
    t = to_table([VM], [], list_rv="5", continue_token="tok", remaining_item_count=3, now=NOW)
    assert t["metadata"] == {"resourceVersion": "5", "continue": "tok", "remainingItemCount": 3}
