"""Per-vCenter worker cap in the VSphereMachine controller (vspheremachine.vcenter_slots): with two workers
(cap 1 per vCenter), a machine on a slow vCenter A holds A's only slot during its clone, a second
machine on A is deferred (requeued, not waiting), and a machine on vCenter B is provisioned on
the free worker meanwhile. Real Manager, API-server double over HTTP, two vcsims over SOAP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from reconciler_harness import eventually, new_client
from test_vspheremachine_vcsim import (
    _powered_on,
    machine,
    make_provider,
    ready_of,
    wait_reason,
)

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import FIELD_MANAGER_PROVIDER_VSPHERE, VSPHERE_MACHINE
from banlieue.reconcilers.vspheremachine import controller as vspheremachine
from banlieue.runtime.client import Client
from banlieue.runtime.manager import Manager
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]


@contextlib.asynccontextmanager
async def two_workers(apiserver: Any, ns: str) -> AsyncIterator[None]:
    c = new_client(apiserver.url)
    mgr = Manager(c, namespace=ns, metrics_bind_address="0", health_probe_bind_address="0",
                  graceful_shutdown_timeout=5.0, handle_signals=False)
    backend = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=30.0, watch_max_wait=2.0)
    ctx = RoleContext(client=c, cache=mgr.cache, recorder=mgr.get_event_recorder(FIELD_MANAGER_PROVIDER_VSPHERE),
                      field_manager=FIELD_MANAGER_PROVIDER_VSPHERE, backend=backend, namespace=ns,
                      max_concurrent_reconciles=2, vsphere_task_timeout=60.0)
    vspheremachine.setup(mgr, ctx)
    task = asyncio.create_task(mgr.start())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await backend.close()
        await c.close()


async def test_full_vcenter_defers_its_machines_while_another_vcenter_proceeds(
    apiserver: Any, client: Client, ns: str, vcsim_factory: Callable[..., VcsimProcess],
) -> None:
    slow = vcsim_factory(method_delay={"CloneVM_Task": 6000})
    fast = vcsim_factory()
    await make_provider(client, ns, slow, name="vc1")
    await make_provider(client, ns, fast, name="vc2")
    async with two_workers(apiserver, ns):
        await client.create(VSPHERE_MACHINE, machine("a1", ns))
        await wait_reason(client, ns, "a1", "Cloning")  # a1 holds vc1's only slot for ~6 s
        await client.create(VSPHERE_MACHINE, machine("a2", ns))
        await client.create(VSPHERE_MACHINE, machine("b1", ns, providerRef={"name": "vc2"}))
        # b1 is cloned, configured and powered on (spec.providerID comes right after power-on;
        # its status may still be Cloning: progress-only changes are coalesced, ADR 0011).
        await eventually(lambda: _powered_on(client, ns, "b1"), what="b1 powered on")
        a1 = ready_of(await client.get(VSPHERE_MACHINE, "a1", ns))
        a2 = await client.get(VSPHERE_MACHINE, "a2", ns)
        assert a1 is not None and a1[1] == "Cloning", f"b1 finished while a1 is still cloning on vc1: {a1}"
        # a2 got its finalizer (it was reconciled) but never reached vc1: deferred, not waiting
        # on a worker (with two workers, a waiting a2 would have kept b1 out).
        assert a2["metadata"].get("finalizers"), "a2 was never reconciled"
        a2_ready = ready_of(a2)
        assert a2_ready is None or a2_ready[1] != "Cloning", f"a2 went past the cap: {a2_ready}"
        # Once a1 releases the slot, the requeued a2 proceeds.
        await wait_reason(client, ns, "a1", "WaitingForIPAddress", "Provisioned", timeout=60)
        await wait_reason(client, ns, "a2", "WaitingForIPAddress", "Provisioned", timeout=60)


