"""What of a spec change is applied to a provisioned VM now, and what waits (ADR 0012,
docs/concepts.md "Changing things that are in use"). Pure.

Policy (the VM's hardware follows its spec, but never at the cost of a running VM):

- CPU, cores per socket and memory change only while the VM is powered off. banlieue never
  powers a VM off to apply them and never relies on hot-add; a VM that runs keeps its hardware
  and reports ``HardwareChangePending`` (``WaitingForPowerOff``) until it is next powered off
  (``desiredPowerState: PoweredOff`` then ``PoweredOn``, or powered off in vCenter), when the
  change is applied before it is powered on again. Power requests are carried out whatever is
  pending.
- Disks are matched by name (``backends.vsphere.disks``): a disk grows when its spec grows
  (at any power state); a smaller spec is refused (``DiskShrinkRefused``, the disk keeps its
  size); a disk whose name left the spec is kept with its data and reported
  (``DiskRemovedFromSpec``).
- NICs are matched by name (``backends.vsphere.nics``): a NIC added to the spec is added, a
  network edit moves the card to the new network, a reorder changes nothing (at any power
  state; NIC hot-add needs no VM setting); a card whose name left the spec is kept with its MAC
  but disconnected, and reported (``NicRemovedFromSpec``).
- Firmware: secure boot on or off (``efi`` <-> ``efi-secure``) waits for a power-off like CPU;
  ``bios`` <-> ``efi`` is never applied to a provisioned VM (``FirmwareChangeRefused``: its
  guest was installed for one firmware and does not boot with the other). A disk's
  provisioning (thin, thick, eagerZeroed) applies to disks added; an existing disk keeps its
  own (``ProvisioningChangeRefused``). Both were silently ignored before (issue 19).
- A change vCenter refused on a provisioned VM (``ChangeFailed``) is reported on the same
  condition and never turns the running VM NotReady.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from banlieue.api.infrastructure import VSphereMachineReason as R
from banlieue.backends.base import VMInfo, VMSpec

_REASON_ORDER = (R.CHANGE_FAILED, R.FIRMWARE_CHANGE_REFUSED, R.DISK_SHRINK_REFUSED, R.PROVISIONING_CHANGE_REFUSED,
                 R.DISK_REMOVED_FROM_SPEC, R.NIC_REMOVED_FROM_SPEC, R.WAITING_FOR_POWER_OFF)
"""The condition's reason when several things are pending: the most actionable first."""


@dataclass(frozen=True)
class Pending:
    """One difference not applied now: a ``HardwareChangePending`` reason and what differs."""

    reason: str
    message: str


def _disk_index(vm: VMInfo, spec: VMSpec) -> dict[str, int]:
    """name -> index in ``vm.disks_gib`` (``current_disks`` rules)."""
    if any(n is not None for n in vm.disk_names):
        named = {n: i for i, n in enumerate(vm.disk_names) if n is not None}
        if spec.disks and vm.os_disk is not None and vm.os_disk < len(vm.disk_names):
            old, first = vm.disk_names[vm.os_disk], spec.disks[0].name
            if old is not None and old != first and first not in named and old not in {d.name for d in spec.disks}:
                named = {first if n == old else n: i for n, i in named.items()}
        return named
    return {d.name: i for i, d in enumerate(spec.disks) if i < len(vm.disks_gib)}


def current_disks(vm: VMInfo, spec: VMSpec) -> dict[str, int]:
    """name -> GiB of the VM's disks: by their labels, or by position for a VM whose disks carry
    no names yet (the one-time adoption of ``backends.vsphere.disks``). The first spec disk is
    the OS disk whatever its label says: a renamed OS disk is found under its new name (and not
    reported removed), unless its old name is still in the spec or the new one labels another
    disk (refused by the backend: ``disks.os_disk_conflict``)."""
    return {n: vm.disks_gib[i] for n, i in _disk_index(vm, spec).items() if i < len(vm.disks_gib)}


def effective_spec(vm: VMInfo, spec: VMSpec) -> tuple[VMSpec, tuple[Pending, ...]]:
    """The spec to converge a provisioned ``vm`` to now, and what is left pending (module
    policy). The effective spec keeps the VM's CPU/cores/memory while it is not powered off and
    a disk's current size when the spec would shrink it."""
    pending: list[Pending] = []
    out = spec
    diffs: list[str] = []  # what waits for a power-off: one cause, one hint
    if spec.firmware and vm.firmware and vm.firmware != spec.firmware:
        if {vm.firmware, spec.firmware} == {"efi", "efi-secure"}:
            if vm.power_state != "PoweredOff":
                # Secure boot on or off: a setting of the same firmware, applied at a power cycle.
                diffs.append(f"firmware {vm.firmware} -> {spec.firmware}")
                out = replace(out, firmware=vm.firmware)
        else:
            # A guest installed for BIOS does not boot with EFI, nor the reverse: never applied.
            pending.append(Pending(R.FIRMWARE_CHANGE_REFUSED, f"firmware {vm.firmware} -> {spec.firmware} is not applied: "
                                   f"a guest installed for {vm.firmware} does not boot with {spec.firmware}; set firmware "
                                   f"{vm.firmware} again, or create a new VM for {spec.firmware}"))
            out = replace(out, firmware=vm.firmware)
    if vm.power_state != "PoweredOff":
        firmware_diffs = len(diffs)
        if vm.num_cpus != spec.num_cpus:
            diffs.append(f"numCPUs {vm.num_cpus} -> {spec.num_cpus}")
        if spec.num_cores_per_socket and vm.num_cores_per_socket != spec.num_cores_per_socket:
            diffs.append(f"numCoresPerSocket {vm.num_cores_per_socket} -> {spec.num_cores_per_socket}")
        if vm.memory_mib != spec.memory_mib:
            diffs.append(f"memoryMiB {vm.memory_mib} -> {spec.memory_mib}")
        if len(diffs) > firmware_diffs:  # CPU, cores or memory
            out = replace(out, num_cpus=vm.num_cpus, memory_mib=vm.memory_mib,
                          num_cores_per_socket=vm.num_cores_per_socket if spec.num_cores_per_socket else 0)
        if diffs:
            pending.append(Pending(R.WAITING_FOR_POWER_OFF, ", ".join(diffs) + " is applied the next time the VM is "
                                   "powered off (set desiredPowerState PoweredOff, then PoweredOn)"))
    have = current_disks(vm, spec)
    disks = []
    for disk in spec.disks:
        size = have.get(disk.name)
        if size is not None and size > disk.size_gib:
            pending.append(Pending(R.DISK_SHRINK_REFUSED, f"disk {disk.name} is {size} GiB and the spec asks "
                                   f"{disk.size_gib} GiB: a disk is never shrunk; set sizeGiB >= {size}"))
            disk = replace(disk, size_gib=size)
        disks.append(disk)
    index = _disk_index(vm, spec)
    for n, disk in enumerate(disks):
        at = index.get(disk.name) if n else None  # the OS disk's provisioning is the template's
        if at is None or at >= len(vm.disk_provisioning) or vm.disk_provisioning[at] == disk.provisioning:
            continue
        have_type = vm.disk_provisioning[at]
        pending.append(Pending(R.PROVISIONING_CHANGE_REFUSED, f"disk {disk.name} is {have_type} and the spec asks "
                               f"{disk.provisioning}: an existing disk's provisioning is not changed (it applies to disks "
                               f"added); set provisioning {have_type}, or inflate the disk in vCenter"))
        disks[n] = replace(disk, provisioning=have_type)
    out = replace(out, disks=tuple(disks))
    wanted = {d.name for d in spec.disks}
    removed = sorted(n for n in have if n not in wanted) if vm.named_disks_gib() else []
    os_name = vm.disk_names[vm.os_disk] if vm.os_disk is not None and vm.os_disk < len(vm.disk_names) else None
    if os_name in removed:
        # The boot disk (``disks: []``, found by a new-user pass): detaching it, as the advice for a
        # data disk says, would leave a VM that does not boot.
        removed.remove(os_name)
        pending.append(Pending(R.DISK_REMOVED_FROM_SPEC, f"disk {os_name} ({have[os_name]} GiB) is the VM's OS disk and is "
                               f"no longer in the spec: kept (the boot disk is never detached), put {os_name} back "
                               "as the first disk"))
    if removed:
        listed = ", ".join(f"{n} ({have[n]} GiB)" for n in removed)
        pending.append(Pending(R.DISK_REMOVED_FROM_SPEC, f"disk {listed} is no longer in the spec: kept attached "
                               "with its data; detach or delete it in vCenter if it is not needed"))
    wanted_nics = {n.name for n in spec.nics}
    gone = sorted((n.name, n.mac_address) for n in vm.nics if n.name is not None and n.name not in wanted_nics)
    if gone:
        listed = ", ".join(f"{name} ({mac})" for name, mac in gone)
        pending.append(Pending(R.NIC_REMOVED_FROM_SPEC, f"NIC {listed} is no longer in the spec: kept with its MAC "
                               "and disconnected; put the name back to reconnect it, or remove it in vCenter"))
    return out, tuple(pending)


def drifted(vm: VMInfo, spec: VMSpec) -> bool:
    """Whether converging ``vm`` to ``spec`` (an effective spec) would change it: CPU, cores,
    memory, a disk missing or smaller than asked, or disks that carry no names yet."""
    if vm.num_cpus != spec.num_cpus or vm.memory_mib != spec.memory_mib:
        return True
    if spec.firmware and vm.firmware and vm.firmware != spec.firmware:
        return True
    if spec.num_cores_per_socket and vm.num_cores_per_socket != spec.num_cores_per_socket:
        return True
    if nics_drifted(vm, spec):
        return True
    if not spec.disks:
        return False
    if not vm.named_disks_gib():
        return True  # write the names (adopted by position) before the spec can change again
    if vm.os_disk is not None and vm.os_disk < len(vm.disk_names) and vm.disk_names[vm.os_disk] != spec.disks[0].name:
        return True  # the OS disk was renamed: its label follows
    have = current_disks(vm, spec)
    return any(have.get(d.name, -1) < d.size_gib for d in spec.disks)


def nics_drifted(vm: VMInfo, spec: VMSpec) -> bool:
    """Whether the VM's NICs differ from ``spec.nics`` by name: no card carries a name yet, a
    name has no card, is on another network, has another manual MAC or is disconnected, or a
    card whose name left the spec is still connected."""
    if not spec.nics:
        return any(n.name is not None and n.connected for n in vm.nics)
    named = {n.name: n for n in vm.nics if n.name is not None}
    if not named:
        return True  # write the names (adopted by position) before the spec can change again
    for want in spec.nics:
        have = named.get(want.name)
        if have is None or not have.connected or have.network != want.network:
            return True
        if want.mac_address and have.mac_address != want.mac_address.lower():
            return True
    wanted = {n.name for n in spec.nics}
    return any(n.connected for name, n in named.items() if name not in wanted)


def summary(pending: tuple[Pending, ...]) -> Pending | None:
    """One reason (the most actionable, ``_REASON_ORDER``) and every message joined, most
    actionable first; None when nothing is pending. The causes of the condition's own reason come
    first, unprefixed (the reason already says it: ``Reason: message`` displays, kubectl's
    included, must not read ``DiskShrinkRefused: DiskShrinkRefused: ...``); the causes of every
    other reason follow, that reason written once before them (``disk os ...; WaitingForPowerOff:
    firmware efi -> efi-secure ...; numCPUs 1 -> 2 ...``, never the same reason twice), so the
    message never reads as the condition's reason explaining another cause (ADR 0012)."""
    if not pending:
        return None
    ordered = sorted(pending, key=lambda p: _REASON_ORDER.index(p.reason))  # stable: spec order within a reason
    reason = ordered[0].reason
    groups: dict[str, list[str]] = {}
    for p in ordered:
        groups.setdefault(p.reason, []).append(p.message)
    return Pending(reason, "; ".join("; ".join(messages) if r == reason else f"{r}: " + "; ".join(messages)
                                     for r, messages in groups.items()))
