"""Change notifications (PropertyCollector WaitForUpdatesEx) against vcsim."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim
from vcwatch import next_for, watching

from banlieue.backends.base import Connection, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.testing.vcsim import VcsimProcess, wait_task

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]


def behind_the_back(vc: VcsimProcess, moref: str, action: str) -> None:
    si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                      sslContext=ssl.create_default_context(cafile=vc.ca_file))
    try:
        vm: Any = vim.VirtualMachine(moref, si._stub)
        wait_task(vm.PowerOffVM_Task() if action == "off" else vm.Destroy_Task())
    finally:
        Disconnect(si)


async def test_power_off_and_destroy_behind_the_adapters_back_are_notified(
    backend: VSphereBackend, conn: Connection, vcsim: VcsimProcess
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"w-{uid[:8]}", datacenter="DC1", cluster="DC1_C0", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=512)
    created = await backend.create_vm(conn, spec)
    await backend.set_power_state(conn, uid, "PoweredOn")
    async with watching(backend, conn) as queue:
        first = await next_for(queue, uid, "modified")  # the initial resync lists it
        assert first.moref == created.vm.moref
        assert first.instance_uuid == created.vm.instance_uuid
        await asyncio.to_thread(behind_the_back, vcsim, created.vm.moref, "off")
        change = await next_for(queue, uid, "modified")
        assert change.moref == created.vm.moref
        info = await backend.find_vm(conn, uid)
        assert info is not None and info.power_state == "PoweredOff"
        await asyncio.to_thread(behind_the_back, vcsim, created.vm.moref, "destroy")
        removed = await next_for(queue, uid, "removed")
        assert removed.moref == created.vm.moref
    assert await backend.find_vm(conn, uid) is None


async def test_idle_watch_sends_no_request_until_the_long_poll_expires(
    backend: VSphereBackend, conn: Connection
) -> None:
    async with watching(backend, conn) as queue:
        await asyncio.sleep(1.0)  # initial resync done
        while not queue.empty():
            queue.get_nowait()
        before = backend.soap_requests(conn)
        await asyncio.sleep(2.0)  # < watch_max_wait (5 s in the fixture)
        assert backend.soap_requests(conn) == before


async def test_watch_survives_a_terminated_session(
    backend: VSphereBackend, conn: Connection, vcsim: VcsimProcess
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"w-{uid[:8]}", datacenter="DC0", cluster="DC0_C2", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=512)
    created = await backend.create_vm(conn, spec)
    await backend.set_power_state(conn, uid, "PoweredOn")
    async with watching(backend, conn) as queue:
        await next_for(queue, uid, "modified")
        [sess] = backend.sessions.sessions.values()
        key = await asyncio.to_thread(lambda: sess.content.sessionManager.currentSession.key)
        admin = SmartConnect(host=vcsim.host, port=vcsim.port, user=vcsim.username, pwd=vcsim.password,
                             sslContext=ssl.create_default_context(cafile=vcsim.ca_file))
        try:
            admin.content.sessionManager.TerminateSession([key])
        finally:
            Disconnect(admin)
        await asyncio.to_thread(behind_the_back, vcsim, created.vm.moref, "off")
        # Either the long poll sees the change, or it fails with NotAuthenticated, logs in
        # again and resyncs: both deliver a change for the VM.
        await next_for(queue, uid, "modified")
        info = await backend.find_vm(conn, uid)
        assert info is not None and info.power_state == "PoweredOff"
    await backend.destroy_vm(conn, uid)


async def test_a_running_watch_makes_lookups_of_unknown_uids_free(
    backend: VSphereBackend, conn: Connection
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"w-{uid[:8]}", datacenter="DC0", cluster="DC0_C0", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256)
    cold = VSphereBackend()
    try:
        await cold.create_vm(conn, spec)  # made by "another process": only the watch can tell us
    finally:
        await cold.close()
    async with watching(backend, conn) as queue:
        await next_for(queue, uid, "modified")
        before = backend.soap_requests(conn)
        assert await backend.find_vm(conn, str(uuid.uuid4())) is None
        assert backend.soap_requests(conn) == before
        found = await backend.find_vm(conn, uid)
        assert found is not None and found.uid == uid
        assert (await backend.create_vm(conn, spec)).created is False
    await backend.destroy_vm(conn, uid)
