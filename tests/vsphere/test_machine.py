"""Clone, reconfigure, guestinfo, power and destroy against vcsim, read back through pyvmomi."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from banlieue.backends.base import Connection, DiskSpec, InvalidSpec, NicSpec, NotFound, VMSpec
from banlieue.backends.vsphere import guestinfo, tasks
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]



def vms_with_uid(si: Any, uid: str) -> list[Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return [vm for vm in view.view if any(o.key == UID_KEY and o.value == uid for o in vm.config.extraConfig)]
    finally:
        view.Destroy()


def fixed_mac(uid: str) -> str:
    """eth1's given MAC, in VMware's manual range, one per VM: a MAC another VM of the vCenter has
    is refused before the clone (issue F5), and the module's VMs share one vcsim."""
    h = uuid.UUID(uid).hex
    return f"00:50:56:{int(h[:2], 16) & 0x3F:02x}:{h[2:4]}:{h[4:6]}"


def spec(uid: str, **kw: Any) -> VMSpec:
    base: dict[str, Any] = {
        "uid": uid,
        "name": f"vm-{uid[:8]}",
        "datacenter": "DC0",
        "cluster": "DC0_C1",
        "template": "ubuntu-22.04",
        "num_cpus": 4,
        "num_cores_per_socket": 2,
        "memory_mib": 4096,
        "disks": (DiskSpec("os", 20), DiskSpec("data", 5, provisioning="thick")),
        "nics": (
            NicSpec("eth0", "DC0_DVPG0", addresses=("10.0.0.5/24",), dhcp4=False, gateway4="10.0.0.1",
                    nameservers=("10.0.0.2",)),
            NicSpec("eth1", "VM Network", mac_address=fixed_mac(uid)),
        ),
        "user_data": b"#cloud-config\nhostname: test\n",
    }
    base.update(kw)
    return VMSpec(**base)


async def test_create_reconfigure_guestinfo_power_on_reads_back(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    result = await backend.create_vm(conn, spec(uid))
    assert result.created
    info = await backend.set_power_state(conn, uid, "PoweredOn")
    assert info.power_state == "PoweredOn"

    [vm] = vms_with_uid(si, uid)
    hw = vm.config.hardware
    assert (hw.numCPU, hw.numCoresPerSocket, hw.memoryMB) == (4, 2, 4096)
    # By SCSI unit, not device-list order (vcsim re-appends an edited disk at the end of the list).
    disks = sorted((d for d in hw.device if isinstance(d, vim.vm.device.VirtualDisk)), key=lambda d: d.unitNumber)
    assert [d.capacityInKB // (1024 * 1024) for d in disks] == [20, 5]
    nics = [d for d in hw.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]
    assert len(nics) == 2
    assert isinstance(nics[0].backing, vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo)
    assert nics[1].backing.deviceName == "VM Network"
    assert nics[1].macAddress == fixed_mac(uid)
    assert vm.runtime.powerState == "poweredOn"
    assert vm.config.uuid == info.bios_uuid and vm.config.instanceUuid == info.instance_uuid

    extra = {o.key: o.value for o in vm.config.extraConfig}
    assert extra["guestinfo.userdata.encoding"] == "base64"
    assert extra["guestinfo.metadata.encoding"] == "base64"
    md, ud = guestinfo.decode(extra)
    assert ud == b"#cloud-config\nhostname: test\n"
    assert md is not None
    assert md["instance-id"] == uid and md["local-hostname"] == f"vm-{uid[:8]}"
    eth0 = md["network"]["ethernets"]["eth0"]
    assert eth0["match"]["macaddress"] == nics[0].macAddress.lower()
    assert eth0["addresses"] == ["10.0.0.5/24"] and eth0["dhcp4"] is False
    assert eth0["routes"] == [{"to": "0.0.0.0/0", "via": "10.0.0.1"}]
    assert md["network"]["ethernets"]["eth1"]["match"]["macaddress"] == fixed_mac(uid)
    # The VM is in the requested cluster: its resource pool belongs to DC0_C1.
    assert vm.resourcePool.owner.name == "DC0_C1"
    # Issue 23 case 3: cloud-init's VMware datasource is asked to clear the user data once read.
    assert md["redact"] == ["userdata"] and md["cleanup-guestinfo"] == ["userdata"]


async def test_user_data_the_guest_redacted_is_not_written_back(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    """Issue 23 case 3: once cloud-init redacted ``guestinfo.userdata`` (``---``, the encoding a
    space: what its ``vmware-rpctool info-set`` leaves; vcsim runs no guest, so the test writes
    the same values through the API), converging the VM again does not restore the bootstrap
    data, while the metadata is still converged."""
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec(uid))
    [vm] = vms_with_uid(si, uid)
    task = vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[
        vim.option.OptionValue(key="guestinfo.userdata", value="---"),
        vim.option.OptionValue(key="guestinfo.userdata.encoding", value=" "),
        vim.option.OptionValue(key="guestinfo.metadata", value="")]))
    WaitForTask(task)
    again = await backend.create_vm(conn, spec(uid))
    assert not again.created
    extra = {o.key: o.value for o in vm.config.extraConfig}
    assert extra["guestinfo.userdata"] == "---", "the redacted user data was written back"
    md, _ = guestinfo.decode(extra)
    assert md is not None and md["instance-id"] == uid  # the rest is still converged


async def test_create_twice_yields_one_vm_and_destroy_twice_is_fine(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    first = await backend.create_vm(conn, spec(uid))
    second = await backend.create_vm(conn, spec(uid))
    assert first.created and not second.created
    assert second.vm.moref == first.vm.moref
    # A fresh backend (a restarted controller) has no cache: it must find the VM by UID too.
    other = VSphereBackend()
    try:
        third = await other.create_vm(conn, spec(uid))
    finally:
        await other.close()
    assert not third.created
    assert len(vms_with_uid(si, uid)) == 1

    await backend.set_power_state(conn, uid, "PoweredOn")
    assert await backend.destroy_vm(conn, uid, off_mode="hard") is True
    assert vms_with_uid(si, uid) == []
    assert await backend.destroy_vm(conn, uid) is False
    assert await backend.find_vm(conn, uid) is None


async def test_find_vm_by_uid_and_by_instance_uuid(backend: VSphereBackend, conn: Connection) -> None:
    uid = str(uuid.uuid4())
    created = await backend.create_vm(conn, spec(uid, nics=(), disks=()))
    found = await backend.find_vm(conn, uid)
    assert found is not None and found.moref == created.vm.moref
    by_uuid = await backend.find_vm(conn, "not-a-known-uid", instance_uuid=created.vm.instance_uuid)
    assert by_uuid is not None and by_uuid.moref == created.vm.moref
    await backend.destroy_vm(conn, uid)


async def test_power_off_modes_and_suspend(backend: VSphereBackend, conn: Connection) -> None:
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec(uid, nics=(), disks=()))
    for state, mode in [("PoweredOn", "hard"), ("PoweredOff", "soft"), ("PoweredOn", "hard"),
                        ("Suspended", "hard"), ("PoweredOff", "trySoft"), ("PoweredOn", "hard"),
                        ("PoweredOff", "hard")]:
        info = await backend.set_power_state(conn, uid, state, off_mode=mode, soft_timeout=5)  # type: ignore[arg-type]
        assert info.power_state == state, (state, mode)
    await backend.destroy_vm(conn, uid)


async def test_shrinking_a_disk_is_invalid_and_unknown_names_are_not_found(
    backend: VSphereBackend, conn: Connection
) -> None:
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec(uid, nics=(), disks=(DiskSpec("os", 10),)))
    with pytest.raises(InvalidSpec):
        await backend.create_vm(conn, spec(uid, nics=(), disks=(DiskSpec("os", 5),)))
    await backend.destroy_vm(conn, uid)
    with pytest.raises(NotFound) as err:
        await backend.create_vm(conn, spec(str(uuid.uuid4()), template="no-such-template"))
    assert err.value.reason == "TemplateNotFound"
    # A datacenter that does not exist is said as such, not as a template missing from it.
    with pytest.raises(NotFound) as err:
        await backend.create_vm(conn, spec(str(uuid.uuid4()), datacenter="DCX"))
    assert err.value.reason == "DatacenterNotFound"
    assert str(err.value) == "datacenter 'DCX' not found: this vCenter has DC0, DC1"
    with pytest.raises(NotFound) as err:
        await backend.create_vm(conn, spec(str(uuid.uuid4()), nics=(NicSpec("eth0", "no-such-pg"),)))
    assert err.value.reason == "NetworkNotFound"


async def test_linked_clone_without_template_snapshot_falls_back_to_full_clone(
    backend: VSphereBackend, conn: Connection
) -> None:
    uid = str(uuid.uuid4())
    result = await backend.create_vm(conn, spec(uid, clone_mode="linkedClone", disks=(), nics=()))
    assert result.clone_mode == "fullClone"
    assert "no snapshot" in result.message
    await backend.destroy_vm(conn, uid)


async def test_unknown_network_is_reported_before_anything_is_cloned(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    with pytest.raises(NotFound):
        await backend.create_vm(conn, spec(uid, nics=(NicSpec("eth0", "no-such-pg"),)))
    assert vms_with_uid(si, uid) == []


async def test_logs_and_reprs_never_contain_the_password_or_user_data(
    vcsim_factory: Callable[..., VcsimProcess], make_conn: Callable[..., Connection],
    capsys: pytest.CaptureFixture[str],
) -> None:
    password = "s3cr3t-Pw-banlieue"
    vc = vcsim_factory(dc=1, cluster=1, password=password)
    conn = make_conn(vc)
    secret = b"#cloud-config\nchpasswd: hunter2-user-data\n"
    uid = str(uuid.uuid4())
    fresh = VSphereBackend()
    try:
        s = spec(uid, user_data=secret, disks=(), nics=(), cluster="DC0_C0")
        await fresh.create_vm(conn, s)
        await fresh.set_power_state(conn, uid, "PoweredOn")
        await fresh.destroy_vm(conn, uid, off_mode="hard")
        assert password not in repr(conn) and "hunter2" not in repr(s)
    finally:
        await fresh.close()
    out = capsys.readouterr()
    assert "vsphere session opened" in out.out + out.err  # the logs were captured
    for text in (out.out, out.err):
        assert password not in text
        assert "hunter2" not in text


async def test_a_controller_killed_mid_clone_finds_the_vm_after_restart(
    vcsim_factory: Callable[..., VcsimProcess], make_conn: Callable[..., Connection]
) -> None:
    vc = vcsim_factory(dc=1, cluster=1, method_delay={"CloneVM_Task": 2000})
    conn = make_conn(vc)
    uid = str(uuid.uuid4())
    s = spec(uid, cluster="DC0_C0", disks=(), nics=())
    first = VSphereBackend()
    try:
        attempt = asyncio.create_task(first.create_vm(conn, s))
        await asyncio.sleep(0.7)  # the CloneVM_Task request is in flight
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
    finally:
        await first.close()
    await asyncio.sleep(2.0)  # vcsim finishes the clone although its caller went away
    restarted = VSphereBackend()
    try:
        result = await restarted.create_vm(conn, s)
        assert result.created is False  # found by the UID written at clone time
        assert result.vm.num_cpus == 4  # and converged
        inv_si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                              sslContext=ssl.create_default_context(cafile=vc.ca_file))
        try:
            assert len(vms_with_uid(inv_si, uid)) == 1
        finally:
            Disconnect(inv_si)
    finally:
        await restarted.close()


async def test_a_failed_task_raises_task_failed_with_the_fault_message(
    backend: VSphereBackend, conn: Connection
) -> None:
    from banlieue.backends.base import TaskFailed
    from banlieue.backends.vsphere.tasks import wait_task

    uid = str(uuid.uuid4())
    created = await backend.create_vm(conn, spec(uid, disks=(), nics=()))
    assert created.vm.power_state == "PoweredOff"
    run = backend._runner(conn)
    vm = vim.VirtualMachine(created.vm.moref, backend.sessions.sessions[conn.session_key].stub)
    task = await run(lambda s: vm.PowerOffVM_Task())  # already off: the task fails
    with pytest.raises(TaskFailed) as err:
        await wait_task(run, task, "power off", 10.0, backend.sessions.endpoint_for(conn).label)
    assert err.value.reason == "TaskFailed"
    assert str(err.value).startswith("power off: ")
    await backend.destroy_vm(conn, uid)


async def test_power_on_right_after_create_copes_with_a_vm_powered_on_behind_its_back(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    """set_power_state starts from create_vm's read-back when it follows within FRESH_SECONDS;
    a VM someone powered on in between fails the power-on task, and the backend reads the VM
    and finds nothing left to do (one attempt more, never an error)."""
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec(uid))
    [vm] = vms_with_uid(si, uid)
    vm.PowerOnVM_Task()
    for _ in range(50):
        if vm.runtime.powerState == "poweredOn":
            break
        await asyncio.sleep(0.02)
    info = await backend.set_power_state(conn, uid, "PoweredOn")
    assert info.power_state == "PoweredOn" and info.uid == uid
    # And the plain path: a power-off reads the VM, powers it off and reads it back.
    off = await backend.set_power_state(conn, uid, "PoweredOff", "hard")
    assert off.power_state == "PoweredOff" and vm.runtime.powerState == "poweredOff"



async def _in_flight_cost(backend: VSphereBackend, conn: Connection, uid: str) -> tuple[int, list[Any]]:
    """(SOAP requests, tasks found running) of destroy_vm's check for a running power or destroy
    task on ``uid``'s VM (``tasks.in_flight``), run as destroy_vm runs it."""
    found = await backend.find_vm(conn, uid)
    assert found is not None
    moref = found.moref
    vm_type: Any = vim.VirtualMachine
    before = backend.soap_requests(conn)
    running = await backend.sessions.run(conn, lambda s: tasks.in_flight(s.content, vm_type(moref, s.stub),
                                                                         tasks.DESTROY_TASKS | tasks.POWER_TASKS))
    return backend.soap_requests(conn) - before, running


async def test_destroy_skips_the_tasks_this_process_saw_end(backend: VSphereBackend, conn: Connection, si: Any) -> None:
    """Issue 22 (deletion cost): destroy_vm waits for a power or destroy task still running on the
    VM (``tasks.in_flight``: the VM's recentTask, then the tasks), but a task this process followed
    to its end (create_vm's reconfigure, set_power_state's power-on) is not read again: the check
    costs the recentTask read alone (was one more read per recent task). A restarted process
    (the ended tasks forgotten) reads them all in one request."""
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec(uid))
    await backend.set_power_state(conn, uid, "PoweredOn")
    assert await _in_flight_cost(backend, conn, uid) == (1, [])
    tasks.forget_ended(backend.endpoint_label(conn))  # as after a restart
    # The second request is the read of the recent tasks (reconfigure, power-on): there were some.
    assert await _in_flight_cost(backend, conn, uid) == (2, [])
    assert await backend.destroy_vm(conn, uid, off_mode="hard") is True
    assert vms_with_uid(si, uid) == []
