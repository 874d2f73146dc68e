"""Which virtual disk is which: a disk's spec name is kept on the VM, never inferred from position
(ADR 0012, docs/concepts.md "Changing things that are in use"), and where a new disk goes.

Each disk a VMSpec names is recorded in the VM's ``config.extraConfig`` as
``banlieue.disk.<name> = <slot>``, the slot the disk occupies in vSphere's own notation:
``scsi<bus>:<unit>`` (``sata``/``nvme``/``ide`` for a template disk on such a controller), the
same name the VM's ``.vmx`` gives it. The slot is chosen by banlieue before the ReconfigVM that
adds the disk, so the disk and its label are written by one task (a device key is assigned by
vCenter only once the task ran, which would need a second write and leave a window where a crash
loses the name). A slot names the controller by its bus number, not its device key, for the same
reason: a SCSI controller added in the same task has no key yet. Labels written before this
format (``<controllerKey>:<unit>``) are read through the controller's key and rewritten at the
next converge. A disk stays in its slot for the VM's life unless someone moves it by hand.

The OS disk (ADR 0012): the first disk of the spec is the template's boot disk, whatever its
name. Its slot is recorded as ``banlieue.osdisk`` (VMs labelled before that key: the first
virtual disk in device order, the template's, since banlieue only ever adds disks after it). A
rename of the first spec disk is a rename of the OS disk: the name moves to the same disk, and
no disk is added or reported removed. Making another existing disk the first one, or moving the
OS disk's name after the first place, is refused (``os_disk_conflict``): the boot disk cannot
become a data disk, nor a data disk the boot disk.

Matching rules:

- A VM with no ``banlieue.disk.*`` key at all (just cloned, or converged before labels existed)
  is adopted by position once: the i-th spec disk is the i-th disk in device order, which is
  what the spec's "the first disk is the template's OS disk" means; the next converge writes
  the labels.
- Otherwise the first spec name matches the OS disk, and every other name the disk in its
  labelled slot, and only that one. A name without a label (or whose labelled disk was removed
  by hand) gets a new disk in a free slot; slots that any label names are never given to
  another name.
- A labelled disk whose name left the spec is kept as it is, with its data and its label
  (re-adding the name finds it again); banlieue never deletes or repurposes it.

New disks go to the first free unit of the VM's SCSI controllers by bus number (unit 7 is the
controller's own); when all are full a controller of the first one's type is added on the lowest
free bus, up to 4 controllers of 15 disks each (vSphere's limit: 60 disks per VM)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pyVmomi import vim as _vim

from banlieue.backends.base import InvalidSpec, Provisioning

vim: Any = _vim
Dev = vim.vm.device

DISK_KEY_PREFIX = "banlieue.disk."
"""extraConfig key prefix of a disk's name: ``banlieue.disk.<name>``."""
OS_DISK_KEY = "banlieue.osdisk"
"""extraConfig key holding the OS disk's slot (not under ``banlieue.disk.``: not a disk name)."""
MAX_SCSI_CONTROLLERS = 4
"""SCSI controllers per VM (vSphere configuration maximum)."""
SCSI_UNITS = tuple(u for u in range(16) if u != 7)
"""Units a disk may use on a SCSI controller: 0-15 but 7, the controller's own."""

Slot = str
"""Where a disk sits: ``scsi<bus>:<unit>`` (or ``sata``/``nvme``/``ide``); ``<controllerKey>:<unit>``
for a controller of another kind."""

_SLOT = re.compile(r"(scsi|sata|nvme|ide)\d+:\d+")


def _kind(ctrl: Any) -> str | None:
    for cls, kind in ((Dev.VirtualSCSIController, "scsi"), (Dev.VirtualSATAController, "sata"),
                      (Dev.VirtualNVMEController, "nvme"), (Dev.VirtualIDEController, "ide")):
        if isinstance(ctrl, cls):
            return kind
    return None


def controllers(devices: Sequence[Any]) -> dict[int, Any]:
    """device key -> VirtualController."""
    return {int(d.key): d for d in devices if isinstance(d, Dev.VirtualController)}


def slot_on(ctrl: Any, key: int, unit: int) -> Slot:
    """The slot of unit ``unit`` on controller ``ctrl`` (device key ``key``; None: unknown)."""
    kind = _kind(ctrl) if ctrl is not None else None
    if kind is None:
        return f"{key}:{unit}"
    return f"{kind}{int(ctrl.busNumber)}:{unit}"


def slot_of(disk: Any, ctrls: Mapping[int, Any]) -> Slot:
    key = int(disk.controllerKey)
    return slot_on(ctrls.get(key), key, int(disk.unitNumber))


def _parse(value: str, ctrls: Mapping[int, Any]) -> Slot | None:
    """A label value as a slot: ``scsi1:3`` as is, the older ``<controllerKey>:<unit>`` through the
    controller of that key; None when malformed (an empty value is a removed key)."""
    if _SLOT.fullmatch(value):
        return value
    ctrl, sep, unit = value.partition(":")
    if not sep:
        return None
    try:
        key, number = int(ctrl), int(unit)
    except ValueError:
        return None
    return slot_on(ctrls.get(key), key, number)


def disk_labels(extra: Mapping[str, str], devices: Sequence[Any]) -> dict[str, Slot]:
    """name -> slot from ``banlieue.disk.*`` extraConfig values (malformed values ignored)."""
    ctrls = controllers(devices)
    out: dict[str, Slot] = {}
    for key, value in extra.items():
        if key.startswith(DISK_KEY_PREFIX):
            slot = _parse(value, ctrls)
            if slot is not None:
                out[key[len(DISK_KEY_PREFIX):]] = slot
    return out


def virtual_disks(devices: Sequence[Any]) -> list[Any]:
    """The VirtualDisk devices, in device order."""
    return [d for d in devices if isinstance(d, Dev.VirtualDisk)]


def os_slot(devices: Sequence[Any], extra: Mapping[str, str]) -> Slot | None:
    """The OS disk's slot: ``banlieue.osdisk`` (kept even when that disk was removed by hand, so
    no other disk is ever taken for it), else the first virtual disk's; None without disks."""
    recorded = _parse(extra.get(OS_DISK_KEY, ""), controllers(devices))
    if recorded is not None:
        return recorded
    current = virtual_disks(devices)
    return slot_of(current[0], controllers(devices)) if current else None


def os_disk_index(devices: Sequence[Any], extra: Mapping[str, str]) -> int | None:
    """Index of the OS disk among the VM's virtual disks in device order (None: none)."""
    slot, ctrls = os_slot(devices, extra), controllers(devices)
    return next((i for i, d in enumerate(virtual_disks(devices)) if slot_of(d, ctrls) == slot), None)


def os_disk_conflict(devices: Sequence[Any], extra: Mapping[str, str], names: Sequence[str]) -> str | None:
    """Why ``names`` (the spec's disk names in order) cannot apply to this VM's disks (module
    docstring: the OS disk), or None: the first name is the label of another existing disk, or
    a later name labels the OS disk."""
    labels = disk_labels(extra, devices)
    os = os_slot(devices, extra)
    if not labels or not names or os is None:
        return None
    ctrls = controllers(devices)
    present = {slot_of(d, ctrls) for d in virtual_disks(devices)}
    os_names = sorted(n for n, s in labels.items() if s == os)
    first = names[0]
    if labels.get(first, os) != os and labels[first] in present:
        return (f"disk {first!r} is a data disk of this VM ({labels[first]}) and cannot become its OS disk: the first disk "
                f"of the spec is the template's boot disk ({os}{', ' + os_names[0] if os_names else ''}); "
                "keep the OS disk first and reorder only the others")
    moved = [n for n in names[1:] if labels.get(n) == os]
    if moved:
        return (f"disk {moved[0]!r} is this VM's OS disk (the template's boot disk, {os}) and must stay the first disk of "
                f"the spec; put {moved[0]!r} first again (to rename the OS disk, change the first disk's name)")
    return None


def match_disks(devices: Sequence[Any], extra: Mapping[str, str], names: Sequence[str]) -> dict[str, Any]:
    """name -> VirtualDisk device for the disks that exist (module rules). ``names`` are the
    spec's disk names in order: the first one is matched to the OS disk, and they serve the
    one-time positional adoption of a VM without labels; with labels, every other labelled name
    whose disk still exists is returned (spec or not)."""
    current = virtual_disks(devices)
    labels = disk_labels(extra, devices)
    if not labels:
        return {name: current[i] for i, name in enumerate(names) if i < len(current)}
    ctrls = controllers(devices)
    by_slot = {slot_of(d, ctrls): d for d in current}
    out = {name: by_slot[slot] for name, slot in labels.items() if slot in by_slot}
    if names:
        os = os_slot(devices, extra)
        # The OS disk is the first name's, whatever it was called before (a rename).
        out = {n: d for n, d in out.items() if labels[n] != os}
        if os in by_slot:
            out[names[0]] = by_slot[os]
    return out


def disk_names(devices: Sequence[Any], extra: Mapping[str, str]) -> tuple[str | None, ...]:
    """The label of every VirtualDisk in device order (None: no label names it)."""
    ctrls = controllers(devices)
    slots = {slot: name for name, slot in disk_labels(extra, devices).items()}
    return tuple(slots.get(slot_of(d, ctrls)) for d in virtual_disks(devices))


def place_disk(devices: Sequence[Any], pending: Sequence[Any], reserved: set[Slot], name: str) -> tuple[int, Slot, Any | None]:
    """Where a new disk goes: (controller key, its slot, the VirtualDeviceSpec adding a SCSI
    controller for it or None). ``pending`` are the VirtualDeviceSpecs already planned in the
    same task (disks and controllers added); ``reserved`` the slots labels or planned disks hold.
    The first free unit (``SCSI_UNITS``) on the SCSI controllers by bus number; when all are full,
    a controller of the first one's type (``sharedBus`` noSharing) on the lowest free bus, with a
    temporary negative key vCenter replaces (the slot names its bus, so the label is right).
    Raises InvalidSpec without a SCSI controller, or when 4 controllers are full (60 disks)."""
    added = [c.device for c in pending if c.operation == "add" and isinstance(c.device, Dev.VirtualSCSIController)]
    scsi = sorted([d for d in devices if isinstance(d, Dev.VirtualSCSIController)] + added, key=lambda c: int(c.busNumber))
    if not scsi:
        raise InvalidSpec("the template has no SCSI controller to attach extra disks to", public=True)
    units: dict[int, set[int]] = {int(c.key): set() for c in scsi}
    for d in [*devices, *(c.device for c in pending)]:
        key = getattr(d, "controllerKey", None)
        if key is not None and int(key) in units and d.unitNumber is not None:
            units[int(key)].add(int(d.unitNumber))
    for ctrl in scsi:
        key = int(ctrl.key)
        for unit in SCSI_UNITS:
            slot = slot_on(ctrl, key, unit)
            if unit not in units[key] and slot not in reserved:
                return key, slot, None
    buses = {int(c.busNumber) for c in scsi}
    free = [b for b in range(MAX_SCSI_CONTROLLERS) if b not in buses]
    if not free:
        raise InvalidSpec(f"no free unit for disk {name!r}: {MAX_SCSI_CONTROLLERS} SCSI controllers of {len(SCSI_UNITS)} "
                          "disks each are full (vSphere's limit)", public=True)
    for bus in free:
        ctrl = type(scsi[0])(key=-(300 + bus), busNumber=bus, sharedBus="noSharing")
        key = int(ctrl.key)
        spare = next((s for s in (slot_on(ctrl, key, u) for u in SCSI_UNITS) if s not in reserved), None)
        if spare is not None:
            return key, spare, Dev.VirtualDeviceSpec(operation="add", device=ctrl)
    raise InvalidSpec(f"no free unit for disk {name!r}: every SCSI slot is used or named by a disk label", public=True)


def provisioning_of(disk: Any) -> Provisioning:
    """``thin``, ``thick`` (lazy zeroed) or ``eagerZeroed`` from the disk's flat backing."""
    backing = disk.backing
    if bool(getattr(backing, "thinProvisioned", False)):
        return "thin"
    return "eagerZeroed" if bool(getattr(backing, "eagerlyScrub", False)) else "thick"


def unit_of(slot: Slot) -> int:
    return int(slot.rpartition(":")[2])
