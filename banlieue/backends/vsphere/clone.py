"""Clone and reconfigure specs (SPEC §3 Realisation), built from an InventoryIndex and the VM's
current devices so that applying them twice changes nothing the second time.

- The clone carries the object's UID in ``config.extraConfig`` (``banlieue.uid``) at clone time,
  so a crash right after the clone still finds the VM. It also carries the whole configuration
  (``with_config``; ADR 0014): ``hardware_spec`` applied to the template's own devices (CPU,
  memory, disks, NICs with MACs banlieue chose, labels) and the guestinfo, so no reconfigure
  follows it; an existing VM is converged by the same ``hardware_spec`` on its own devices.
- Linked clones need a snapshot on the template; vCenter cannot snapshot a template, so without
  one the clone falls back to a full clone and says why (CAPV does the same).
- Disks are matched to the spec by name, never by position (``disks`` module: the name is kept
  in extraConfig ``banlieue.disk.<name>``); the first spec disk of a just-cloned VM is the
  template's OS disk, whatever its name (a rename of the first disk renames the OS disk). A
  matched disk is grown to ``size_gib`` (never shrunk: InvalidSpec; a linked clone's OS disk is
  never resized: InvalidSpec); a name without a disk gets a new one on the first free SCSI unit,
  SCSI controllers added as needed up to 4 (thin / thick lazy-zeroed / eager-zeroed); a disk
  whose name left the spec is kept untouched.
- NICs are matched to the spec by name, never by position (``nics`` module: the name is kept in
  extraConfig ``banlieue.nic.<name>`` = the card's MAC); the spec NICs of a just-cloned VM are
  the template's cards in order (those beyond the spec's are removed). A matched card gets the
  spec's backing (and manual MAC); a name without a card gets a new vmxnet3; a card whose name
  left the spec is kept with its MAC but disconnected, and connected again when the name returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyVmomi import vim as _vim

from banlieue.backends.base import CloneMode, DiskSpec, InvalidSpec, NicSpec, NotFound, VMSpec
from banlieue.backends.vsphere import disks as vdisks
from banlieue.backends.vsphere import nics as vnics
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.backends.vsphere.inventory import InventoryIndex, NetworkRef

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim

KIB_PER_GIB = 1024 * 1024
Dev = vim.vm.device


@dataclass(frozen=True)
class ClonePlan:
    folder: Any
    spec: Any
    mode: CloneMode
    message: str


def resolve_datastore(idx: InventoryIndex, datacenter: str, name: str) -> Any:
    ds = idx.datastores.get((datacenter, name))
    if ds is None:
        raise NotFound(f"datastore {name!r} not found in datacenter {datacenter!r}", reason="DatastoreNotFound", public=True)
    return ds.obj


def resolve_network(idx: InventoryIndex, datacenter: str, name: str) -> NetworkRef:
    ref = idx.networks.get((datacenter, name))
    if ref is None:
        raise NotFound(f"port group {name!r} not found in datacenter {datacenter!r}", reason="NetworkNotFound", public=True)
    return ref


def clone_plan(idx: InventoryIndex, spec: VMSpec, template_snapshot: Any | None) -> ClonePlan:
    """CloneSpec, destination folder and the clone mode actually used. Raises NotFound for any
    name in ``spec`` (networks and disk datastores included) before anything is cloned."""
    for nic in spec.nics:
        resolve_network(idx, spec.datacenter, nic.network)
    for disk in spec.disks:
        if disk.datastore:
            resolve_datastore(idx, spec.datacenter, disk.datastore)
    if spec.datacenter not in idx.datacenters:
        raise NotFound(f"datacenter {spec.datacenter!r} not found", reason="DatacenterNotFound", public=True)
    cluster = idx.clusters.get((spec.datacenter, spec.cluster))
    if cluster is None:
        raise NotFound(f"cluster {spec.cluster!r} not found in {spec.datacenter!r}", reason="ClusterNotFound", public=True)
    pool = cluster.root_pool
    if spec.resource_pool and spec.resource_pool != "Resources":
        pool = idx.pools.get((spec.datacenter, spec.cluster, spec.resource_pool))
        if pool is None:
            raise NotFound(f"resource pool {spec.resource_pool!r} not found in {spec.cluster!r}", reason="ResourcePoolNotFound", public=True)
    folder = idx.folder_path(spec.datacenter, spec.folder or "")
    if folder is None:
        raise NotFound(f"folder {spec.folder!r} not found in {spec.datacenter!r}", reason="FolderNotFound", public=True)
    location = vim.vm.RelocateSpec(pool=pool)
    if spec.datastore:
        location.datastore = resolve_datastore(idx, spec.datacenter, spec.datastore)
    mode: CloneMode = spec.clone_mode
    message = ""
    if mode == "linkedClone":
        if template_snapshot is None:
            mode = "fullClone"
            message = f"template {spec.template!r} has no snapshot; linked clone needs one, used a full clone"
        else:
            location.diskMoveType = "createNewChildDiskBacking"
    clone = vim.vm.CloneSpec(
        location=location,
        powerOn=False,
        template=False,
        config=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=UID_KEY, value=spec.uid)]),
    )
    if mode == "linkedClone":
        clone.snapshot = template_snapshot
    return ClonePlan(folder=folder, spec=clone, mode=mode, message=message)


def _backing(ref: NetworkRef) -> Any:
    if ref.distributed:
        port = vim.dvs.PortConnection(switchUuid=ref.switch_uuid, portgroupKey=ref.portgroup_key)
        return Dev.VirtualEthernetCard.DistributedVirtualPortBackingInfo(port=port)
    return Dev.VirtualEthernetCard.NetworkBackingInfo(deviceName=ref.name, network=ref.obj)


def _same_backing(current: Any, ref: NetworkRef) -> bool:
    if ref.distributed:
        return isinstance(current, Dev.VirtualEthernetCard.DistributedVirtualPortBackingInfo) and (
            current.port is not None and current.port.portgroupKey == ref.portgroup_key
        )
    return isinstance(current, Dev.VirtualEthernetCard.NetworkBackingInfo) and current.deviceName == ref.name


def _disk_changes(
    devices: list[Any], disks: tuple[DiskSpec, ...], linked: bool, idx: InventoryIndex, dc: str, extra: dict[str, str]
) -> tuple[list[Any], dict[str, str]]:
    """Device changes converging ``disks`` matched by name (``disks`` module: the first spec disk
    is the OS disk whatever its name), SCSI controllers added for them included, and the
    ``banlieue.disk.<name>`` / ``banlieue.osdisk`` extraConfig values to write (an empty value
    removes the old name of a renamed OS disk). Self-contained: the changes go into a ReconfigVM
    or a CloneSpec's config alike. Raises InvalidSpec, before anything is sent, for a shrink, for
    resizing a linked clone's OS disk, for an OS disk moved in the list (``os_disk_conflict``)
    or removed from the VM by hand, and when no slot is left (60 disks)."""
    names = [d.name for d in disks]
    conflict = vdisks.os_disk_conflict(devices, extra, names)
    if conflict is not None:
        raise InvalidSpec(conflict, public=True)
    ctrls = vdisks.controllers(devices)
    matched = vdisks.match_disks(devices, extra, names)
    labelled = vdisks.disk_labels(extra, devices)
    os_slot = vdisks.os_slot(devices, extra)
    # Slots a label names are never given to another disk, even when that disk was removed.
    reserved = set(labelled.values()) | {vdisks.slot_of(d, ctrls) for d in matched.values()}
    changes: list[Any] = []
    labels: dict[str, str] = {}
    for i, want in enumerate(disks):
        want_kib = want.size_gib * KIB_PER_GIB
        have = matched.get(want.name)
        if have is not None:
            if want_kib < int(have.capacityInKB):
                raise InvalidSpec(
                    f"disk {want.name!r} is {int(have.capacityInKB) // KIB_PER_GIB} GiB; shrinking to {want.size_gib} GiB is not possible",
                    public=True,
                )
            if want_kib > int(have.capacityInKB):
                if linked and i == 0:
                    raise InvalidSpec("the OS disk of a linked clone cannot be resized", public=True)
                have.capacityInKB = want_kib
                have.capacityInBytes = want_kib * 1024
                changes.append(Dev.VirtualDeviceSpec(operation="edit", device=have))
            slot = vdisks.slot_of(have, ctrls)
        else:
            if i == 0 and os_slot is not None:
                # Never an empty disk in the OS disk's place.
                raise InvalidSpec(f"the VM's OS disk ({os_slot}) was removed from it; disk {want.name!r} is not added as an "
                                  "empty boot disk: recreate the VM", public=True)
            key, slot, controller = vdisks.place_disk(devices, changes, reserved, want.name)
            if controller is not None:
                changes.append(controller)
            changes.append(_new_disk(want, key, vdisks.unit_of(slot), i, idx, dc))
            reserved.add(slot)
        if extra.get(vdisks.DISK_KEY_PREFIX + want.name) != slot:
            labels[vdisks.DISK_KEY_PREFIX + want.name] = slot
    if disks and os_slot is not None:
        for name, slot in labelled.items():
            if slot == os_slot and name != disks[0].name:
                labels[vdisks.DISK_KEY_PREFIX + name] = ""  # the OS disk was renamed: its old name goes
        if extra.get(vdisks.OS_DISK_KEY) != os_slot:
            labels[vdisks.OS_DISK_KEY] = os_slot
    return changes, labels


def _new_disk(want: DiskSpec, controller_key: int, unit: int, i: int, idx: InventoryIndex, dc: str) -> Any:
    backing = Dev.VirtualDisk.FlatVer2BackingInfo(
        diskMode="persistent",
        thinProvisioned=want.provisioning == "thin",
        eagerlyScrub=want.provisioning == "eagerZeroed",
        fileName="",
    )
    if want.datastore:
        backing.datastore = resolve_datastore(idx, dc, want.datastore)
        backing.fileName = f"[{want.datastore}]"
    kib = want.size_gib * KIB_PER_GIB
    disk = Dev.VirtualDisk(
        key=-(100 + i), controllerKey=controller_key, unitNumber=unit, capacityInKB=kib, capacityInBytes=kib * 1024,
        backing=backing,
    )
    return Dev.VirtualDeviceSpec(operation="add", fileOperation="create", device=disk)


def _nic_changes(
    devices: list[Any], nics: tuple[NicSpec, ...], idx: InventoryIndex, dc: str, extra: dict[str, str], powered_on: bool
) -> tuple[list[Any], dict[str, str], list[str | None]]:
    """Device changes converging ``nics`` matched by name (``nics`` module), the
    ``banlieue.nic.<name>`` extraConfig values to write, and the final MAC per spec NIC (None:
    generated by vCenter, known only after the task)."""
    labelled = bool(vnics.nic_labels(extra))
    current = vnics.ethernet_cards(devices)
    matched = vnics.match_nics(devices, extra, [n.name for n in nics])
    changes: list[Any] = []
    labels: dict[str, str] = {}
    macs: list[str | None] = []
    added = 0
    for i, nic in enumerate(nics):
        ref = resolve_network(idx, dc, nic.network)
        have = matched.get(nic.name)
        if have is not None:
            changed = False
            if not _same_backing(have.backing, ref):
                have.backing = _backing(ref)
                changed = True
            if nic.mac_address and vnics.mac_of(have) != nic.mac_address.lower():
                have.addressType = "manual"
                have.macAddress = nic.mac_address.lower()
                changed = True
            if not vnics.is_connected(have):
                # The name is back in the spec: its own card (same MAC) is connected again.
                have.connectable.startConnected = True
                have.connectable.connected = powered_on
                changed = True
            if changed:
                changes.append(Dev.VirtualDeviceSpec(operation="edit", device=have))
            mac: str | None = vnics.mac_of(have) or None
            value = mac or ""
        else:
            card = Dev.VirtualVmxnet3(
                key=-(200 + i),
                backing=_backing(ref),
                addressType="manual" if nic.mac_address else "generated",
                macAddress=nic.mac_address.lower() if nic.mac_address else None,
                connectable=Dev.VirtualDevice.ConnectInfo(startConnected=True, allowGuestControl=True, connected=powered_on),
            )
            changes.append(Dev.VirtualDeviceSpec(operation="add", device=card))
            mac = nic.mac_address.lower() if nic.mac_address else None
            value = mac or f"{vnics.PENDING_PREFIX}{added}"
            added += 1
        macs.append(mac)
        if value and vnics.nic_labels(extra).get(nic.name) != value:
            labels[vnics.NIC_KEY_PREFIX + nic.name] = value
    wanted = {n.name for n in nics}
    if not labelled:
        if nics:
            # One-time adoption by position: the template's cards beyond the spec's are removed.
            used = {id(c) for c in matched.values()}
            changes.extend(Dev.VirtualDeviceSpec(operation="remove", device=d) for d in current if id(d) not in used)
    else:
        in_use = {id(c) for n, c in matched.items() if n in wanted}
        for name, card in matched.items():
            conn = card.connectable
            if name in wanted or id(card) in in_use or conn is None or not (conn.startConnected or conn.connected):
                continue
            # The name left the spec: the card is kept (never repurposed) but leaves the network.
            conn.startConnected = False
            conn.connected = False
            changes.append(Dev.VirtualDeviceSpec(operation="edit", device=card))
    return changes, labels, macs


def hardware_spec(
    idx: InventoryIndex, spec: VMSpec, props: dict[str, Any], linked: bool
) -> tuple[Any | None, list[str | None]]:
    """The ConfigSpec that converges CPU, memory, firmware, disks, NICs and the UID key (None when
    nothing differs) and the MAC of every spec NIC after it is applied (None = generated)."""
    devices = list(props.get("config.hardware.device") or [])
    cfg = vim.vm.ConfigSpec()
    changed = False
    if spec.num_cpus and props.get("config.hardware.numCPU") != spec.num_cpus:
        cfg.numCPUs = spec.num_cpus
        changed = True
    if spec.num_cores_per_socket and props.get("config.hardware.numCoresPerSocket") != spec.num_cores_per_socket:
        if spec.num_cpus % spec.num_cores_per_socket:
            raise InvalidSpec(f"numCPUs {spec.num_cpus} is not a multiple of numCoresPerSocket {spec.num_cores_per_socket}", public=True)
        cfg.numCoresPerSocket = spec.num_cores_per_socket
        changed = True
    if spec.memory_mib and props.get("config.hardware.memoryMB") != spec.memory_mib:
        cfg.memoryMB = spec.memory_mib
        changed = True
    if spec.firmware:
        firmware = "bios" if spec.firmware == "bios" else "efi"
        if props.get("config.firmware") != firmware:
            cfg.firmware = firmware
            changed = True
        boot = props.get("config.bootOptions")
        secure = bool(getattr(boot, "efiSecureBootEnabled", False)) if boot is not None else False
        if firmware == "efi" and secure != (spec.firmware == "efi-secure"):
            # Secure boot on (efi-secure) or off (efi); before, it was sent on every converge and
            # never turned off.
            cfg.bootOptions = vim.vm.BootOptions(efiSecureBootEnabled=spec.firmware == "efi-secure")
            changed = True
    extra = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
    device_changes, labels = _disk_changes(devices, spec.disks, linked, idx, spec.datacenter, extra)
    powered_on = props.get("runtime.powerState") == "poweredOn"
    nic_changes, nic_labels, macs = _nic_changes(devices, spec.nics, idx, spec.datacenter, extra, powered_on)
    labels.update(nic_labels)
    if device_changes or nic_changes:
        cfg.deviceChange = device_changes + nic_changes
        changed = True
    if extra.get(UID_KEY) != spec.uid:
        labels[UID_KEY] = spec.uid
    if labels:
        # The disks' names go in the same task as the disks (``disks`` module).
        cfg.extraConfig = [vim.option.OptionValue(key=k, value=v) for k, v in labels.items()]
        changed = True
    return (cfg if changed else None), macs


def extra_config_spec(want: dict[str, str], props: dict[str, Any]) -> Any | None:
    """A ConfigSpec setting the extraConfig keys whose value differs (None when none does)."""
    have = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
    diff = [vim.option.OptionValue(key=k, value=v) for k, v in want.items() if have.get(k, "") != v]
    return vim.vm.ConfigSpec(extraConfig=diff) if diff else None


def with_config(plan: ClonePlan, hardware: Any | None, extra: dict[str, str]) -> ClonePlan:
    """``plan`` whose CloneSpec carries the whole configuration (issue 22: no reconfigure after
    the clone): ``hardware`` (``hardware_spec`` of the template's properties: CPU, memory,
    firmware, added disks, NICs with their MACs, the disk and NIC labels; not the growth of a
    template disk, below) and the
    ``extra`` extraConfig entries (guestinfo), after the UID key the plan already carries. The
    clone stays powered off (``powerOn`` False: ADR 0012's duplicate rule destroys a duplicate
    only if it never ran); vSphere applies ``CloneSpec.config`` to the new VM, and device edits
    name the template's device keys (vSphere API, ``VirtualMachineCloneSpec.config``)."""
    cfg = hardware if hardware is not None else vim.vm.ConfigSpec()
    # A template disk's growth stays out of the clone: the edit names the template's disk with
    # its backing file, and vcsim (govmomi v0.56 ``configureDevice``) then backs the clone's disk
    # with the template's own file, which destroying the clone deletes, leaving later clones of
    # that template without a disk (seen in the disk-identity property test). The converge after
    # the clone grows it (one ReconfigVM_Task, only for a class that grows a template disk).
    cfg.deviceChange = [c for c in cfg.deviceChange or []
                        if not (c.operation == "edit" and isinstance(c.device, vim.vm.device.VirtualDisk))]
    entries = {str(o.key): str(o.value) for o in plan.spec.config.extraConfig or []}
    entries.update({str(o.key): str(o.value) for o in cfg.extraConfig or []})
    entries.update(extra)
    cfg.extraConfig = [vim.option.OptionValue(key=k, value=v) for k, v in entries.items()]
    plan.spec.config = cfg
    return plan


def carried(config: Any, props: dict[str, Any]) -> bool:
    """Whether a VM read as ``props`` (``find.VM_PATHS``) shows everything the clone's
    ``CloneSpec.config`` ``config`` set: every ``extraConfig`` entry with its value (the UID,
    the disk and NIC labels, the guestinfo), a card with each MAC a NIC was given, the CPU
    count and memory when set, and the device changes (``_device_changes_carried``): each added
    disk at its slot, each edited disk at least its new size, each removed device gone. The read
    after a clone is taken from the clone task's last poll only when this holds (issue 22, ADR
    0014): the property collector does not order one object's read against another's, so a VM
    read beside a task seen ``success`` may predate the clone's end on vCenter; such a read lacks
    part of this and is read again (else the converge after it would add a disk twice or act on
    a card already removed). Pure."""
    have = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
    if any(have.get(str(o.key)) != str(o.value) for o in config.extraConfig or []):
        return False
    devices = props.get("config.hardware.device") or []
    present = {str(d.macAddress).lower() for d in devices
               if isinstance(d, vim.vm.device.VirtualEthernetCard) and getattr(d, "macAddress", None)}
    for change in config.deviceChange or []:
        device = change.device
        if (change.operation in ("add", "edit") and isinstance(device, vim.vm.device.VirtualEthernetCard)
                and device.macAddress and str(device.macAddress).lower() not in present):
            return False
    if not _device_changes_carried(config.deviceChange or [], devices):
        return False
    if config.numCPUs and props.get("config.hardware.numCPU") != config.numCPUs:
        return False
    return not (config.memoryMB and props.get("config.hardware.memoryMB") != config.memoryMB)


def _device_changes_carried(changes: list[Any], devices: list[Any]) -> bool:
    """Whether ``devices`` (a VM's ``config.hardware.device``) show the disk and removal
    ``changes`` of a clone's ConfigSpec: each added disk (operation ``add``) present at its slot
    with at least its size, each edited disk (``edit``) at least its new ``capacityInKB``, each
    removed device (``remove``) absent. Devices are matched by slot (controller kind and bus +
    unit, ``disks.slot_on``) and by device key, never by position: a clone keeps its template's
    device keys (edits and removals name them: vSphere API, ``VirtualMachineCloneSpec.config``),
    while an added device's key, and an added controller's, are temporary negative keys vCenter
    replaces, so an added disk is found by its slot, whose bus the spec fixes. Pure."""
    ctrls = vdisks.controllers(devices)
    # Controllers the clone adds, by their temporary key: the slot of a disk added on one.
    new_ctrls = {int(c.device.key): c.device for c in changes
                 if c.operation == "add" and isinstance(c.device, Dev.VirtualController)}
    by_key = {int(d.key): d for d in devices}
    # A disk with no controller or unit read (not yet attached) is at no slot.
    at_slot = {vdisks.slot_of(d, ctrls): d for d in vdisks.virtual_disks(devices)
               if d.controllerKey is not None and d.unitNumber is not None}

    def size(disk: Any) -> int:
        return int(disk.capacityInKB or 0)

    for change in changes:
        device = change.device
        if change.operation == "remove":
            if int(device.key) in by_key:
                return False
        elif isinstance(device, Dev.VirtualDisk) and change.operation == "add":
            key = int(device.controllerKey)
            slot = vdisks.slot_on(new_ctrls.get(key, ctrls.get(key)), key, int(device.unitNumber))
            have = at_slot.get(slot)
            if have is None or size(have) < size(device):
                return False
        elif isinstance(device, Dev.VirtualDisk) and change.operation == "edit":
            have = by_key.get(int(device.key))
            if not isinstance(have, Dev.VirtualDisk) or size(have) < size(device):
                return False
    return True
