"""Issue 22's SOAP floor: a VM is provisioned with one CloneVM_Task that carries its whole
configuration (CPU, memory, disk growth and added disks, NICs with MACs banlieue chose, guestinfo)
and one PowerOnVM_Task, with no ReconfigVM_Task; the guest's network metadata names the MACs the
VM actually has (ADR 0014).

The SOAP methods are counted where pyVmomi sends them (``SoapStubAdapter.InvokeMethod``: every
request of this process, the backend's own included); the VM is then read through the test's own
session, not the backend's."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from pyVmomi import SoapAdapter, vim
from vcwatch import until_authoritative, watching

from banlieue.backends.base import Connection, DiskSpec, NicSpec, VMSpec
from banlieue.backends.vsphere import macs
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.backends.vsphere.nics import NIC_KEY_PREFIX

pytestmark = [pytest.mark.vcsim]

GIB_KB = 1024 * 1024
USER_MAC = "00:50:56:3f:ab:cd"  # a NIC whose spec gives its MAC keeps it


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """(SOAP method, its arguments) of every request this process sends while the test runs."""
    calls: list[tuple[str, Any]] = []
    original: Any = SoapAdapter.SoapStubAdapter.InvokeMethod

    def invoke(self: Any, mo: Any, info: Any, args: Any, outerStub: Any = None) -> Any:
        calls.append((str(info.wsdlName), args))
        return original(self, mo, info, args, outerStub)

    monkeypatch.setattr(SoapAdapter.SoapStubAdapter, "InvokeMethod", invoke)
    return calls


def read_vm(si: Any, uid: str) -> Any:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        [vm] = [v for v in view.view if any(o.key == UID_KEY and o.value == uid for o in v.config.extraConfig or [])]
        return vm
    finally:
        view.Destroy()


async def test_a_provisioned_vm_costs_one_clone_carrying_its_configuration_and_one_power_on(
    backend: VSphereBackend, conn: Connection, si: Any, sent: list[tuple[str, Any]]
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=2, memory_mib=2048, user_data=b"#cloud-config\n",
                  # The template's own OS disk size: a grown template disk costs one reconfigure
                  # after the clone (``clone.with_config``; the next test).
                  disks=(DiskSpec("os", 10), DiskSpec("data", 5)),
                  nics=(NicSpec("primary", "VM Network", dhcp4=True),
                        NicSpec("storage", "DC0_DVPG0", dhcp4=False, addresses=("10.0.0.5/24",)),
                        NicSpec("fixed", "VM Network", mac_address=USER_MAC.upper())))
    sent.clear()
    created = await backend.create_vm(conn, spec)
    await backend.set_power_state(conn, uid, "PoweredOn")
    methods = Counter(m for m, _ in sent)
    assert (methods["CloneVM_Task"], methods["PowerOnVM_Task"], methods["ReconfigVM_Task"]) == (1, 1, 0), methods
    assert task_polls(sent) >= 2  # without a change watch both tasks are polled (the next test: with one)
    [clone_args] = [args for m, args in sent if m == "CloneVM_Task"]
    carried = clone_args[-1].config  # CloneVM_Task(folder, name, spec)
    extra = {o.key: o.value for o in carried.extraConfig}
    assert (carried.numCPUs, carried.memoryMB, extra[UID_KEY]) == (2, 2048, uid)
    assert {"guestinfo.metadata", "guestinfo.userdata", NIC_KEY_PREFIX + "primary"} <= set(extra)

    vm = await asyncio.to_thread(read_vm, si, uid)
    hw = vm.config.hardware
    assert (hw.numCPU, hw.memoryMB, vm.runtime.powerState) == (2, 2048, "poweredOn")
    assert sorted(d.capacityInKB // GIB_KB for d in hw.device if isinstance(d, vim.vm.device.VirtualDisk)) == [5, 10]
    cards = [d for d in hw.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]
    have = {str(d.macAddress).lower() for d in cards}
    labels = {o.key[len(NIC_KEY_PREFIX):]: o.value for o in vm.config.extraConfig if o.key.startswith(NIC_KEY_PREFIX)}
    assert set(labels) == {"primary", "storage", "fixed"} and set(labels.values()) == have, (labels, have)
    assert labels["fixed"] == USER_MAC
    assert all(macs.in_manual_range(labels[n]) for n in ("primary", "storage")), labels
    assert all(d.addressType == "manual" for d in cards)
    md = json.loads(base64.b64decode(next(o.value for o in vm.config.extraConfig if o.key == "guestinfo.metadata")))
    named = {eth["set-name"]: eth["match"]["macaddress"] for eth in md["network"]["ethernets"].values()}
    assert named == labels  # the guest's network config matches the MACs the VM has, by NIC name
    assert {n.mac_address for n in created.vm.nics} == have  # what create_vm returned is what is there
    await backend.destroy_vm(conn, uid)


async def test_a_grown_template_disk_costs_one_reconfigure_after_the_clone_and_leaves_the_template_whole(
    backend: VSphereBackend, conn: Connection, si: Any, sent: list[tuple[str, Any]]
) -> None:
    """Growing the template's disk is not carried by the clone (vcsim would back the clone's disk
    with the template's file, which destroying the clone deletes): one ReconfigVM_Task grows it,
    and a clone after the destroy still has the template's disk."""
    sizes = []
    for _ in range(2):
        uid = str(uuid.uuid4())
        spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                      num_cpus=1, memory_mib=1024, disks=(DiskSpec("os", 15),), nics=(NicSpec("primary", "VM Network", dhcp4=True),))
        sent.clear()
        await backend.create_vm(conn, spec)
        methods = Counter(m for m, _ in sent)
        assert (methods["CloneVM_Task"], methods["ReconfigVM_Task"]) == (1, 1), methods
        hw = (await asyncio.to_thread(read_vm, si, uid)).config.hardware
        sizes.append([d.capacityInKB // GIB_KB for d in hw.device if isinstance(d, vim.vm.device.VirtualDisk)])
        await backend.destroy_vm(conn, uid)
    assert sizes == [[15], [15]]


async def test_a_mac_in_use_on_the_vcenter_is_never_chosen(
    backend: VSphereBackend, conn: Connection, si: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first VM's MAC is known to the index (read in full); the allocator is made to draw it
    # first, then another value: the second VM gets the other one.
    first = str(uuid.uuid4())
    spec = VMSpec(uid=first, name=f"vm-{first[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=1024, nics=(NicSpec("a", "VM Network"),))
    got = await backend.create_vm(conn, spec)
    [taken] = [n.mac_address for n in got.vm.nics]
    draws = iter([int(taken.replace(":", "")[6:], 16), 0x123456])
    real = macs.choose
    monkeypatch.setattr(macs, "choose", lambda used, count, rand=None: real(used, count, lambda a, b: next(draws)))
    second = str(uuid.uuid4())
    other = await backend.create_vm(conn, replace(spec, uid=second, name=f"vm-{second[:8]}"))
    assert [n.mac_address for n in other.vm.nics] == ["00:50:56:12:34:56"]
    await backend.destroy_vm(conn, first)
    await backend.destroy_vm(conn, second)


def task_polls(sent: list[tuple[str, Any]]) -> int:
    """The RetrievePropertiesEx requests about a Task (``tasks.wait_task``'s polls)."""
    return sum(1 for m, args in sent if m == "RetrievePropertiesEx"
               and any(isinstance(o.obj, vim.Task) for spec in args[0] for o in spec.objectSet or []))


@pytest.mark.timeout(60)
async def test_with_a_watch_the_power_on_is_ended_by_it_not_polled(
    backend: VSphereBackend, conn: Connection, sent: list[tuple[str, Any]]
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=1024, nics=(NicSpec("a", "VM Network"),))
    await backend.check_connection(conn)
    async with watching(backend, conn):
        await until_authoritative(backend, conn)
        await backend.create_vm(conn, spec)
        sent.clear()
        info = await backend.set_power_state(conn, uid, "PoweredOn")
        assert info.power_state == "PoweredOn"
        methods = Counter(m for m, _ in sent)
        assert methods["PowerOnVM_Task"] == 1 and task_polls(sent) == 0, sent
        found = await backend.find_vm(conn, uid)
        assert found is not None and found.power_state == "PoweredOn"
    await backend.destroy_vm(conn, uid)


def vm_reads(sent: list[tuple[str, Any]]) -> tuple[int, int]:
    """(RetrievePropertiesEx naming a VirtualMachine and no Task, those naming both): the reads of a
    VM alone, and the task polls that read a VM beside the task (``tasks.ReadAlong``)."""
    alone = beside = 0
    for method, args in sent:
        if method != "RetrievePropertiesEx":
            continue
        objs = [o.obj for spec in args[0] for o in spec.objectSet or []]
        has_vm = any(isinstance(o, vim.VirtualMachine) for o in objs)
        has_task = any(isinstance(o, vim.Task) for o in objs)
        alone += has_vm and not has_task
        beside += has_vm and has_task
    return alone, beside


@pytest.mark.timeout(60)
async def test_with_a_watch_the_read_after_the_clone_rides_on_the_clone_tasks_last_poll(
    backend: VSphereBackend, conn: Connection, si: Any, sent: list[tuple[str, Any]]
) -> None:
    """Issue 22: the watch lists the clone (with its UID) before the clone task is polled, so the
    poll that sees the task succeed also reads the VM, and create_vm sends no read of its own: the
    clone costs CloneVM_Task and one RetrievePropertiesEx (the template and inventory reads aside,
    cached per template), and what it returns is the VM as made."""
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=2, memory_mib=2048, user_data=b"#cloud-config\n",
                  # An added disk: the read beside the poll is used only once it shows that disk
                  # at the slot the clone gave it (``clone.carried``), which vcsim's read does.
                  disks=(DiskSpec("os", 10), DiskSpec("data", 5)),
                  nics=(NicSpec("a", "VM Network"), NicSpec("b", "DC0_DVPG0")))
    await backend.check_connection(conn)
    async with watching(backend, conn):
        await until_authoritative(backend, conn)
        warm = str(uuid.uuid4())
        await backend.create_vm(conn, replace(spec, uid=warm, name=f"warm-{uid[:8]}"))  # caches the template
        # The first poll waits 0.8 x the expected clone duration: 1.2 s here, time for the watch
        # to report the clone's UID even on a loaded machine.
        backend._clone_seconds[backend.sessions.endpoint_for(conn).label] = 1.5
        sent.clear()
        created = await backend.create_vm(conn, spec)
        alone, beside = vm_reads(sent)
        assert (alone, beside, task_polls(sent)) == (0, 1, 1), sent
        vm = await asyncio.to_thread(read_vm, si, uid)
        assert created.vm.moref == vm._moId and created.vm.uid == uid
        assert (created.vm.instance_uuid, created.vm.bios_uuid) == (vm.config.instanceUuid, vm.config.uuid)
        cards = {str(d.macAddress).lower() for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)}
        assert {n.mac_address for n in created.vm.nics} == cards
        sizes = sorted(d.capacityInKB // GIB_KB for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk))
        assert sizes == [5, 10]
    await backend.destroy_vm(conn, uid)
    await backend.destroy_vm(conn, warm)


@pytest.mark.timeout(60)
async def test_a_vm_read_beside_the_clone_task_that_is_not_its_result_is_not_used(
    backend: VSphereBackend, conn: Connection, si: Any, sent: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never the wrong VM: when the index maps the UID to another VM during the clone (a VM copied
    by hand carrying the UID), the poll reads that VM beside the task, but the task's
    ``info.result`` names the clone: the clone is read on its own and returned, not the other."""
    first = str(uuid.uuid4())
    spec = VMSpec(uid=first, name=f"vm-{first[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=1024, nics=(NicSpec("a", "VM Network"),))
    other = await backend.create_vm(conn, spec)
    index = backend._vm_index(conn)
    decoy = index.get(first)
    uid = str(uuid.uuid4())
    real_get = index.get
    # From the clone request on (the poll's ``ReadAlong.target``), the index answers the decoy.
    monkeypatch.setattr(index, "get", lambda key: decoy if key == uid and any(
        m == "CloneVM_Task" for m, _ in sent) else real_get(key))
    sent.clear()
    created = await backend.create_vm(conn, replace(spec, uid=uid, name=f"vm-{uid[:8]}"))
    monkeypatch.undo()
    alone, beside = vm_reads(sent)
    assert beside >= 1 and alone >= 1, sent  # the decoy read beside the task, then the clone on its own
    vm = await asyncio.to_thread(read_vm, si, uid)
    assert created.vm.moref == vm._moId != other.vm.moref and created.vm.uid == uid
    await backend.destroy_vm(conn, first)
    await backend.destroy_vm(conn, uid)


@pytest.mark.timeout(60)
async def test_a_guess_that_names_no_vm_costs_the_clone_nothing(
    backend: VSphereBackend, conn: Connection, si: Any, sent: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The VM guessed beside the clone task may be gone (destroyed meanwhile): the poll still
    reads the task, the clone succeeds and is read on its own."""
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=1024, nics=(NicSpec("a", "VM Network"),))
    await backend.check_connection(conn)
    index = backend._vm_index(conn)
    stub = (await backend.sessions.session(conn)).stub
    gone = vim.VirtualMachine("vm-999999", stub)
    real_get = index.get
    monkeypatch.setattr(index, "get", lambda key: gone if key == uid and any(
        m == "CloneVM_Task" for m, _ in sent) else real_get(key))
    sent.clear()
    created = await backend.create_vm(conn, spec)
    monkeypatch.undo()
    alone, beside = vm_reads(sent)
    assert beside >= 1 and alone >= 1, sent
    vm = await asyncio.to_thread(read_vm, si, uid)
    assert created.vm.moref == vm._moId and created.vm.uid == uid
    await backend.destroy_vm(conn, uid)
