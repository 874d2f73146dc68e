"""Unknown outcomes are resolved, not retried (issue 19; ADR 0012): a clone, destroy or power
task whose result the caller did not see (its follower stopped: reconcile cancelled, process
killed, task timeout; or the request's answer lost) is looked up before anything is sent again.

vcsim's ``--task-delay`` keeps a task running after its SOAP call answered (``LockHandoff=0``:
without it vcsim holds the VM's lock during the delay and nothing can read the VM, which a real
vCenter never does); ``--method-delay`` holds the answer past the request timeout. Ground truth
is vCenter's own TaskManager.recentTask, read through the test's pyvmomi session: how many tasks
of a kind were started on the VM."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.backends.base import BackendError, Connection, NicSpec, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]


def spec(uid: str) -> VMSpec:
    return VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256, nics=(NicSpec("eth0", "VM Network"),))


def connect(vc: VcsimProcess) -> Any:
    from pyVim import connect as _connect

    pyvim: Any = _connect
    return pyvim.SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                              sslContext=ssl.create_default_context(cafile=vc.ca_file))


@pytest.fixture
def slow(vcsim_factory: Callable[..., VcsimProcess]) -> Callable[..., tuple[VcsimProcess, Any]]:
    """``slow(task_delay=..., method_delay=...)`` -> (vcsim, pyvmomi ServiceInstance of the test)."""
    def make(**opts: Any) -> tuple[VcsimProcess, Any]:
        if "task_delay" in opts:
            opts["task_delay"] = {"LockHandoff": 0, **opts["task_delay"]}
        vc = vcsim_factory(**opts)
        return vc, connect(vc)

    return make


def vms_with_uid(si: Any, uid: str) -> list[Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return [v for v in view.view if any(o.key == UID_KEY and o.value == uid for o in v.config.extraConfig or [])]
    finally:
        view.Destroy()


def tasks_on(si: Any, moref: str, kind: str) -> list[str]:
    """States of the recent tasks of ``kind`` (descriptionId ``VirtualMachine.<kind>``) on ``moref``."""
    content = si.RetrieveContent()
    out = []
    for t in content.taskManager.recentTask:
        try:
            info = t.info
        except TypeError:
            continue  # vcsim's file tasks name a non-entity (VirtualDiskManager) pyVmomi cannot read
        if info.descriptionId == f"VirtualMachine.{kind}" and info.entity is not None and info.entity._moId == moref:
            out.append(str(info.state))
    return out


def poll(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


async def stopped_mid_task(coro: Any, started: Callable[[], bool]) -> None:
    """Run ``coro`` until ``started()`` holds, then cancel it (its process stopped following the task)."""
    task = asyncio.ensure_future(coro)
    await asyncio.to_thread(poll, started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def backend(**kw: Any) -> VSphereBackend:
    return VSphereBackend(**{"max_workers": 2, "task_timeout": 60.0, "request_timeout": 30.0, **kw})


async def test_a_destroy_left_running_is_waited_for_not_sent_again(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    vc, si = slow(task_delay={"Destroy": 2500})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    first, second = backend(), backend()
    try:
        moref = (await first.create_vm(conn, spec(uid))).vm.moref
        await stopped_mid_task(first.destroy_vm(conn, uid), lambda: bool(tasks_on(si, moref, "destroy")))
        # A restarted manager: a fresh backend, nothing in memory.
        assert await second.destroy_vm(conn, uid) is True
        assert vms_with_uid(si, uid) == []
        assert tasks_on(si, moref, "destroy") == ["success"]  # one Destroy_Task, never a second
    finally:
        await first.close()
        await second.close()


async def test_a_destroy_whose_answer_is_lost_is_done_only_once_the_vm_is_gone(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    vc, si = slow(method_delay={"Destroy_Task": 2500})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    b = backend(request_timeout=1.0)
    try:
        await b.create_vm(conn, spec(uid))
        with pytest.raises(BackendError) as lost:
            await b.destroy_vm(conn, uid)
        assert lost.value.reason == "DestroyOutcomeUnknown"
        deadline = time.monotonic() + 20
        while True:
            try:
                await b.destroy_vm(conn, uid)
                break
            except BackendError as exc:
                assert exc.reason in ("DestroyOutcomeUnknown", "Timeout"), exc
                assert vms_with_uid(si, uid), "reported not done although the VM is gone"
                assert time.monotonic() < deadline
                await asyncio.sleep(0.5)
        assert vms_with_uid(si, uid) == []  # done means gone
    finally:
        await b.close()


async def test_a_power_on_left_running_is_waited_for_not_sent_again(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    vc, si = slow(task_delay={"PowerOn": 2500})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    first, second = backend(), backend()
    try:
        moref = (await first.create_vm(conn, spec(uid))).vm.moref
        await stopped_mid_task(first.set_power_state(conn, uid, "PoweredOn"), lambda: bool(tasks_on(si, moref, "powerOn")))
        info = await second.set_power_state(conn, uid, "PoweredOn")
        assert info.power_state == "PoweredOn"
        assert tasks_on(si, moref, "powerOn") == ["success"]  # one PowerOnVM_Task, never a second
        await second.destroy_vm(conn, uid, off_mode="hard")
    finally:
        await first.close()
        await second.close()


async def test_a_power_on_whose_answer_is_lost_is_checked_against_the_power_state(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    vc, si = slow(method_delay={"PowerOnVM_Task": 2500})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    b = backend(request_timeout=1.0)
    try:
        moref = (await b.create_vm(conn, spec(uid))).vm.moref
        with pytest.raises(BackendError) as lost:
            await b.set_power_state(conn, uid, "PoweredOn")
        assert lost.value.reason == "PowerOutcomeUnknown"
        await asyncio.to_thread(poll, lambda: bool(tasks_on(si, moref, "powerOn")))  # the lost call landed
        info = await b.set_power_state(conn, uid, "PoweredOn")
        assert info.power_state == "PoweredOn"
        assert tasks_on(si, moref, "powerOn") == ["success"]
        await b.destroy_vm(conn, uid, off_mode="hard")
    finally:
        await b.close()


async def test_a_clone_whose_task_outlived_the_timeout_is_resolved_by_its_task_not_cloned_again(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    vc, si = slow(task_delay={"CloneVm": 3000})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    b, restarted = backend(task_timeout=1.0), backend()
    keys: list[str] = []

    async def record(key: str) -> None:
        keys.append(key)

    try:
        with pytest.raises(BackendError) as lost:
            await b.create_vm(conn, spec(uid), on_clone_task=record)
        assert lost.value.reason == "CloneOutcomeUnknown"
        # The key was handed out before the wait: a process that never saw the clone resolves it.
        [key] = keys
        assert await restarted.clone_task_state(conn, key) == "running"
        # Called again while the task runs: it is not cloned a second time.
        with pytest.raises(BackendError) as running:
            await b.create_vm(conn, spec(uid))
        assert running.value.reason == "CloneOutcomeUnknown" and "still running" in str(running.value)
        await asyncio.to_thread(poll, lambda: bool(vms_with_uid(si, uid)))
        result = await b.create_vm(conn, spec(uid))
        assert [v._moId for v in vms_with_uid(si, uid)] == [result.vm.moref]
        assert await restarted.clone_task_state(conn, key) == "success"
        assert await restarted.clone_task_state(conn, "task-999999") == "unknown"
        await b.destroy_vm(conn, uid)
    finally:
        await b.close()
        await restarted.close()


async def test_a_clone_without_a_recorded_task_is_resolved_from_the_event_history(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    """``clone_sent_state`` for a process that died before recording the clone's task key:
    nothing started and no clone queued or running on the vCenter -> error (clone again);
    started and running on the template -> running; landed -> success; ended without the VM
    (vcsim: DuplicateName, as a second clone of the name fails) -> error."""
    vc, _ = slow(task_delay={"CloneVm": 1500})
    conn = make_conn(vc)
    since = datetime.now(UTC)
    first, second = backend(), backend()
    uid = str(uuid.uuid4())
    try:
        assert await second.clone_sent_state(conn, uid, spec(uid).name, since) == "error"
        cloning = asyncio.ensure_future(first.create_vm(conn, spec(uid)))
        seen = []
        while not cloning.done():
            seen.append(await second.clone_sent_state(conn, uid, spec(uid).name, since))
            await asyncio.sleep(0.1)
        await cloning
        # Until the CloneVM_Task call reaches vcsim nothing is queued: "error" (nothing was sent
        # yet). From the first "running" on, never "error" while the clone runs.
        assert "running" in seen and "error" not in seen[seen.index("running"):], seen
        assert await second.clone_sent_state(conn, uid, spec(uid).name, since) == "success"
        other = str(uuid.uuid4())
        same_name = replace(spec(other), name=spec(uid).name)
        with pytest.raises(BackendError):
            await first.create_vm(conn, same_name)  # DuplicateName: the clone task failed
        assert await second.clone_sent_state(conn, other, same_name.name, since) == "error"
    finally:
        await first.close()
        await second.close()


async def test_a_clone_in_no_history_waits_while_a_clone_is_queued_or_running_on_the_vcenter(
    slow: Callable[..., tuple[VcsimProcess, Any]], make_conn: Callable[..., Connection]
) -> None:
    """No clone into the name in vCenter's history: a clone task queued or running anywhere on
    the vCenter may be this one (a queued task has no event yet): "unknown" while one is, then
    the full scan decides: "error" without the VM, "success" with it (a history lost, as a
    restarted vCenter loses it, with the VM there)."""
    vc, _ = slow(task_delay={"CloneVm": 2500})
    conn = make_conn(vc)
    since = datetime.now(UTC)
    first, second = backend(), backend()
    uid, other = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        cloning = asyncio.ensure_future(first.create_vm(conn, spec(other)))  # another machine's clone
        seen = []
        while not cloning.done():
            seen.append(await second.clone_sent_state(conn, uid, spec(uid).name, since))
            await asyncio.sleep(0.1)
        await cloning
        assert "unknown" in seen and set(seen) <= {"unknown", "error"}, seen
        assert await second.clone_sent_state(conn, uid, spec(uid).name, since) == "error"
        # The VM carrying the UID is there though no clone into this name is in the history.
        assert await second.clone_sent_state(conn, other, "a-name-never-cloned", since) == "success"
    finally:
        await first.close()
        await second.close()
