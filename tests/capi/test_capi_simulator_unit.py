"""The simulator's failure-domain spreading and the contract checker itself (no vcsim): the
checker must reject what the v1beta2 contract forbids, or the acceptance tests prove nothing."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from capi.contract import check_crd, check_infra_cluster, check_infra_machine, check_infra_machine_template
from capi.simulator import pick_failure_domain

SIX = [{"name": f"fd-{p}-{c}", "controlPlane": c != "c2", "attributes": {"provider": p, "cluster": c}}
       for p in ("a", "b") for c in ("c0", "c1", "c2")]


def spread(domains: list[dict[str, Any]], n: int, *, control_plane: bool) -> list[str | None]:
    used: Counter[str] = Counter()
    out: list[str | None] = []
    for _ in range(n):
        fd = pick_failure_domain(domains, used, control_plane=control_plane)
        out.append(fd)
        if fd:
            used[fd] += 1
    return out


def test_control_plane_machines_only_on_control_plane_domains_round_robin() -> None:
    got = spread(SIX, 8, control_plane=True)
    cp = sorted(d["name"] for d in SIX if d["controlPlane"])
    assert got[:4] == cp and got[4:] == cp  # one per domain before any gets a second


def test_worker_machines_use_every_domain_once_first() -> None:
    assert sorted(x or "" for x in spread(SIX, 6, control_plane=False)) == sorted(d["name"] for d in SIX)


def test_fewest_machines_wins_over_name_order() -> None:
    assert pick_failure_domain(SIX, {"fd-a-c0": 2, "fd-a-c1": 1, "fd-b-c0": 1, "fd-b-c1": 1}, control_plane=True) == "fd-a-c1"


def test_no_qualifying_domain_gives_none() -> None:
    assert pick_failure_domain([{"name": "x", "controlPlane": False}], {}, control_plane=True) is None
    assert pick_failure_domain([], {}, control_plane=False) is None


COND = {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1}
MACHINE: dict[str, Any] = {
    "apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
    "metadata": {"name": "m", "namespace": "ns", "generation": 1, "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                 "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m", "uid": "u", "controller": True}]},
    "spec": {"providerID": "vsphere://42312f1d-6f26-4bd9-8b5f-7b3b8a2a1f00"},
    "status": {"initialization": {"provisioned": True}, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
               "failureDomain": "fd-a-c0", "conditions": [COND], "observedGeneration": 1},
}
CLUSTER: dict[str, Any] = {
    "apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereCluster",
    "metadata": {"name": "c", "namespace": "ns", "generation": 1},
    "spec": {"controlPlaneEndpoint": {"host": "10.0.0.100", "port": 6443}},
    "status": {"initialization": {"provisioned": True}, "failureDomains": copy.deepcopy(SIX), "conditions": [COND]},
}


def mutated(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return out


def test_valid_objects_pass() -> None:
    check_infra_machine(MACHINE, step="unit")
    check_infra_cluster(CLUSTER, step="unit")
    check_infra_machine_template({"kind": "VSphereMachineTemplate", "spec": {"template": {"spec": {}}},
                                  "status": {"capacity": {"cpu": "2", "memory": "4Gi"}, "nodeInfo": {"architecture": "amd64"}}},
                                 step="unit")


def test_template_capacity_as_a_json_number_is_a_violation() -> None:
    """The autoscaler's NestedStringMap rejects ``cpu: 2``: the checker does too."""
    with pytest.raises(AssertionError, match=r"status\.capacity: expected map<resource name, quantity string>"):
        check_infra_machine_template({"kind": "VSphereMachineTemplate", "spec": {"template": {"spec": {}}},
                                      "status": {"capacity": {"cpu": 2, "memory": "4Gi"}}}, step="unit")


@pytest.mark.parametrize(("path", "value", "field"), [
    ("status.ready", True, "status.ready"),
    ("status.failureReason", "x", "status.failureReason"),
    ("status.failureMessage", "x", "status.failureMessage"),
    ("status.conditions", [], "Ready condition"),
    ("status.initialization", {"provisioned": "yes"}, "status.initialization"),
    ("spec.providerID", "vsphere:///abc", "spec.providerID"),
    ("spec.providerID", KeyError, "set once status.initialization.provisioned"),
    ("status.addresses", [{"type": "Public", "address": "1.2.3.4"}], "status.addresses[0]"),
    ("metadata.ownerReferences", [], "metadata.ownerReferences"),
    ("metadata.labels", {}, "cluster-name"),
], ids=["status-ready", "failure-reason", "failure-message", "no-ready", "initialization-type", "provider-id-format",
        "provisioned-without-provider-id", "address-type", "no-machine-owner", "no-cluster-name-label"])
def test_infra_machine_violations_are_caught(path: str, value: Any, field: str) -> None:
    with pytest.raises(AssertionError, match=field.replace("[", r"\[").replace("]", r"\]")):
        check_infra_machine(mutated(MACHINE, path, value), step="unit")


@pytest.mark.parametrize(("path", "value", "field"), [
    ("status.failureDomains", {"fd-a": {"controlPlane": True}}, "v1beta1 map"),
    ("status.failureDomains", [], "1..100"),
    ("status.failureDomains", [SIX[0], SIX[0]], "unique"),
    ("status.failureDomains", [{"name": "x", "controlPlane": "true"}], "controlPlane"),
    ("status.failureDomains", [{"name": "x", "attributes": {"a": 1}}], "attributes"),
    ("spec.controlPlaneEndpoint", {"host": "h", "port": 0}, "controlPlaneEndpoint"),
    ("status.ready", True, "status.ready"),
], ids=["map-shape", "empty", "duplicate-names", "control-plane-type", "attribute-values", "endpoint-port", "status-ready"])
def test_infra_cluster_violations_are_caught(path: str, value: Any, field: str) -> None:
    with pytest.raises(AssertionError, match=field):
        check_infra_cluster(mutated(CLUSTER, path, value), step="unit")


def test_crd_label_must_name_served_versions() -> None:
    crd = {"kind": "CustomResourceDefinition", "metadata": {"name": "vsphereclusters.infrastructure.banlieue.io",
                                                            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1_v1beta1"}},
           "spec": {"group": "infrastructure.banlieue.io", "scope": "Namespaced",
                    "names": {"plural": "vsphereclusters", "kind": "VSphereCluster", "categories": ["cluster-api"]},
                    "versions": [{"name": "v1alpha1", "served": True, "subresources": {"status": {}}}]}}
    with pytest.raises(AssertionError, match="served versions"):
        check_crd(crd)
    crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] = "v1alpha1"
    check_crd(crd)
