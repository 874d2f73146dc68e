"""config/samples validate against the models and the generated CRD schemas, and refer to each other."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from banlieue.api import crdgen
from banlieue.api.kinds import kind_info, parse_object, resource_kinds

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "config" / "samples"
GROUPS = {k.group for k in resource_kinds()}


def _docs(pattern: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob(pattern)):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


TOP = _docs("*.yaml")
CAPI = _docs("capi/*.yaml")
BANLIEUE = [d for d in TOP if d["apiVersion"].split("/")[0] in GROUPS]


def _schema(kind: str) -> dict[str, Any]:
    return crdgen.openapi_schema(kind_info(kind))


def _subset(small: Any, big: Any) -> bool:
    if isinstance(small, dict):
        return isinstance(big, dict) and all(k in big and _subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(_subset(a, b) for a, b in zip(small, big, strict=True))
    return bool(small == big)


def test_top_level_samples_hold_only_banlieue_and_core_kinds() -> None:
    for doc in TOP:
        assert doc["apiVersion"] == "v1" or doc["apiVersion"].split("/")[0] in GROUPS, doc["kind"]
    kinds = {d["kind"] for d in BANLIEUE}
    assert kinds == {"Provider", "VMClass", "VMImage", "VirtualMachine", "VSphereCluster", "VSphereMachineTemplate"}


@pytest.mark.parametrize("doc", BANLIEUE, ids=[f"{d['kind']}/{d['metadata']['name']}" for d in BANLIEUE])
def test_sample_validates_and_round_trips(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, _schema(doc["kind"]))
    wire = parse_object(doc).to_wire()
    assert _subset(doc, wire), "the model lost or changed a field"  # only defaults were added
    jsonschema.validate(wire, _schema(doc["kind"]))


def test_references_resolve() -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in TOP + CAPI}
    for doc in BANLIEUE:
        spec = doc["spec"]
        if doc["kind"] == "Provider":
            assert ("Secret", spec["connection"]["credentialsRef"]["name"]) in names
        if doc["kind"] == "VirtualMachine":
            assert ("VMClass", spec["classRef"]["name"]) in names
            assert ("VMImage", spec["imageRef"]["name"]) in names
            if "userData" in spec:
                assert ("Secret", spec["userData"]["secretRef"]["name"]) in names
        if doc["kind"] == "VSphereCluster":
            refs = [r["name"] for r in spec["providerRefs"]]
            assert len(refs) == 2 and all(("Provider", r) in names for r in refs)
    for doc in CAPI:
        for ref in _refs(doc):
            if ref["apiGroup"] == "infrastructure.banlieue.io":
                assert (ref["kind"], ref["name"]) in names, ref


def _refs(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [r for n in node for r in _refs(n)]
    if not isinstance(node, dict):
        return []
    own = [node] if {"apiGroup", "kind", "name"} <= node.keys() else []
    return own + [r for v in node.values() for r in _refs(v)]


def test_capi_sample_points_at_banlieue_infrastructure() -> None:
    cluster = next(d for d in CAPI if d["kind"] == "Cluster")
    assert cluster["spec"]["infrastructureRef"] == {"apiGroup": "infrastructure.banlieue.io", "kind": "VSphereCluster", "name": "demo"}
    kinds = {d["kind"] for d in CAPI}
    assert {"Cluster", "MachineDeployment", "KubeadmControlPlane"} <= kinds


VM = next(d for d in BANLIEUE if d["kind"] == "VirtualMachine")
VMC = next(d for d in BANLIEUE if d["kind"] == "VMClass")
VSM = next(d for d in BANLIEUE if d["kind"] == "VSphereMachineTemplate")


def _with(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


_DELETE = object()


@pytest.mark.parametrize(
    ("doc", "path", "value"),
    [
        pytest.param(VM, ["spec", "classRef"], _DELETE, id="missing-required-classRef"),
        pytest.param(VM, ["spec", "desiredPowerState"], "On", id="bad-enum-power-state"),
        pytest.param(VM, ["spec", "migrationPolicy"], 3, id="wrong-type-migration-policy"),
        pytest.param(VMC, ["spec", "hardware", "cpus"], 0, id="cpus-out-of-range"),
        pytest.param(VMC, ["spec", "hardware", "memoryMiB"], "4Gi", id="memory-wrong-type"),
        pytest.param(VMC, ["spec", "firmware"], "uefi", id="bad-enum-firmware"),
        pytest.param(VSM, ["spec", "template", "spec", "numCPUs"], 0, id="vsm-cpus-out-of-range"),
        pytest.param(VSM, ["spec", "template"], _DELETE, id="vsmt-missing-template"),
    ],
)
def test_schema_rejects_invalid_objects(doc: dict[str, Any], path: list[Any], value: Any) -> None:
    bad = _with(doc, path, value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema(bad["kind"]))
