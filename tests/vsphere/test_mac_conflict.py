"""Issue F5 (ADR 0014): a NIC's given MAC that another VM of the same vCenter already has is
refused before the clone (vCenter does not check manual MACs: the clone would succeed and two VMs
would share a MAC on the network). Against vcsim; VMs are read through the test's own session."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.backends.base import Connection, InvalidSpec, NicSpec, VMSpec
from banlieue.backends.vsphere import macs
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY

pytestmark = [pytest.mark.vcsim]

MAC = "00:50:56:3e:12:34"


def spec(*nics: NicSpec) -> VMSpec:
    uid = str(uuid.uuid4())
    return VMSpec(uid=uid, name=f"mac-{uid[:8]}", datacenter="DC0", cluster="DC0_C0", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256, nics=nics)


def vms_with_uid(si: Any, uid: str) -> list[Any]:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return [vm for vm in view.view
                if any(o.key == UID_KEY and o.value == uid for o in (vm.config.extraConfig if vm.config else []))]
    finally:
        view.Destroy()


def macs_of(vm: Any) -> list[str]:
    return [d.macAddress.lower() for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]


async def test_a_mac_another_vm_has_is_refused_before_the_clone(backend: VSphereBackend, conn: Connection, si: Any) -> None:
    first = spec(NicSpec("eth0", "VM Network", mac_address=MAC.upper()))
    await backend.create_vm(conn, first)
    [vm] = vms_with_uid(si, first.uid)
    assert macs_of(vm) == [MAC]
    second = spec(NicSpec("eth0", "VM Network"), NicSpec("eth1", "VM Network", mac_address=MAC))
    with pytest.raises(InvalidSpec) as info:
        await backend.create_vm(conn, second)
    assert info.value.public and info.value.reason == macs.CONFLICT_REASON, info.value
    assert f"NIC 'eth1': macAddress {MAC} is already used by VM {vm._moId}" in str(info.value)
    assert vms_with_uid(si, second.uid) == []  # nothing was cloned
    # The same machine's own VM does not conflict with itself: its MAC is free for a retry of it,
    # and another MAC is accepted for the second machine.
    await backend.create_vm(conn, first)
    other = spec(NicSpec("eth0", "VM Network", mac_address="00:50:56:3e:12:35"))
    await backend.create_vm(conn, other)
    assert macs_of(vms_with_uid(si, other.uid)[0]) == ["00:50:56:3e:12:35"]


async def test_one_mac_given_to_two_nics_is_refused(backend: VSphereBackend, conn: Connection, si: Any) -> None:
    both = spec(NicSpec("eth0", "VM Network", mac_address="00:50:56:3e:00:01"),
                NicSpec("eth1", "VM Network", mac_address="00:50:56:3E:00:01"))
    with pytest.raises(InvalidSpec, match="NICs 'eth0' and 'eth1' are given the same macAddress 00:50:56:3e:00:01") as info:
        await backend.create_vm(conn, both)
    assert info.value.reason == macs.CONFLICT_REASON
    assert vms_with_uid(si, both.uid) == []


async def test_a_mac_freed_by_a_destroyed_vm_can_be_given_again(backend: VSphereBackend, conn: Connection, si: Any) -> None:
    first = spec(NicSpec("eth0", "VM Network", mac_address="00:50:56:3e:00:02"))
    await backend.create_vm(conn, first)
    assert await backend.destroy_vm(conn, first.uid, off_mode="hard")
    second = spec(NicSpec("eth0", "VM Network", mac_address="00:50:56:3e:00:02"))
    await backend.create_vm(conn, second)
    assert macs_of(vms_with_uid(si, second.uid)[0]) == ["00:50:56:3e:00:02"]
