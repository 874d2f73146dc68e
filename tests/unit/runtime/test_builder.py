"""ControllerBuilder: for_/owns/watches/watches_channel wired through the manager seam."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.clock import FakeClock
from banlieue.runtime.controller import Controller
from banlieue.runtime.event import DeletedFinalStateUnknown
from banlieue.runtime.kinds import SECRET, ResourceKind
from banlieue.runtime.predicate import Funcs, GenerationChangedPredicate
from banlieue.runtime.reconcile import Request
from banlieue.testing.recording import RecordingReconciler

from .fakes import FakeInformer, FakeManager, obj, until

VM = ResourceKind("vm.banlieue.io", "v1alpha1", "VirtualMachine", "virtualmachines")
VSM = ResourceKind("vm.banlieue.io", "v1alpha1", "VirtualMachineService", "virtualmachineservices")
_names = itertools.count()


def owned_by(name: str, vm: str) -> dict[str, Any]:
    ref = {"apiVersion": "vm.banlieue.io/v1alpha1", "kind": "VirtualMachine", "name": vm, "controller": True}
    return obj(name, ownerReferences=[ref])


def secret_to_vms(secret: Any) -> list[Request]:
    vm = secret["metadata"].get("annotations", {}).get("vm")
    return [Request(secret["metadata"]["namespace"], vm)] if vm else []


async def start(controller: Controller) -> asyncio.Task[None]:
    task = asyncio.create_task(controller.start())
    await until(lambda: bool(controller._workers) or task.done())
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_builder_wires_informers_handlers_and_manager() -> None:
    mgr = FakeManager()
    rec = RecordingReconciler()
    name = f"virtualmachine-{next(_names)}"
    controller = (
        ControllerBuilder(mgr)
        .named(name)
        .for_(VM, predicates=[GenerationChangedPredicate()])
        .owns(VSM)
        .watches(SECRET, secret_to_vms, predicates=[Funcs(delete=lambda o: False)])
        .with_options(max_concurrent_reconciles=2, clock=FakeClock())
        .complete(rec)
    )
    assert mgr.runnables == [controller]
    assert controller.name == name and controller.max_concurrent_reconciles == 2
    assert controller.need_leader_election is True
    assert set(mgr.informers) == {VM, VSM, SECRET}
    task = await start(controller)
    try:
        vms, vsms, secrets = mgr.informers[VM], mgr.informers[VSM], mgr.informers[SECRET]
        vms.add(obj("vm1"), initial=True)
        await until(lambda: rec.calls == [Request("ns", "vm1")])
        vms.update(obj("vm1", rv="1"), obj("vm1", rv="2"))  # status-only: filtered by the predicate
        vsms.add(owned_by("svc", "vm2"))
        await until(lambda: len(rec.calls) == 2)
        assert rec.calls[-1] == Request("ns", "vm2")
        secrets.add(obj("s", annotations={"vm": "vm3"}))
        await until(lambda: len(rec.calls) == 3)
        assert rec.calls[-1] == Request("ns", "vm3")
        secrets.delete(DeletedFinalStateUnknown("ns/s", obj("s", annotations={"vm": "vm3"})))  # filtered
        vms.delete(DeletedFinalStateUnknown("ns/vm4", obj("vm4")))
        await until(lambda: len(rec.calls) == 4)
        assert rec.calls[-1] == Request("ns", "vm4")
    finally:
        await stop(task)


async def test_default_name_global_filter_and_sync_gate() -> None:
    mgr = FakeManager()
    mgr.informers[VM] = FakeInformer(synced=False)
    rec = RecordingReconciler()
    clock = FakeClock()
    controller = (
        ControllerBuilder(mgr)
        .for_(VM)
        .with_event_filter(Funcs(create=lambda o: o["metadata"]["name"] != "ignored"))
        .with_options(clock=clock)
        .complete(rec)
    )
    assert controller.name == "virtualmachine"
    task = asyncio.create_task(controller.start())
    try:
        mgr.informers[VM].add(obj("ignored"))
        mgr.informers[VM].add(obj("kept"))
        await clock.advance(1.0)
        assert rec.calls == []  # informer not synced: no worker yet
        mgr.informers[VM].synced = True
        await clock.advance(0.1)
        await until(lambda: rec.calls == [Request("ns", "kept")])
    finally:
        await stop(task)


async def test_channel_sources_async_iterator_and_informer_like() -> None:
    mgr = FakeManager()
    rec = RecordingReconciler()
    events: asyncio.Queue[Any] = asyncio.Queue()

    async def property_collector() -> AsyncIterator[Any]:
        while True:
            yield await events.get()

    hook = FakeInformer()
    controller = (
        ControllerBuilder(mgr)
        .named(f"channel-{next(_names)}")
        .for_(VM)
        .watches_channel(property_collector())
        .watches_channel(hook, lambda o: [Request("ns", "from-hook-" + o["metadata"]["name"])])
        .with_options(clock=FakeClock())
        .complete(rec)
    )
    task = await start(controller)
    try:
        await events.put(Request("ns", "timer"))  # a ready-made Request
        await until(lambda: rec.calls == [Request("ns", "timer")])
        await events.put(obj("changed-vm"))  # an object: its own request
        await until(lambda: len(rec.calls) == 2)
        assert rec.calls[-1] == Request("ns", "changed-vm")
        hook.add(obj("x"))
        await until(lambda: len(rec.calls) == 3)
        assert rec.calls[-1] == Request("ns", "from-hook-x")
    finally:
        await stop(task)
    # The source task was cancelled with the controller.
    assert all(t.done() for t in controller._workers)


def test_builder_errors() -> None:
    with pytest.raises(ValueError, match="for_"):
        ControllerBuilder(FakeManager()).named("x").complete(RecordingReconciler())
    with pytest.raises(ValueError, match="once"):
        ControllerBuilder(FakeManager()).for_(VM).for_(VM)

    async def async_map(o: Any) -> list[Request]:
        return []

    with pytest.raises(TypeError):
        ControllerBuilder(FakeManager()).watches(SECRET, async_map)  # type: ignore[arg-type]
