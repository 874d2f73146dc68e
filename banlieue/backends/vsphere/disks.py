"""Which virtual disk is which: a disk's spec name is kept on the VM, never inferred from position
(ADR 0012, docs/concepts.md "Changing things that are in use").

Each disk a VMSpec names is recorded in the VM's ``config.extraConfig`` as
``banlieue.disk.<name> = <controllerKey>:<unitNumber>``, the SCSI slot the disk occupies. The
slot is chosen by banlieue before the ReconfigVM that adds the disk, so the disk and its label
are written by one task (a device key is assigned by vCenter only once the task ran, which would
need a second write and leave a window where a crash loses the name). A disk stays in its slot
for the VM's life unless someone moves it by hand.

Matching rules:

- A VM with no ``banlieue.disk.*`` key at all (just cloned, or converged before labels existed)
  is adopted by position once: the i-th spec disk is the i-th disk in device order, which is
  what the spec's "the first disk is the template's OS disk" means; the next converge writes
  the labels.
- Otherwise a name matches the disk in its labelled slot, and only that one. A name without a
  label (or whose labelled disk was removed by hand) gets a new disk in a free slot; slots that
  any label names are never given to another name.
- A labelled disk whose name left the spec is kept as it is, with its data and its label
  (re-adding the name finds it again); banlieue never deletes or repurposes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyVmomi import vim as _vim

vim: Any = _vim

DISK_KEY_PREFIX = "banlieue.disk."
"""extraConfig key prefix of a disk's name: ``banlieue.disk.<name>``."""

Slot = tuple[int, int]
"""(controllerKey, unitNumber) of a virtual disk."""


def slot_of(disk: Any) -> Slot:
    return (int(disk.controllerKey), int(disk.unitNumber))


def format_slot(slot: Slot) -> str:
    return f"{slot[0]}:{slot[1]}"


def disk_labels(extra: Mapping[str, str]) -> dict[str, Slot]:
    """name -> slot from ``banlieue.disk.*`` extraConfig values (malformed values ignored)."""
    out: dict[str, Slot] = {}
    for key, value in extra.items():
        if not key.startswith(DISK_KEY_PREFIX):
            continue
        ctrl, sep, unit = value.partition(":")
        if not sep:
            continue
        try:
            out[key[len(DISK_KEY_PREFIX):]] = (int(ctrl), int(unit))
        except ValueError:
            continue
    return out


def virtual_disks(devices: Sequence[Any]) -> list[Any]:
    """The VirtualDisk devices, in device order."""
    return [d for d in devices if isinstance(d, vim.vm.device.VirtualDisk)]


def match_disks(devices: Sequence[Any], extra: Mapping[str, str], names: Sequence[str]) -> dict[str, Any]:
    """name -> VirtualDisk device for the disks that exist (module rules). ``names`` are the
    spec's disk names in order, used only for the one-time positional adoption of a VM without
    labels; with labels, every labelled name whose disk still exists is returned (spec or not)."""
    current = virtual_disks(devices)
    labels = disk_labels(extra)
    if not labels:
        return {name: current[i] for i, name in enumerate(names) if i < len(current)}
    by_slot = {slot_of(d): d for d in current}
    return {name: by_slot[slot] for name, slot in labels.items() if slot in by_slot}


def disk_names(devices: Sequence[Any], extra: Mapping[str, str]) -> tuple[str | None, ...]:
    """The label of every VirtualDisk in device order (None: no label names it)."""
    slots = {slot: name for name, slot in disk_labels(extra).items()}
    return tuple(slots.get(slot_of(d)) for d in virtual_disks(devices))
