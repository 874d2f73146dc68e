"""The committed infrastructure CRDs satisfy the CAPI v1beta2 contract rules (InfraMachine,
InfraMachineTemplate, InfraCluster, InfraClusterTemplate) and banlieue.io CRDs carry no CAPI label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CRD_DIR = Path(__file__).resolve().parents[3] / "config" / "crd"
CONTRACT_LABEL = "cluster.x-k8s.io/v1beta2"


def _load(group: str, plural: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CRD_DIR / f"{group}_{plural}.yaml").read_text())
    return doc


def _node(crd: dict[str, Any], path: str) -> dict[str, Any]:
    """Schema node at a dotted path; ``[]`` steps into list items, ``{}`` into map values."""
    node: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.split("."):
        items = part.endswith("[]")
        values = part.endswith("{}")
        name = part.removesuffix("[]").removesuffix("{}")
        node = node["properties"][name]
        if items:
            assert node["type"] == "array", path
            node = node["items"]
        if values:
            assert node["type"] == "object", path
            node = node["additionalProperties"]
    return node


INFRA = [
    ("vspheremachines", "VSphereMachine"),
    ("vspheremachinetemplates", "VSphereMachineTemplate"),
    ("vsphereclusters", "VSphereCluster"),
    ("vsphereclustertemplates", "VSphereClusterTemplate"),
]


@pytest.mark.parametrize(("plural", "kind"), INFRA, ids=[k for _, k in INFRA])
def test_infra_crd_naming_scope_label_list(plural: str, kind: str) -> None:
    crd = _load("infrastructure.banlieue.io", plural)
    assert crd["metadata"]["name"] == f"{plural}.infrastructure.banlieue.io"  # contract.CalculateCRDName
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    assert crd["metadata"]["labels"][CONTRACT_LABEL] == "_".join(served) == "v1alpha1"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == kind
    assert crd["spec"]["names"]["listKind"] == f"{kind}List"
    assert "cluster-api" in crd["spec"]["names"]["categories"]


@pytest.mark.parametrize("plural", ["providers", "vmclasses", "vmimages", "virtualmachines"])
def test_core_crds_have_no_capi_label(plural: str) -> None:
    crd = _load("banlieue.io", plural)
    assert CONTRACT_LABEL not in crd["metadata"].get("labels", {})
    assert "cluster-api" not in crd["spec"]["names"]["categories"]
    assert "banlieue" in crd["spec"]["names"]["categories"]


def _assert_conditions(crd: dict[str, Any]) -> None:
    cond = _node(crd, "status.conditions")
    assert cond["x-kubernetes-list-type"] == "map" and cond["x-kubernetes-list-map-keys"] == ["type"]
    item = cond["items"]
    assert set(item["required"]) >= {"type", "status", "lastTransitionTime", "reason", "message"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert item["properties"]["observedGeneration"]["type"] == "integer"


def test_infra_machine_contract_paths() -> None:
    crd = _load("infrastructure.banlieue.io", "vspheremachines")
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert _node(crd, "spec.providerID")["type"] == "string"
    assert _node(crd, "spec.failureDomain")["type"] == "string"
    assert _node(crd, "status.failureDomain")["type"] == "string"
    assert _node(crd, "status.initialization.provisioned")["type"] == "boolean"
    addr = _node(crd, "status.addresses[]")
    assert addr["required"] == ["type", "address"]
    assert addr["properties"]["type"]["enum"] == ["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"]
    assert addr["properties"]["address"]["type"] == "string"
    _assert_conditions(crd)
    for deprecated in ("ready", "failureReason", "failureMessage"):
        assert deprecated not in _node(crd, "status")["properties"]


def test_infra_machine_template_contract_paths() -> None:
    crd = _load("infrastructure.banlieue.io", "vspheremachinetemplates")
    machine = _load("infrastructure.banlieue.io", "vspheremachines")
    assert _node(crd, "spec.template.spec") == _node(machine, "spec") | {"description": _node(crd, "spec.template.spec")["description"]}
    assert set(_node(crd, "spec.template.metadata")["properties"]) == {"labels", "annotations"}
    cap = _node(crd, "status.capacity{}")
    assert cap["x-kubernetes-int-or-string"] is True and cap["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert "pattern" in cap
    assert _node(crd, "status.nodeInfo.architecture")["enum"] == ["amd64", "arm64", "s390x", "ppc64le"]
    assert _node(crd, "status.nodeInfo.operatingSystem")["type"] == "string"


def test_infra_cluster_contract_paths() -> None:
    crd = _load("infrastructure.banlieue.io", "vsphereclusters")
    endpoint = _node(crd, "spec.controlPlaneEndpoint")
    assert endpoint["properties"]["host"]["type"] == "string"
    assert endpoint["properties"]["port"]["type"] == "integer"
    assert endpoint["properties"]["port"]["maximum"] == 65535
    assert _node(crd, "status.initialization.provisioned")["type"] == "boolean"
    fds = _node(crd, "status.failureDomains")
    assert fds["x-kubernetes-list-type"] == "map" and fds["x-kubernetes-list-map-keys"] == ["name"]
    fd = fds["items"]
    assert fd["required"] == ["name"]
    assert fd["properties"]["controlPlane"]["type"] == "boolean"
    assert fd["properties"]["attributes"]["additionalProperties"] == {"type": "string"}
    _assert_conditions(crd)


def test_infra_cluster_template_contract_paths() -> None:
    crd = _load("infrastructure.banlieue.io", "vsphereclustertemplates")
    cluster = _load("infrastructure.banlieue.io", "vsphereclusters")
    got = _node(crd, "spec.template.spec")
    assert got["properties"] == _node(cluster, "spec")["properties"]
    assert "subresources" not in crd["spec"]["versions"][0]
