"""Disks are matched to the spec by name, never by position (issue 19 case 1; ADR 0012).

Ground truth is vCenter's own device key: the test notes which device each name got when it
first appeared (the one new device of that step) and checks after every later step that the
name still sits on that device, with the size asked for, and that no disk was ever removed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyVmomi import vim

from banlieue.backends.base import Connection, DiskSpec, InvalidSpec, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.disks import DISK_KEY_PREFIX
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim]

GIB = 1024 * 1024


def vm_spec(uid: str, disks: list[tuple[str, int]]) -> VMSpec:
    return VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C1", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=1024, disks=tuple(DiskSpec(n, s) for n, s in disks))


def read_disks(si: Any, uid: str) -> tuple[dict[int, int], dict[str, str]]:
    """(device key -> GiB, name -> device key of its ``banlieue.disk.*`` label) of the VM
    carrying ``uid``, read through the test's own pyvmomi session (not the backend's)."""
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        [vm] = [v for v in view.view if any(o.key == UID_KEY and o.value == uid for o in v.config.extraConfig)]
        devices = [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk)]
        disks = {d.key: d.capacityInKB // GIB for d in devices}
        ctrls = {c.key: c for c in vm.config.hardware.device if isinstance(c, vim.vm.device.VirtualSCSIController)}
        # A label names its slot as the .vmx does (scsi<bus>:<unit>); older ones by controller key.
        slots = {f"scsi{ctrls[d.controllerKey].busNumber}:{d.unitNumber}": d.key for d in devices}
        slots |= {f"{d.controllerKey}:{d.unitNumber}": d.key for d in devices}
        labels = {o.key[len(DISK_KEY_PREFIX):]: str(slots.get(o.value)) for o in vm.config.extraConfig
                  if o.key.startswith(DISK_KEY_PREFIX) and o.value}
        return disks, labels
    finally:
        view.Destroy()


class Truth:
    """What the test knows independently: name -> device key (noted when the name's disk was
    created) and name -> the size it must have (GiB)."""

    def __init__(self) -> None:
        self.key: dict[str, int] = {}
        self.size: dict[str, int] = {}
        self.os: str | None = None

    def after(self, step: list[tuple[str, int]], disks: dict[int, int], labels: dict[str, str]) -> None:
        first = step[0][0]
        if self.os is not None and first != self.os:
            # The first disk is the OS disk whatever its name: a rename moves the name to it.
            self.key[first] = self.key.pop(self.os)
            self.size[first] = self.size.pop(self.os)
        self.os = first
        new_keys = [k for k in disks if k not in self.key.values()]
        new_names = [n for n, _ in step if n not in self.key]
        # Only the OS disk (first name of the first step) exists before: the template's disk.
        assert len(new_keys) == len(new_names), (step, disks, self.key)
        if len(new_names) == 1:
            self.key[new_names[0]] = new_keys[0]
        else:
            # Several new in one step: each new name's size is distinct by construction.
            by_size = {disks[k]: k for k in new_keys}
            for n in new_names:
                self.key[n] = by_size[dict(step)[n]]
        for n, s in step:
            self.size[n] = s
        # Every name is on its own device, sized as asked; no disk was removed or repurposed.
        assert {n: disks[k] for n, k in self.key.items()} == self.size
        assert {n: int(v) for n, v in labels.items()} == self.key
        assert len(disks) == len(self.key)


async def converge(backend: VSphereBackend, conn: Connection, uid: str, disks: list[tuple[str, int]]) -> None:
    await backend.create_vm(conn, vm_spec(uid, disks))


async def test_removing_the_middle_disk_of_a_class_does_not_grow_the_next_one(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    # Issue 19 case 1: class threedisks [os 10, logs 5, data 50]; remove disks/1 (logs).
    uid = str(uuid.uuid4())
    await converge(backend, conn, uid, [("os", 10), ("logs", 5), ("data", 50)])
    await backend.set_power_state(conn, uid, "PoweredOn")
    disks, _ = await asyncio.to_thread(read_disks, si, uid)
    # A fresh VM's disks in device order are the spec's: the template's OS disk, then the added.
    key = dict(zip(["os", "logs", "data"], disks, strict=True))
    assert {name: disks[k] for name, k in key.items()} == {"os": 10, "logs": 5, "data": 50}

    await converge(backend, conn, uid, [("os", 10), ("data", 50)])
    after, labels_after = await asyncio.to_thread(read_disks, si, uid)
    # Nothing grown, nothing removed: logs is kept with its 5 GiB (was: grown to 50 GiB).
    assert {name: after.get(k) for name, k in key.items()} == {"os": 10, "logs": 5, "data": 50}
    assert len(after) == 3
    assert labels_after == {name: str(k) for name, k in key.items()}  # each name on its device

    # Re-adding "logs" finds the kept disk (its data), no new device.
    await converge(backend, conn, uid, [("os", 10), ("data", 50), ("logs", 5)])
    assert await asyncio.to_thread(read_disks, si, uid) == (after, labels_after)
    await backend.destroy_vm(conn, uid)


async def test_a_shrink_is_refused_before_anything_changes(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    await converge(backend, conn, uid, [("os", 10), ("logs", 5)])
    before = await asyncio.to_thread(read_disks, si, uid)
    with pytest.raises(InvalidSpec, match="'logs' is 5 GiB; shrinking to 4"):
        await converge(backend, conn, uid, [("os", 10), ("logs", 4), ("new", 3)])
    assert await asyncio.to_thread(read_disks, si, uid) == before
    await backend.destroy_vm(conn, uid)


NAMES = ["os", "logs", "data", "swap", "cache"]


@st.composite
def class_edits(draw: st.DrawFn) -> list[list[tuple[str, int]]]:
    """3-5 successive disk lists of a class: the OS disk stays first, sometimes renamed (os <->
    boot) and grown; other disks are added, removed, reordered and grown (never shrunk: that is
    refused, tested above). A name's first size is distinct from every other name's (11, 12,
    ...) so a step adding several is unambiguous."""
    sizes: dict[str, int] = {"os": 10}
    steps: list[list[tuple[str, int]]] = []
    os_name, os_size = "os", 10
    for _ in range(draw(st.integers(3, 5))):
        if steps and draw(st.booleans()):
            os_name = "boot" if os_name == "os" else "os"
        if draw(st.booleans()):
            os_size += 5
        others = draw(st.lists(st.sampled_from(NAMES[1:]), unique=True, max_size=3))
        for n in others:
            if n not in sizes:
                sizes[n] = 10 + NAMES.index(n)
            elif draw(st.booleans()):
                sizes[n] += draw(st.integers(1, 3)) * 10
        steps.append([(os_name, os_size)] + [(n, sizes[n]) for n in others])
    return steps


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=class_edits())
@pytest.mark.timeout(300)
def test_class_disk_edits_on_a_running_vm_keep_every_disk_on_its_name(
    vcsim: VcsimProcess, si: Any, make_conn: Callable[..., Connection], edits: list[list[tuple[str, int]]]
) -> None:
    async def run() -> None:
        backend = VSphereBackend(max_workers=2, task_timeout=60.0, request_timeout=30.0)
        conn = make_conn(vcsim)
        uid = str(uuid.uuid4())
        truth = Truth()
        try:
            await converge(backend, conn, uid, edits[0])
            await backend.set_power_state(conn, uid, "PoweredOn")
            truth.after(edits[0], *await asyncio.to_thread(read_disks, si, uid))
            for step in edits[1:]:
                await converge(backend, conn, uid, step)
                truth.after(step, *await asyncio.to_thread(read_disks, si, uid))
        finally:
            await backend.destroy_vm(conn, uid)
            await backend.close()

    asyncio.run(run())


def vm_of(si: Any, uid: str) -> Any | None:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return next((v for v in view.view if any(o.key == UID_KEY and o.value == uid for o in v.config.extraConfig)), None)
    finally:
        view.Destroy()


async def test_renaming_the_os_disk_renames_it_and_adds_no_disk(backend: VSphereBackend, conn: Connection, si: Any) -> None:
    """Issue 19: renaming a class's first disk kept the old disk reported "DiskRemovedFromSpec"
    (advice: detach it — the boot disk) and added an empty disk under the new name. The first
    disk is the template's boot disk whatever its name: a rename moves the name to it."""
    uid = str(uuid.uuid4())
    await converge(backend, conn, uid, [("os", 10), ("data", 5)])
    before, labels = await asyncio.to_thread(read_disks, si, uid)
    os_key = int(labels["os"])
    await converge(backend, conn, uid, [("root", 12), ("data", 5)])
    after, labels_after = await asyncio.to_thread(read_disks, si, uid)
    assert set(after) == set(before), (before, after)  # no disk added, none removed
    assert labels_after == {"root": str(os_key), "data": labels["data"]}  # the old name is gone
    assert after[os_key] == 12  # grown under its new name
    info = await backend.find_vm(conn, uid)
    assert info is not None and info.disk_names[info.os_disk or 0] == "root"
    # Renaming back works the same way; the name "root" then names no disk.
    await converge(backend, conn, uid, [("os", 12), ("data", 5)])
    assert await asyncio.to_thread(read_disks, si, uid) == (after, {"os": str(os_key), "data": labels["data"]})
    await backend.destroy_vm(conn, uid)


async def test_moving_the_os_disk_in_the_list_is_refused_before_anything_changes(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    uid = str(uuid.uuid4())
    await converge(backend, conn, uid, [("os", 10), ("data", 50), ("logs", 5)])
    before = await asyncio.to_thread(read_disks, si, uid)
    # Reordering the other disks changes nothing.
    await converge(backend, conn, uid, [("os", 10), ("logs", 5), ("data", 50)])
    assert await asyncio.to_thread(read_disks, si, uid) == before
    with pytest.raises(InvalidSpec, match=r"'data' is a data disk of this VM .* cannot become its OS disk"):
        await converge(backend, conn, uid, [("data", 50), ("os", 10), ("logs", 5)])
    with pytest.raises(InvalidSpec, match=r"'os' is this VM's OS disk .* put 'os' first"):
        await converge(backend, conn, uid, [("boot", 10), ("os", 10), ("logs", 5)])
    assert await asyncio.to_thread(read_disks, si, uid) == before
    await backend.destroy_vm(conn, uid)


async def test_a_clone_whose_first_disk_is_smaller_than_the_template_is_refused_before_the_clone(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    """Issue 19: a class whose disks were reordered (a small data disk first) made new VMs fail
    after their clone (InvalidSpec shrink), the half-built VM left until deleted."""
    uid = str(uuid.uuid4())
    with pytest.raises(InvalidSpec, match="'swap' is 10 GiB; shrinking to 1 GiB is not possible"):
        await converge(backend, conn, uid, [("swap", 1), ("os", 10)])
    assert await asyncio.to_thread(vm_of, si, uid) is None  # nothing cloned


async def test_sixty_disks_spread_over_four_scsi_controllers_each_on_its_name(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    """Issue 19: more than 15 disks failed (only the first SCSI controller was used) although
    the API allows 60. Controllers are added as needed (unit 7 is the controller's own)."""
    uid = str(uuid.uuid4())
    names = ["os"] + [f"d{i}" for i in range(1, 20)]
    await converge(backend, conn, uid, [(n, 10 if n == "os" else 1) for n in names])
    # More later, one of the first ones grown: 60 in all.
    more = [(f"d{i}", 1) for i in range(20, 60)]
    await converge(backend, conn, uid, [("os", 10), ("d1", 2)] + [(f"d{i}", 1) for i in range(2, 20)] + more)
    disks, labels = await asyncio.to_thread(read_disks, si, uid)
    assert len(disks) == 60 and len(labels) == 60
    assert disks[int(labels["d1"])] == 2 and all(disks[int(labels[f"d{i}"])] == 1 for i in range(2, 60))
    vm = await asyncio.to_thread(vm_of, si, uid)
    assert vm is not None
    ctrls = [d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualSCSIController)]
    assert sorted(c.busNumber for c in ctrls) == [0, 1, 2, 3]
    units = [(d.controllerKey, d.unitNumber) for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualDisk)]
    assert len(set(units)) == 60 and all(u != 7 for _, u in units)
    with pytest.raises(InvalidSpec, match="4 SCSI controllers of 15 disks each are full"):
        await converge(backend, conn, uid, [("os", 10), ("d1", 2)] + [(f"d{i}", 1) for i in range(2, 61)])
    await backend.destroy_vm(conn, uid)


async def test_firmware_and_disk_provisioning_are_read_back_and_secure_boot_is_converged_once(
    backend: VSphereBackend, conn: Connection, si: Any
) -> None:
    """Issue 19: the VM's firmware and its disks' provisioning are read back (VMInfo) so that a
    class edit of either is reported instead of silently ignored; secure boot is turned on and
    off, and not sent again on every converge."""
    uid = str(uuid.uuid4())
    spec = replace(vm_spec(uid, [("os", 10)]), firmware="efi-secure",
                   disks=(DiskSpec("os", 10), DiskSpec("thin1", 1), DiskSpec("lazy", 2, "thick"), DiskSpec("eager", 3, "eagerZeroed")))
    await backend.create_vm(conn, spec)
    info = await backend.find_vm(conn, uid)
    assert info is not None and info.firmware == "efi-secure"
    by_name = dict(zip(info.disk_names, info.disk_provisioning, strict=True))
    assert {n: by_name[n] for n in ("thin1", "lazy", "eager")} == {"thin1": "thin", "lazy": "thick", "eager": "eagerZeroed"}
    vm = await asyncio.to_thread(vm_of, si, uid)
    assert vm is not None
    version = vm.config.changeVersion
    await backend.create_vm(conn, spec)  # in spec: nothing sent
    assert (await asyncio.to_thread(vm_of, si, uid)).config.changeVersion == version  # type: ignore[union-attr]
    await backend.create_vm(conn, replace(spec, firmware="efi"))  # secure boot off
    info = await backend.find_vm(conn, uid)
    assert info is not None and info.firmware == "efi"
    await backend.destroy_vm(conn, uid)
