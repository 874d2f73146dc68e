"""vCenter faults through the simulator's own means (``hack/vcsim/faults.go``), seen by the product.

- ``fault``: a clone call vCenter refuses (InsufficientResourcesFault) fails the create with that
  reason and leaves nothing behind; the next create succeeds with exactly one VM.
- ``task_delay``: a clone task that runs after the call returned it, as vCenter's do; the
  product waits for it, and a session ended meanwhile does not lose the VM.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

from banlieue.backends.base import BackendError, Connection, NicSpec, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.testing.vcsim import VcsimProcess, wait_task

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]


def vm_spec(uid: str) -> VMSpec:
    return VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C0", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256, nics=(NicSpec("eth0", "VM Network"),))


def session(vc: VcsimProcess) -> Any:
    return SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                        sslContext=ssl.create_default_context(cafile=vc.ca_file))


def vms_with_uid(si: Any, uid: str) -> list[str]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return [vm.name for vm in view.view if any(o.key == UID_KEY and o.value == uid for o in vm.config.extraConfig)]
    finally:
        view.Destroy()


async def test_a_refused_clone_fails_with_the_fault_then_the_next_create_succeeds(
    backend: VSphereBackend, vcsim_factory: Callable[..., VcsimProcess], make_conn: Callable[..., Connection]
) -> None:
    vc = vcsim_factory(dc=1, cluster=1, fault=["CloneVM_Task:InsufficientResourcesFault:1"])
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    with pytest.raises(BackendError) as err:
        await backend.create_vm(conn, vm_spec(uid))
    assert err.value.reason == "InsufficientResourcesFault"
    si = session(vc)
    try:
        assert vms_with_uid(si, uid) == []
        result = await backend.create_vm(conn, vm_spec(uid))
        assert result.created
        assert vms_with_uid(si, uid) == [f"vm-{uid[:8]}"]
    finally:
        Disconnect(si)


async def test_a_clone_task_runs_after_the_call_and_survives_an_ended_session(
    backend: VSphereBackend, vcsim_factory: Callable[..., VcsimProcess], make_conn: Callable[..., Connection]
) -> None:
    vc = vcsim_factory(dc=1, cluster=1, task_delay={"CloneVm": 1500})
    si = session(vc)
    try:
        # The harness flag itself: the call returns a running task, which succeeds later.
        content = si.RetrieveContent()
        template = next(vm for vm in content.viewManager.CreateContainerView(
            content.rootFolder, [vim.VirtualMachine], True).view if vm.name == "ubuntu-22.04")
        pool = content.rootFolder.childEntity[0].hostFolder.childEntity[0].resourcePool
        start = time.monotonic()
        task = template.CloneVM_Task(folder=template.parent, name="delayed",
                                     spec=vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool)))
        assert task.info.state == "running"
        wait_task(task)
        assert time.monotonic() - start >= 1.4

        # The product: its session is ended while it waits for the clone; the VM is still found.
        conn = make_conn(vc)
        uid = str(uuid.uuid4())
        await backend.check_connection(conn)
        own = si.content.sessionManager.currentSession.key
        create = asyncio.ensure_future(backend.create_vm(conn, vm_spec(uid)))
        await asyncio.sleep(0.5)
        others = [s.key for s in si.content.sessionManager.sessionList if s.key != own]
        assert others
        si.content.sessionManager.TerminateSession(sessionId=others)
        result = await create
        assert result.created and vms_with_uid(si, uid) == [f"vm-{uid[:8]}"]
    finally:
        Disconnect(si)
