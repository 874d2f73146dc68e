"""Table tests of the VSphereCluster ``decide`` (failure-domain aggregation, controlPlane,
provisioned, paused, Ready) and a hypothesis test that it never raises."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reconciler_objects import fd, provider

from banlieue.api.conditions import get_condition
from banlieue.api.infrastructure import VSphereCluster, VSphereClusterStatus
from banlieue.api.provider import Provider
from banlieue.reconcilers.vspherecluster.controller import Snapshot, decide

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def six() -> list[Provider]:
    """Two vCenters x three compute clusters (the vcsim samples' shape)."""
    return [provider(p, [fd(f"{p}-dc0-c{i}", dc="dc0", cluster=f"c{i}") for i in range(3)], {"site": p})
            for p in ("vcenter-a", "vcenter-b")]


def cluster(spec: dict[str, Any] | None = None, *, annotations: dict[str, str] | None = None,
            status: dict[str, Any] | None = None) -> VSphereCluster:
    return VSphereCluster.from_wire({"metadata": {"name": "demo", "namespace": "default", "generation": 2,
                                                  "annotations": annotations or {}},
                                     "spec": spec or {}, "status": status or {}})


def run(c: VSphereCluster, providers: list[Provider], owner_paused: bool = False) -> VSphereClusterStatus:
    plan = decide(Snapshot(c, tuple(providers), owner_paused, NOW))
    assert plan.status is not None
    return VSphereClusterStatus.from_wire(plan.status)


def ready(status: VSphereClusterStatus) -> tuple[str, str]:
    cond = get_condition(status.conditions, "Ready")
    assert cond is not None
    return (cond.status.value, cond.reason)


REFS = {"providerRefs": [{"name": "vcenter-a"}, {"name": "vcenter-b"}]}


def test_two_vcenters_three_clusters_give_six_control_plane_domains() -> None:
    status = run(cluster({**REFS, "controlPlaneEndpoint": {"host": "10.0.0.100", "port": 6443}}), six())
    assert [d.name for d in status.failure_domains or []] == [
        "vcenter-a-dc0-c0", "vcenter-a-dc0-c1", "vcenter-a-dc0-c2", "vcenter-b-dc0-c0", "vcenter-b-dc0-c1", "vcenter-b-dc0-c2"]
    assert all(d.control_plane for d in status.failure_domains or [])
    first = (status.failure_domains or [])[0]
    assert first.attributes == {"provider": "vcenter-a", "datacenter": "DC0", "dc": "dc0", "cluster": "c0"}
    assert status.initialization is not None and status.initialization.provisioned
    assert status.control_plane_endpoint is not None and (status.control_plane_endpoint.host, status.control_plane_endpoint.port) == ("10.0.0.100", 6443)
    assert ready(status) == ("True", "Ready")
    assert status.observed_generation == 2


@pytest.mark.parametrize(("selector", "expected"), [
    ({"matchLabels": {"cluster": "c0"}}, {"vcenter-a-dc0-c0", "vcenter-b-dc0-c0"}),
    ({"matchLabels": {"provider": "vcenter-b"}}, {"vcenter-b-dc0-c0", "vcenter-b-dc0-c1", "vcenter-b-dc0-c2"}),
    ({"matchExpressions": [{"key": "cluster", "operator": "NotIn", "values": ["c0", "c1"]}]}, {"vcenter-a-dc0-c2", "vcenter-b-dc0-c2"}),
], ids=["by-label", "by-provider-attribute", "by-expression"])
def test_control_plane_selector(selector: dict[str, Any], expected: set[str]) -> None:
    status = run(cluster({**REFS, "controlPlaneFailureDomainSelector": selector}), six())
    assert {d.name for d in status.failure_domains or [] if d.control_plane} == expected
    assert len(status.failure_domains or []) == 6


@pytest.mark.parametrize(("spec", "providers", "names", "reason"), [
    ({"providerRefs": [{"name": "vcenter-b"}]}, six(), {"vcenter-b-dc0-c0", "vcenter-b-dc0-c1", "vcenter-b-dc0-c2"}, "Ready"),
    ({"providerSelector": {"matchLabels": {"site": "vcenter-a"}}}, six(), {"vcenter-a-dc0-c0", "vcenter-a-dc0-c1", "vcenter-a-dc0-c2"}, "Ready"),
    ({"providerRefs": [{"name": "vcenter-b"}], "providerSelector": {"matchLabels": {"site": "vcenter-a"}}}, six(),
     {"vcenter-b-dc0-c0", "vcenter-b-dc0-c1", "vcenter-b-dc0-c2"}, "Ready"),
    ({}, six(), None, "Ready"),
    ({"providerRefs": [{"name": "vcenter-a"}, {"name": "gone"}]}, six(), {"vcenter-a-dc0-c0", "vcenter-a-dc0-c1", "vcenter-a-dc0-c2"},
     "ProviderNotFound"),
    (REFS, [provider("vcenter-a", [fd("x")], pclass="kvm")], set(), "ProviderNotFound"),
    (REFS, [provider("vcenter-a", []), provider("vcenter-b", [])], set(), "NoFailureDomains"),
    ({"providerSelector": {"matchLabels": {"site": "nowhere"}}}, six(), set(), "NoFailureDomains"),
    (REFS, [provider("vcenter-a", [fd("same")]), provider("vcenter-b", [fd("same"), fd("other")])], {"same", "other"}, "Ready"),
], ids=["refs", "selector", "refs-win-over-selector", "neither-selects-all", "missing-ref", "only-vsphere-class",
        "no-domains-yet", "selector-matches-none", "deduplicated-by-name"])
def test_provider_selection(spec: dict[str, Any], providers: list[Provider], names: set[str] | None, reason: str) -> None:
    status = run(cluster(spec), providers)
    got = {d.name for d in status.failure_domains or []}
    assert got == (names if names is not None else {d.name for p in six() for d in (p.status.failure_domains if p.status else None) or []})
    assert ready(status)[1] == reason


def test_deduplicated_domain_comes_from_the_first_provider() -> None:
    status = run(cluster(REFS), [provider("vcenter-a", [fd("same")]), provider("vcenter-b", [fd("same")])])
    assert [(d.attributes or {}).get("provider") for d in status.failure_domains or []] == ["vcenter-a"]


def test_provisioned_is_kept_once_set_when_domains_vanish() -> None:
    status = run(cluster(REFS, status={"initialization": {"provisioned": True}}), [provider("vcenter-a", []), provider("vcenter-b", [])])
    assert status.initialization is not None and status.initialization.provisioned
    assert ready(status) == ("False", "NoFailureDomains")


@pytest.mark.parametrize(("spec", "annotations", "owner_paused"), [
    ({"paused": True}, {}, False), ({}, {"cluster.x-k8s.io/paused": ""}, False), ({}, {}, True),
], ids=["spec-paused", "capi-annotation", "owner-cluster-paused"])
def test_paused_changes_nothing_else(spec: dict[str, Any], annotations: dict[str, str], owner_paused: bool) -> None:
    status = run(cluster({**REFS, **spec}, annotations=annotations), six(), owner_paused)
    paused = get_condition(status.conditions, "Paused")
    assert paused is not None and paused.status.value == "True"
    assert status.failure_domains is None
    assert ready(status) == ("False", "Paused")


def test_decide_on_its_own_status_writes_nothing() -> None:
    first = decide(Snapshot(cluster(REFS), tuple(six()), False, NOW))
    assert first.status is not None
    again = decide(Snapshot(cluster(REFS, status=first.status), tuple(six()), False, NOW))
    assert again.status is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={
    "providerRefs": st.lists(st.builds(lambda n: {"name": n}, st.sampled_from(["vcenter-a", "vcenter-b", "x"])), max_size=3),
    "providerSelector": st.builds(lambda v: {"matchLabels": {"site": v}}, st.sampled_from(["vcenter-a", "q"])),
    "controlPlaneFailureDomainSelector": st.builds(lambda v: {"matchLabels": {"cluster": v}}, st.sampled_from(["c0", "c9"])),
    "paused": st.booleans(),
    "controlPlaneEndpoint": st.builds(lambda h, p: {"host": h, "port": p}, st.sampled_from(["h", "10.0.0.1"]), st.integers(1, 65535)),
}), st.booleans(), st.lists(st.sampled_from(six()), max_size=2))
def test_decide_never_raises(spec: dict[str, Any], owner_paused: bool, providers: list[Provider]) -> None:
    plan = decide(Snapshot(cluster(spec), tuple(providers), owner_paused, NOW))
    assert plan.status is not None
    assert get_condition(VSphereClusterStatus.from_wire(plan.status).conditions, "Ready") is not None


@pytest.mark.parametrize("value", ["", "my-ipam-operator"])
def test_externally_managed_cluster_is_not_written(value: str) -> None:
    """CAPI v1beta2 InfraCluster contract: with ``cluster.x-k8s.io/managed-by`` another system
    owns the status; whatever it wrote (here: provisioned, one domain) stays as it is."""
    theirs = {"initialization": {"provisioned": True},
              "failureDomains": [{"name": "vcenter-a-dc0-c0", "controlPlane": True}]}
    c = cluster(REFS, annotations={"cluster.x-k8s.io/managed-by": value}, status=theirs)
    assert decide(Snapshot(c, tuple(six()), False, NOW)).status is None
    assert decide(Snapshot(cluster(REFS, status=theirs), tuple(six()), False, NOW)).status is not None  # unmanaged: rewritten
