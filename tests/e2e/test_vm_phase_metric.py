"""``banlieue_virtual_machines{phase}``: the phase rules and the scrape-time collector.

(The collector's end-to-end value under a running manager is checked in test_manager_e2e.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from banlieue.reconcilers.metrics import (
    COLLECTOR,
    METRIC_NAME,
    PHASES,
    VirtualMachinePhaseCollector,
    bind_source,
    phase_of,
)


def vm(*conditions: tuple[str, str, str], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [
        {"type": t, "status": s, "reason": r} for t, s, r in conditions]}}


@pytest.mark.parametrize(("obj", "phase"), [
    pytest.param({"metadata": {"name": "x"}}, "Pending", id="no-status-is-pending"),
    pytest.param(vm(("Scheduled", "False", "NoProviderMatched")), "Pending", id="placement-wait-is-pending"),
    pytest.param(vm(("Scheduled", "False", "InsufficientCapacity")), "Pending", id="capacity-wait-is-pending"),
    pytest.param(vm(("Scheduled", "False", "ImageNotReady")), "Pending", id="image-not-ready-is-pending"),
    pytest.param(vm(("Scheduled", "False", "ClassNotFound")), "Failed", id="missing-class-is-failed"),
    pytest.param(vm(("Ready", "False", "ImageNotFound")), "Failed", id="missing-image-is-failed"),
    pytest.param(vm(("Scheduled", "True", "Scheduled"), ("InfrastructureReady", "False", "CloneFailed")), "Failed",
                 id="clone-failed-is-failed"),
    pytest.param(vm(("Scheduled", "True", "Scheduled"), ("Ready", "False", "WaitingForInfrastructure")),
                 "Provisioning", id="scheduled-not-ready-is-provisioning"),
    pytest.param(vm(("Scheduled", "True", "Scheduled"), ("Ready", "True", "Ready")), "Ready", id="ready-is-ready"),
    pytest.param(vm(("Ready", "True", "Ready"), deleting=True), "Deleting", id="deletion-wins"),
])
def test_phase_of(obj: dict[str, Any], phase: str) -> None:
    assert phase_of(obj) == phase


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                        ["metadata", "status", "conditions", "type", "status", "reason", "deletionTimestamp"]),
                        inner, max_size=4), max_leaves=12))
def test_phase_of_never_raises(obj: Any) -> None:
    assert phase_of(obj if isinstance(obj, dict) else {"status": obj}) in PHASES


def samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(METRIC_NAME + "{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('"')[1]] = float(value)
    return out


def test_collector_counts_the_newest_synced_source() -> None:
    registry = CollectorRegistry()
    collector = VirtualMachinePhaseCollector()
    registry.register(collector)
    assert samples(generate_latest(registry).decode()) == {}  # nothing bound: no false zeros
    objects: list[dict[str, Any]] | None = None
    unbind_first = collector.bind(lambda: [vm(("Ready", "True", "Ready"))])
    unbind = collector.bind(lambda: objects)
    assert samples(generate_latest(registry).decode()) == {}  # newest source not synced yet
    objects = [vm(("Ready", "True", "Ready")), vm(("Ready", "True", "Ready")), vm(deleting=True), {"metadata": {}}]
    assert samples(generate_latest(registry).decode()) == {
        "Pending": 1, "Provisioning": 0, "Ready": 2, "Deleting": 1, "Failed": 0}
    unbind()
    assert samples(generate_latest(registry).decode())["Ready"] == 1  # back to the first source
    unbind_first()


def test_registered_on_the_default_registry() -> None:
    assert METRIC_NAME in REGISTRY._names_to_collectors
    assert REGISTRY._names_to_collectors[METRIC_NAME] is COLLECTOR
    unbind = bind_source(lambda: [vm(("Scheduled", "True", "Scheduled"))])
    try:
        assert samples(generate_latest(REGISTRY).decode())["Provisioning"] == 1
    finally:
        unbind()
