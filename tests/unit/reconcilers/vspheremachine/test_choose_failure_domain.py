"""choose_cluster_failure_domain: banlieue places a CAPI machine that has no failure domain."""

from __future__ import annotations

from typing import Any

from banlieue.api.provider import Provider
from banlieue.reconcilers.vspheremachine.placement import choose_cluster_failure_domain


def provider(name: str, domains: dict[str, int | None]) -> Provider:
    fds = []
    for i, (fd, free) in enumerate(domains.items()):
        attrs: dict[str, Any] = {"raw": {"datacenter": "dc0", "cluster": f"c{i}"}}
        if free is not None:
            attrs["capacity"] = {"memoryMiB": free}
        fds.append({"name": fd, "attributes": attrs})
    return Provider.from_wire({"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": name, "namespace": "ns"},
                               "spec": {"providerClassRef": {"name": "vsphere"}, "connection": {"endpoint": "127.0.0.1:1", "credentialsRef": {"name": "s"}}},
                               "status": {"failureDomains": fds}})


def cluster(*names: str, cp: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": "demo"}, "status": {"failureDomains": [{"name": n, "controlPlane": n in cp} for n in names]}}


PROVIDERS = [provider("a", {"a-1": 4096, "a-2": 8192}), provider("b", {"b-1": None})]


def test_fewest_used_first_then_most_free_memory_then_name() -> None:
    c = cluster("a-1", "a-2", "b-1")
    assert choose_cluster_failure_domain(c, PROVIDERS, {}, memory_mib=512, control_plane=False).name == "a-2"
    assert choose_cluster_failure_domain(c, PROVIDERS, {"a-2": 1}, memory_mib=512, control_plane=False).name == "a-1"
    assert choose_cluster_failure_domain(c, PROVIDERS, {"a-1": 1, "a-2": 1}, memory_mib=512, control_plane=False).name == "b-1"


def test_only_the_clusters_published_domains_and_control_plane_ones_for_a_control_plane() -> None:
    assert choose_cluster_failure_domain(cluster("a-1"), PROVIDERS, {}, memory_mib=512, control_plane=False).name == "a-1"
    c = cluster("a-1", "a-2", "b-1", cp=("b-1",))
    assert choose_cluster_failure_domain(c, PROVIDERS, {"b-1": 5}, memory_mib=512, control_plane=True).name == "b-1"


def test_capacity_filters_and_the_message_says_why() -> None:
    c = cluster("a-1", "a-2")
    assert choose_cluster_failure_domain(c, PROVIDERS, {}, memory_mib=6000, control_plane=False).name == "a-2"
    choice = choose_cluster_failure_domain(c, PROVIDERS, {}, memory_mib=9000, control_plane=False)
    assert choice.name is None
    assert "too little free memory for 9000 MiB: a-1 (4096 MiB free), a-2 (8192 MiB free)" in choice.message


def test_no_published_domain_is_reported() -> None:
    choice = choose_cluster_failure_domain({"metadata": {"name": "demo"}, "status": {}}, PROVIDERS, {}, memory_mib=1, control_plane=False)
    assert choice.name is None and "Cluster demo publishes no failure domain" in choice.message
    unknown = choose_cluster_failure_domain(cluster("zz"), PROVIDERS, {}, memory_mib=1, control_plane=False)
    assert unknown.name is None and "(zz) can take it" in unknown.message


def test_a_deleting_or_duplicate_provider_s_domains_take_no_new_machine() -> None:
    """New-user finding: the Cluster's copy of the failure domains lags the VSphereCluster's, so a
    machine could still be placed on a Provider being deleted (or a DuplicateVCenter one)."""
    c = cluster("a-1", "a-2", "b-1")
    wire = PROVIDERS[0].to_wire()
    wire["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["banlieue.io/provider"]})
    deleting = Provider.from_wire(wire)
    assert choose_cluster_failure_domain(c, [deleting, PROVIDERS[1]], {}, memory_mib=512, control_plane=False).name == "b-1"
    dup = PROVIDERS[1].to_wire()
    dup["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "DuplicateVCenter", "message": "x",
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    choice = choose_cluster_failure_domain(c, [deleting, Provider.from_wire(dup)], {}, memory_mib=512, control_plane=False)
    assert choice.name is None and "can take it" in choice.message
