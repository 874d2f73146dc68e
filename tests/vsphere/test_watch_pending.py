"""The change watch covers every VM banlieue knows from its creation on (watch.py "VMs the
collector never reported"), against vcsim: VMs destroyed before the collector reported them,
VMs created while the watch starts, the resync and its bound, and the moref -> UID fallback."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pyVmomi import vim
from vcwatch import next_for as _next_for
from vcwatch import watching

from banlieue.backends.base import Connection, NotFound, VMChange, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import VMIndex
from banlieue.backends.vsphere.watch import GIVE_UP_AFTER_CHECKS, RESYNC_AFTER_CHECKS, VMWatch
from banlieue.testing.vcsim import wait_task


async def next_for(queue: asyncio.Queue[VMChange], uid: str, kind: str, timeout: float = 10) -> VMChange:
    return await _next_for(queue, uid, kind, timeout)

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]



def vm_spec(cluster: str = "DC0_C0") -> VMSpec:
    uid = str(uuid.uuid4())
    return VMSpec(uid=uid, name=f"p-{uid[:8]}", datacenter="DC0", cluster=cluster, template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256)


async def poll_until(w: VMWatch, uid: str, kind: str, timeout: float = 20) -> VMChange:
    """Run ``w.poll`` (each blocks up to its max wait) until it delivers ``kind`` for ``uid``."""
    async with asyncio.timeout(timeout):
        while True:
            for change in await asyncio.to_thread(w.poll):
                if change.uid == uid and change.kind == kind:
                    return change


def destroy(si: Any, moref: str) -> None:
    wait_task(vim.VirtualMachine(moref, si._stub).Destroy_Task())


def exists(si: Any, moref: str) -> bool:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return any(vm._moId == moref for vm in view.view)
    finally:
        view.Destroy()


async def test_vm_created_as_the_watch_starts_and_destroyed_at_once_is_reported_removed(
    conn: Connection, si: Any
) -> None:
    # No pause between starting the watch and cloning, on a cold backend each time (login,
    # template lookup): the clone races the collector's setup and first batch, and the VM is
    # gone before vcsim's next update tick.
    for _ in range(10):
        spec = vm_spec()
        # A short poll gap: the race is with the collector's setup, not with its batching.
        backend = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=30.0, watch_max_wait=5.0,
                                 watch_poll_gap=0.1, watch_poll_gap_max=0.1)
        try:
            async with watching(backend, conn) as queue:
                created = await backend.create_vm(conn, spec)
                await asyncio.to_thread(destroy, si, created.vm.moref)
                removed = await next_for(queue, spec.uid, "removed")
                assert removed.moref == created.vm.moref
            assert await backend.find_vm(conn, spec.uid) is None
        finally:
            await backend.close()


async def test_vms_destroyed_before_a_live_watch_reported_them_are_reported_removed(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    backend.watch_poll_gap = backend.watch_poll_gap_max = 0.1  # the race is with vcsim's tick, not with the watch's batching
    before = vm_spec("DC0_C1")
    await backend.create_vm(conn, before)
    async with watching(backend, conn) as queue:
        await next_for(queue, before.uid, "modified")  # the first batch: the watch is live
        for _ in range(5):
            spec = vm_spec("DC0_C1")
            created = await backend.create_vm(conn, spec)
            await asyncio.to_thread(destroy, si, created.vm.moref)
            removed = await next_for(queue, spec.uid, "removed")
            assert removed.moref == created.vm.moref
            assert await backend.find_vm(conn, spec.uid) is None
    await backend.destroy_vm(conn, before.uid)


async def test_pending_vm_is_read_then_resynced_and_a_gone_one_is_removed(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    sess = await backend.sessions.session(conn)
    index = VMIndex()
    w = VMWatch(sess, 5.0, index)
    try:
        await asyncio.to_thread(w.poll)  # the first batch: the watch is synced
        # A clone the collector has not reported yet (no poll runs here): the index knows it.
        spec = vm_spec()
        created = await backend.create_vm(conn, spec)
        index.put(spec.uid, vim.VirtualMachine(created.vm.moref, sess.stub))
        assert w.pending() == {created.vm.moref: spec.uid}
        for _ in range(RESYNC_AFTER_CHECKS):
            assert await backend.sessions.run(conn, w.check_pending) == []  # present: no change
        # The resync replaces the collector; its first batch reports the VM.
        changes = await asyncio.to_thread(w.poll)
        assert [(c.moref, c.kind) for c in changes if c.uid == spec.uid] == [(created.vm.moref, "modified")]
        assert w.pending() == {}
        before = backend.soap_requests(conn)
        assert await backend.sessions.run(conn, w.check_pending) == []
        assert backend.soap_requests(conn) == before  # nothing pending: no request
        # Reported VMs leave through the collector.
        await asyncio.to_thread(destroy, si, created.vm.moref)
        assert (await poll_until(w, spec.uid, "removed")).moref == created.vm.moref

        # Destroyed before the collector reported it: only the read can tell.
        gone = vm_spec()
        vm = (await backend.create_vm(conn, gone)).vm
        index.put(gone.uid, vim.VirtualMachine(vm.moref, sess.stub))
        await asyncio.to_thread(destroy, si, vm.moref)
        [removed] = await backend.sessions.run(conn, w.check_pending)
        assert (removed.uid, removed.moref, removed.kind) == (gone.uid, vm.moref, "removed")
        assert index.get(gone.uid) is None and w.pending() == {}
    finally:
        await backend.sessions.run(conn, lambda s: w.cancel())


async def test_a_vm_never_reported_is_checked_a_bounded_number_of_times(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    sess = await backend.sessions.session(conn)
    index = VMIndex()
    w = VMWatch(sess, 5.0, index)
    try:
        await asyncio.to_thread(w.poll)
        spec = vm_spec()
        created = await backend.create_vm(conn, spec)
        index.put(spec.uid, vim.VirtualMachine(created.vm.moref, sess.stub))
        # No poll runs, so the collector never reports it: reads stop after the bound.
        for _ in range(GIVE_UP_AFTER_CHECKS):
            assert await backend.sessions.run(conn, w.check_pending) == []
        assert w.pending() == {}
        before = backend.soap_requests(conn)
        assert await backend.sessions.run(conn, w.check_pending) == []
        assert backend.soap_requests(conn) == before
        assert exists(si, created.vm.moref)
    finally:
        await backend.sessions.run(conn, lambda s: w.cancel())
    await backend.destroy_vm(conn, spec.uid)


async def test_a_vm_reported_without_its_uid_is_attributed_through_the_index(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    # vcsim may list a VM before its config exists and never reports the extraConfig written
    # later. Here the VM really has no UID in its extraConfig; the index maps its moref to one.
    spec = vm_spec("DC0_C2")
    created = await backend.create_vm(conn, spec)
    source = vim.VirtualMachine(created.vm.moref, si._stub)
    task = source.CloneVM_Task(folder=source.parent, name=f"bare-{spec.uid[:8]}",
                               spec=vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=source.resourcePool)))
    await asyncio.to_thread(wait_task, task)
    bare = task.info.result._moId
    await backend.destroy_vm(conn, spec.uid)
    sess = await backend.sessions.session(conn)
    index = VMIndex()
    index.put(spec.uid, vim.VirtualMachine(bare, sess.stub))
    w = VMWatch(sess, 5.0, index)
    try:
        first = await poll_until(w, spec.uid, "modified")
        assert first.moref == bare
        await asyncio.to_thread(destroy, si, bare)
        removed = await poll_until(w, spec.uid, "removed")
        assert removed.moref == bare
    finally:
        await backend.sessions.run(conn, lambda s: w.cancel())


async def test_create_vm_never_clones_again_a_vm_removed_behind_its_back(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    # A reconcile working from a copy of the object older than its status (instanceUUID) asks
    # to converge a VM that was just removed by hand: the backend refuses to clone it again.
    spec = vm_spec()
    created = await backend.create_vm(conn, spec)
    await asyncio.to_thread(destroy, si, created.vm.moref)
    with pytest.raises(NotFound) as err:
        await backend.create_vm(conn, spec)
    assert err.value.reason == "VMNotFound"
    assert await backend.find_vm(conn, spec.uid) is None
    # The memory is per process: after a restart the object's status is the guard.
    fresh = VSphereBackend(max_workers=2, task_timeout=60.0, request_timeout=30.0)
    try:
        assert (await fresh.create_vm(conn, spec)).created is True
        assert await fresh.destroy_vm(conn, spec.uid) is True
    finally:
        await fresh.close()
