"""Two VMs with one UID at the backend (issue 19; ADR 0012 decision 9): ``find_vm`` returns the
VM whose instance UUID the machine recorded (else the oldest) and lists the others, removable
only when provably ours and empty; ``destroy_duplicate`` reads the VM again and destroys only
such a one, never the kept VM. Ground truth: the test's own pyvmomi session on vcsim."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.backends.base import Connection, NicSpec, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.testing.vcsim import wait_task

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]


def clone_with_uid(si: Any, source: Any, name: str, uid: str, power_on: bool = False) -> Any:
    content = si.RetrieveContent()
    dc = content.rootFolder.childEntity[0]
    pool = next(c for c in dc.hostFolder.childEntity if c.name == "DC0_C1").resourcePool
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=power_on, template=False,
                            config=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=UID_KEY, value=uid)]))
    return wait_task(source.CloneVM_Task(folder=dc.vmFolder, name=name, spec=spec))


def by_moref(si: Any, moref: str) -> Any:
    return vim.VirtualMachine(moref, stub=si._stub)


async def test_the_recorded_vm_is_kept_and_only_an_empty_clone_of_a_template_is_destroyed(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    spec = VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256, nics=(NicSpec("eth0", "VM Network"),))
    first = (await backend.create_vm(conn, spec)).vm
    content = si.RetrieveContent()
    template = content.searchIndex.FindByInventoryPath("DC0/vm/ubuntu-22.04")
    empty = clone_with_uid(si, template, f"{spec.name}-b", uid)
    running = clone_with_uid(si, template, f"{spec.name}-c", uid, power_on=True)
    copy = clone_with_uid(si, by_moref(si, first.moref), f"{spec.name}-d", uid)

    restarted = VSphereBackend(max_workers=2, task_timeout=60.0, request_timeout=30.0)  # a full scan
    try:
        kept = await restarted.find_vm(conn, uid, first.instance_uuid)
        assert kept is not None and kept.moref == first.moref
        dups = {d.moref: d for d in kept.duplicates}
        assert set(dups) == {empty._moId, running._moId, copy._moId}
        assert dups[empty._moId].removable
        assert not dups[running._moId].removable and "PoweredOn" in dups[running._moId].why
        assert not dups[copy._moId].removable and "not from a template" in dups[copy._moId].why

        # The machine recorded another VM: that one is kept, whatever the index held.
        other = await restarted.find_vm(conn, uid, running.config.instanceUuid)
        assert other is not None and other.moref == running._moId
        assert await restarted.destroy_duplicate(conn, uid, running._moId) is False  # the kept VM

        assert (await restarted.find_vm(conn, uid, first.instance_uuid)).moref == first.moref  # type: ignore[union-attr]
        assert await restarted.destroy_duplicate(conn, uid, copy._moId) is False
        assert await restarted.destroy_duplicate(conn, uid, running._moId) is False
        assert await restarted.destroy_duplicate(conn, uid, empty._moId) is True
        names = {v.name for v in content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True).view}
        assert f"{spec.name}-b" not in names and {spec.name, f"{spec.name}-c", f"{spec.name}-d"} <= names
        after = await restarted.find_vm(conn, uid, first.instance_uuid)
        assert after is not None and {d.moref for d in after.duplicates} == {running._moId, copy._moId}

        # Deleting the machine destroys every VM that carries its UID.
        assert await restarted.destroy_vm(conn, uid) is True
        left = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True).view
        assert not [v.name for v in left if any(o.key == UID_KEY and o.value == uid for o in v.config.extraConfig or [])]
    finally:
        await restarted.close()
