"""Test doubles of the builder's manager seam (InformerLike, ManagerLike) and small helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY

from banlieue.runtime.builder import Runnable
from banlieue.runtime.event import DeletedFinalStateUnknown, Object, ResourceEventHandler
from banlieue.runtime.kinds import ResourceKind


class FakeInformer:
    """An in-memory informer: tests push events; handlers get them synchronously."""

    def __init__(self, synced: bool = True) -> None:
        self.handlers: list[ResourceEventHandler] = []
        self.synced = synced

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        self.handlers.append(handler)

    def has_synced(self) -> bool:
        return self.synced

    def add(self, obj: Object, initial: bool = False) -> None:
        for h in self.handlers:
            h.on_add(obj, initial)

    def update(self, old: Object, new: Object) -> None:
        for h in self.handlers:
            h.on_update(old, new)

    def delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        for h in self.handlers:
            h.on_delete(obj)


class FakeManager:
    """Implements the builder's ManagerLike: one FakeInformer per kind, runnables collected."""

    def __init__(self) -> None:
        self.informers: dict[ResourceKind, FakeInformer] = {}
        self.runnables: list[Runnable] = []

    def get_informer(self, kind: ResourceKind) -> FakeInformer:
        return self.informers.setdefault(kind, FakeInformer())

    def add(self, runnable: Runnable) -> None:
        self.runnables.append(runnable)


async def until(condition: Callable[[], bool], *, spins: int = 2000) -> None:
    """Yield to the loop until ``condition()`` holds (bounded; no wall-clock waits)."""
    for _ in range(spins):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def sample(metric: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(metric, labels)
    return 0.0 if value is None else value


def obj(name: str, ns: str = "ns", rv: str = "1", generation: int = 1, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv, "generation": generation}
    meta.update(extra)
    return {"metadata": meta}
