"""``spec.machineRequirements`` (issue 21, item 1): a VSphereCluster advertises only the failure
domains that offer the storage and network classes its machines use; the others are listed in
``status.excludedFailureDomains`` with what they lack."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler_objects import fd, provider

from banlieue.api.conditions import get_condition
from banlieue.api.infrastructure import VSphereCluster, VSphereClusterStatus
from banlieue.api.provider import Provider
from banlieue.reconcilers.vspherecluster.controller import Snapshot, decide

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# vcenter-b's "default" network class exists only in dc0 (the samples' DC0_DVPG0).
PROVIDERS = (
    provider("vcenter-a", [fd(f"vcenter-a-dc{d}-c0", dc=f"dc{d}") for d in (0, 1)]),
    provider("vcenter-b", [fd("vcenter-b-dc0-c0", dc="dc0"), fd("vcenter-b-dc1-c0", dc="dc1", nc=())]),
)


def run(requirements: dict[str, list[str]] | None) -> VSphereClusterStatus:
    spec = {"providerRefs": [{"name": "vcenter-a"}, {"name": "vcenter-b"}]}
    if requirements is not None:
        spec["machineRequirements"] = requirements  # type: ignore[assignment]
    c = VSphereCluster.from_wire({"metadata": {"name": "demo", "namespace": "default", "generation": 1}, "spec": spec})
    plan = decide(Snapshot(c, PROVIDERS, False, NOW))
    assert plan.status is not None
    return VSphereClusterStatus.from_wire(plan.status)


def test_domains_lacking_a_required_class_are_excluded_with_why() -> None:
    status = run({"storageClasses": ["standard"], "networkClasses": ["default"]})
    assert [d.name for d in status.failure_domains or []] == ["vcenter-a-dc0-c0", "vcenter-a-dc1-c0", "vcenter-b-dc0-c0"]
    assert [(e.name, e.provider, e.message) for e in status.excluded_failure_domains or []] == [
        ("vcenter-b-dc1-c0", "vcenter-b", "does not offer networkClass default (spec.machineRequirements)")]
    ready = get_condition(status.conditions, "Ready")
    assert ready is not None and ready.status.value == "True" and "1 excluded" in ready.message


def test_without_requirements_a_domain_with_no_network_class_is_not_advertised() -> None:
    """New-user finding: a domain offering no network class was advertised, and every machine
    CAPI placed there could never get a NIC (CAPV advertises only validated zones)."""
    status = run(None)
    assert [d.name for d in status.failure_domains or []] == ["vcenter-a-dc0-c0", "vcenter-a-dc1-c0", "vcenter-b-dc0-c0"]
    [left_out] = status.excluded_failure_domains or []
    assert (left_out.name, left_out.provider) == ("vcenter-b-dc1-c0", "vcenter-b")
    assert left_out.message.startswith("offers no network class") and "spec.capabilities.networkClasses" in left_out.message


def _with_meta(p: Provider, **meta: Any) -> Provider:
    wire = p.to_wire()
    wire["metadata"].update(meta)
    return Provider.from_wire(wire)


def test_a_deleting_provider_s_domains_leave_the_failure_domains() -> None:
    """New-user finding: a Provider held by its finalizer while machines use it still had its
    domains advertised, so CAPI kept placing new Machines there."""
    deleting = _with_meta(PROVIDERS[0], deletionTimestamp="2026-01-02T03:00:00Z", finalizers=["banlieue.io/provider"])
    c = VSphereCluster.from_wire({"metadata": {"name": "demo", "namespace": "default", "generation": 1},
                                  "spec": {"providerRefs": [{"name": "vcenter-a"}, {"name": "vcenter-b"}]}})
    plan = decide(Snapshot(c, (deleting, PROVIDERS[1]), False, NOW))
    assert plan.status is not None
    status = VSphereClusterStatus.from_wire(plan.status)
    assert [d.name for d in status.failure_domains or []] == ["vcenter-b-dc0-c0"]
    why = {e.name: e.message for e in status.excluded_failure_domains or []}
    assert why["vcenter-a-dc0-c0"] == why["vcenter-a-dc1-c0"] == "its Provider is being deleted and takes no new machines"


def test_a_duplicate_vcenter_provider_s_domains_are_not_advertised() -> None:
    dup = provider("vcenter-a", [fd("vcenter-a-dc0-c0")])
    wire = dup.to_wire()
    wire["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "DuplicateVCenter", "message": "x",
                                     "lastTransitionTime": "2026-01-02T03:00:00Z"}]
    c = VSphereCluster.from_wire({"metadata": {"name": "demo", "namespace": "default", "generation": 1},
                                  "spec": {"providerRefs": [{"name": "vcenter-a"}]}})
    plan = decide(Snapshot(c, (Provider.from_wire(wire),), False, NOW))
    assert plan.status is not None
    status = VSphereClusterStatus.from_wire(plan.status)
    assert status.failure_domains is None
    [left_out] = status.excluded_failure_domains or []
    assert "DuplicateVCenter" in left_out.message
    ready = get_condition(status.conditions, "Ready")
    assert ready is not None and (ready.status.value, ready.reason) == ("False", "NoFailureDomains")


def test_nothing_offers_the_requirements_is_not_ready_and_says_so() -> None:
    status = run({"storageClasses": ["gold"]})
    assert status.failure_domains is None and len(status.excluded_failure_domains or []) == 4
    ready = get_condition(status.conditions, "Ready")
    assert ready is not None and (ready.status.value, ready.reason) == ("False", "NoFailureDomains")
    assert "machineRequirements" in ready.message
