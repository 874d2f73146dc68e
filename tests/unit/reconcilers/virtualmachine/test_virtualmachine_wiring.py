"""The VirtualMachine controller's cache indexes and event filter (banlieue.reconcilers.virtualmachine.controller)."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.reconcilers.virtualmachine.controller import (
    _placement_freed,
    _refused_for_peers,
    _vm_update_matters,
    index_anti_affinity,
    index_class,
    index_image,
    index_provider,
    index_unscheduled,
)


def vm(status: dict[str, Any] | None = None, placement: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm-1", "namespace": "ns", "generation": 1, **meta},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"}, "placement": placement or {}},
            "status": status or {}}


def test_indexes() -> None:
    placed = vm({"scheduled": {"providerName": "vc-a", "failureDomain": "fd"}})
    assert (index_class(placed), index_image(placed)) == (["small"], ["ubuntu"])
    assert (index_provider(placed), index_unscheduled(placed)) == (["ns/vc-a"], [])
    assert (index_provider(vm()), index_unscheduled(vm())) == ([], ["ns"])
    assert index_anti_affinity(vm(placement={"antiAffinity": [{"topologyKey": "cluster"}]})) == ["ns"]
    assert index_anti_affinity(vm()) == []
    assert index_class({"metadata": {"name": "x"}}) == []


@pytest.mark.parametrize(("change", "matters"), [
    ({"status": {"conditions": []}, "resourceVersion": "2"}, False),
    ({"generation": 2}, True),
    ({"labels": {"a": "b"}}, True),
    ({"annotations": {"banlieue.io/migrate": "true"}}, True),
    ({"deletionTimestamp": "2026-01-01T00:00:00Z"}, True),
    ({"finalizers": ["banlieue.io/virtualmachine"]}, False),
], ids=["own-status-write", "spec", "labels", "annotations", "deletion", "own-finalizer"])
def test_update_filter(change: dict[str, Any], matters: bool) -> None:
    old = vm()
    status = change.pop("status", None)
    new = vm(status, **change)
    assert _vm_update_matters(old, new) is matters


def test_peer_changes_that_can_free_room() -> None:
    a = vm({"scheduled": {"providerName": "vc-a", "failureDomain": "x"}})
    b = vm({"scheduled": {"providerName": "vc-a", "failureDomain": "y"}})
    assert not _placement_freed(vm(), a)  # a new placement only takes room
    assert _placement_freed(a, b)  # moved
    assert _placement_freed(a, vm())  # cleared
    assert _placement_freed(vm(), vm(labels={"app": "db"}))  # relabelled


@pytest.mark.parametrize(("reason", "retried"), [("AntiAffinityUnsatisfied", True), ("InsufficientCapacity", True),
                                                 ("ImageNotReady", False)])
def test_only_vms_refused_for_peers_are_retried_on_peer_changes(reason: str, retried: bool) -> None:
    refused = vm({"conditions": [{"type": "Scheduled", "status": "False", "reason": reason}]})
    assert _refused_for_peers(refused) is retried
    assert not _refused_for_peers(vm())
