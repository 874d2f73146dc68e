"""Printer columns of the generated CRDs, evaluated as the API server evaluates them (issue 24):
the CLUSTER column of VSphereMachine/VSphereCluster reads CAPI's label, and ``kubectl get bvm``
shows the Ready reason without ``-o wide``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from banlieue.testing.apiserver.tables import evaluate_jsonpath

CRD_DIR = Path(__file__).resolve().parents[3] / "config" / "crd"


def columns(crd_file: str) -> dict[str, dict[str, Any]]:
    crd = yaml.safe_load((CRD_DIR / crd_file).read_text())
    return {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}


@pytest.mark.parametrize("crd_file", ["infrastructure.banlieue.io_vspheremachines.yaml",
                                      "infrastructure.banlieue.io_vsphereclusters.yaml"])
def test_cluster_column_reads_the_capi_cluster_name_label(crd_file: str) -> None:
    column = columns(crd_file)["Cluster"]
    labelled = {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "workload-1", "other": "x"}}}
    assert evaluate_jsonpath(column["jsonPath"], labelled) == ["workload-1"]
    assert evaluate_jsonpath(column["jsonPath"], {"metadata": {}}) == []
    assert column.get("priority", 0) == 0


def test_virtualmachine_table_shows_the_ready_reason_by_default() -> None:
    cols = columns("banlieue.io_virtualmachines.yaml")
    vm = {"status": {"conditions": [
        {"type": "Scheduled", "status": "True", "reason": "Scheduled"},
        {"type": "Ready", "status": "False", "reason": "WaitingForInfrastructure"}]}}
    assert evaluate_jsonpath(cols["Reason"]["jsonPath"], vm) == ["WaitingForInfrastructure"]
    assert evaluate_jsonpath(cols["Ready"]["jsonPath"], vm) == ["False"]
    assert cols["Reason"].get("priority", 0) == 0 and cols["Ready"].get("priority", 0) == 0
