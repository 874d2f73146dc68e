"""``informer_source``: phases remembered by key and resourceVersion, so a ``/metrics`` scrape
decodes only the VirtualMachines that changed since the previous scrape."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from banlieue.reconcilers.metrics import (
    METRIC_NAME,
    PhaseCounts,
    VirtualMachinePhaseCollector,
    informer_source,
)
from banlieue.runtime.cache import Indexer
from banlieue.runtime.event import Object


class CountingIndexer(Indexer):
    """A real ``Indexer`` that counts the objects it decodes through ``get``."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded = 0

    def get(self, key: str) -> Object | None:
        self.decoded += 1
        return super().get(key)


class Informer:
    """The two things ``informer_source`` reads of an informer (``SyncedStore``)."""

    def __init__(self) -> None:
        self._store = CountingIndexer()
        self.synced = False

    @property
    def store(self) -> CountingIndexer:
        return self._store

    def has_synced(self) -> bool:
        return self.synced


def vm(name: str, rv: str, ready: str | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"conditions": [{"type": "Ready", "status": ready, "reason": "Ready"}]} if ready else {}
    return {"apiVersion": "vmoperator.vmware.com/v1alpha3", "kind": "VirtualMachine", "metadata": meta, "status": status}


def counts(source: Any) -> dict[str, int]:
    result = source()
    assert isinstance(result, PhaseCounts)
    return {k: v for k, v in result.counts.items() if v}


def test_none_until_synced() -> None:
    informer = Informer()
    informer.store.add(vm("a", "1", "True"))
    assert informer_source(informer)() is None


def test_a_scrape_decodes_only_changed_objects_and_forgets_deleted_ones() -> None:
    informer = Informer()
    informer.synced = True
    store = informer.store
    for i in range(5):
        store.add(vm(f"vm{i}", "1"))
    source = informer_source(informer)
    assert counts(source) == {"Pending": 5}
    assert store.decoded == 5

    assert counts(source) == {"Pending": 5}
    assert store.decoded == 5  # nothing changed: nothing decoded

    store.update(vm("vm1", "2", "True"))
    store.update(vm("vm2", "3", deleting=True))
    store.delete("ns/vm3")
    store.add(vm("vm9", "4", "True"))
    assert counts(source) == {"Pending": 2, "Ready": 2, "Deleting": 1}
    assert store.decoded == 8  # vm1, vm2, vm9
    assert len(source) == 5  # type: ignore[arg-type]  # the memo holds present keys only

    store.add(vm("vm3", "1"))  # same name and an old resourceVersion: a new object
    assert counts(source) == {"Pending": 3, "Ready": 2, "Deleting": 1}
    assert store.decoded == 9


def test_objects_without_resource_version_are_decoded_each_scrape() -> None:
    informer = Informer()
    informer.synced = True
    informer.store.add({"metadata": {"name": "x"}})
    source = informer_source(informer)
    assert counts(source) == {"Pending": 1}
    informer.store.update({"metadata": {"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert counts(source) == {"Deleting": 1}


def test_collector_reports_every_phase_from_phase_counts() -> None:
    informer = Informer()
    informer.synced = True
    informer.store.add(vm("a", "1", "True"))
    registry = CollectorRegistry()
    collector = VirtualMachinePhaseCollector()
    registry.register(collector)
    unbind = collector.bind(informer_source(informer))
    text = generate_latest(registry).decode()
    unbind()
    lines = {line for line in text.splitlines() if line.startswith(METRIC_NAME + "{")}
    assert f'{METRIC_NAME}{{phase="Ready"}} 1.0' in lines
    assert f'{METRIC_NAME}{{phase="Pending"}} 0.0' in lines
    assert len(lines) == 5
