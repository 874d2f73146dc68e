"""Finding VMs and templates: by the Kubernetes UID in extraConfig, by instance UUID, by name.

The UID lives in the VM's extraConfig under ``banlieue.uid``. Not ``guestinfo.*``: the guest
can rewrite guestinfo keys (``vmware-rpctool info-set``), and the identity of a VM must not be
writable from inside it. vSphere accepts any dotted key of letters/digits. Finding a UID means
reading every VM's key, so the scan reads ``config.extraConfig`` of every VM in one
PropertyCollector call (``config.extraConfig["key"]`` paths would not save the per-VM read, and
vcsim 0.24, the simulator until issue 18, did not support them) and the result is cached
(UID -> moref) so that later lookups read one VM only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import Firmware, NicStatus, PowerState, TemplateInfo, VMInfo
from banlieue.backends.vsphere import deserializer, macs
from banlieue.backends.vsphere import disks as vdisks
from banlieue.backends.vsphere import nics as vnics
from banlieue.backends.vsphere.inventory import InventoryIndex
from banlieue.backends.vsphere.nics import NIC_KEY_PREFIX
from banlieue.backends.vsphere.properties import (
    ObjectProps,
    datacenter_of,
    moid,
    retrieve,
    retrieve_objects,
    vm_traversal,
)

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl

# Every SOAP response freed as soon as it is used, not at the next full garbage collection.
deserializer.install()

UID_KEY = "banlieue.uid"

_POWER: dict[str, PowerState] = {"poweredOn": "PoweredOn", "poweredOff": "PoweredOff", "suspended": "Suspended"}

VM_PATHS = [
    "name",
    "runtime.powerState",
    "config.uuid",
    "config.instanceUuid",
    "config.hardware.numCPU",
    "config.hardware.numCoresPerSocket",
    "config.hardware.memoryMB",
    "config.hardware.device",
    "config.extraConfig",
    "config.firmware",
    "config.bootOptions",
    "guest.ipAddress",
    "guest.net",
    "config.changeVersion",
]

CONFIG_PATHS = frozenset({"config.changeVersion", "config.extraConfig", "name"})
"""Watched paths a configuration change sets, covered by the ``config.changeVersion`` it bumps
(vcsim reports them in separate updates, and ``name`` with an unchanged value on a reconfigure)."""

_IDENTITY_PATHS = frozenset({"config.instanceUuid", "config.uuid", "config.template", "name"})
"""Watched paths ``VMIndex.observe`` checks against the read's changeVersion (a VM's "enter")."""

USERDATA_KEY = "guestinfo.userdata"
"""Left out of the VMInfos ``VMIndex`` keeps (up to 64 KiB each, unread by the reconcilers)."""


def extra_config(props: ObjectProps) -> dict[str, str]:
    return {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}


def moref_order(ref: str) -> tuple[int, str]:
    """Sort key of VM morefs in creation order: vCenter numbers ``vm-<n>`` as it creates them."""
    prefix, _, number = ref.rpartition("-")
    return (int(number), prefix) if number.isdigit() else (1 << 62, ref)


class VMIndex:
    """UID -> VM moref cache, filled by full scans, creates and the change watch; thread-safe.

    ``authoritative`` is True while a change watch that has applied its initial full batch is
    running: then every managed VM is in the index (clones are added as they complete, removals
    arrive as "leave"), and a miss needs no full scan.

    It also keeps the last full read of each VM (``remember``) and answers from it (``recall``)
    while the watch is authoritative and has reported no change that the read does not show
    (``observe``): a change of ``config.changeVersion`` (vCenter bumps it at every configuration
    change: hardware, devices, extraConfig, by anyone) other than the read's, of the name or of
    the identity drops the entry; a power state change and the guest's addresses
    (``guest.ipAddress``, ``guest.net``, as ``to_vm_info`` reads them) are applied to it.
    So a reconcile after a watch event, or a periodic one, sends no read unless the configuration
    changed (docs/performance.md, "The 4-requests floor"). A read that started before a change the watch
    reported, or before a reset (a new collector), is not kept. The user data value
    (``USERDATA_KEY``) is not kept.

    The index also answers moref -> UID (``uid_of``), for a VM the change watch saw without its
    UID (a collector may list a VM before its config is set: vcsim puts a clone in its inventory
    before configuring it), and calls the ``subscribe`` callbacks when a UID gets a new moref (a clone), so
    the change watch can make sure every VM banlieue manages is watched from its creation on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The last full read of each VM (moref -> (VMInfo, config.changeVersion)), answered by
        # ``recall`` while the change watch is authoritative (class docstring).
        self._infos: dict[str, tuple[VMInfo, str]] = {}
        self._seq = 0  # counts the watch's VM changes (and resets)
        # moref -> ``_seq`` of its last change seen that a read's changeVersion does not cover
        self._dirty: dict[str, int] = {}
        # moref -> (``_seq``, changeVersion) of its last configuration-only change seen
        self._versions: dict[str, tuple[int, str]] = {}
        # moref -> ``_seq`` of a configuration change seen without a changeVersion (vcsim reports
        # extraConfig and changeVersion in separate updates), until a changeVersion follows
        self._uncovered: dict[str, int] = {}
        # moref -> whether the watch reported its power state since ``hold``: a power task runs
        self._held: dict[str, bool] = {}
        self._cleared = 0  # ``_seq`` of the last reset (a new collector)
        self._by_uid: dict[str, Any] = {}
        self._uid_by_moref: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        # called when something waits on the watch's next batch (``hurry``)
        self._hurry_listeners: list[Callable[[], None]] = []
        self._others: dict[str, dict[str, Any]] = {}
        # moref -> source ("labels", "guest", "read") -> MACs seen on that VM (``macs_in_use``)
        self._macs: dict[str, dict[str, frozenset[str]]] = {}
        # moref -> callbacks to call when the watch reports the VM powered on (``on_powered_on``)
        self._power_waiters: dict[str, list[Callable[[], None]]] = {}
        # UID -> MACs chosen for its clones (``reserve_macs``), until ``release_macs``
        self._reserved: dict[str, set[str]] = {}
        # VM name -> moref, and back, as the watch last reported them (``named``)
        self._by_name: dict[str, str] = {}
        self._name_of: dict[str, str] = {}
        # VM name -> callbacks to call when the watch reports a VM with that name (``on_named``)
        self._name_waiters: dict[str, list[Callable[[], None]]] = {}
        self.authoritative = False
        self.scan_lock = threading.Lock()
        """Held by the full scan (``scan_uids``): one at a time per vCenter."""
        self.scans = 0
        """Full scans completed (``scan_uids`` skips its own when one ended while it waited)."""

    def get(self, uid: str) -> Any | None:
        with self._lock:
            return self._by_uid.get(uid)

    def put(self, uid: str, vm: Any, replace: bool = True) -> None:
        """Map ``uid`` to ``vm``; call the listeners (outside the lock) if the moref is new for it.
        The VM it mapped to before, if another, is kept as a candidate duplicate (``others``):
        two VMs may carry one UID (a clone sent twice, a VM copied by hand), and which one is
        the machine's is decided by ``Backend.find_vm``, never by which was seen last.
        ``replace`` False (a scan or the change watch seeing a VM): ``vm`` becomes the mapping
        only when ``uid`` has none, else it is a candidate."""
        ref = moid(vm)
        with self._lock:
            old = self._by_uid.get(uid)
            old_ref = moid(old) if old is not None else None
            if old_ref is not None and old_ref != ref and not replace:
                self._others.setdefault(uid, {})[ref] = vm
                return
            if old_ref is not None and old_ref != ref:
                self._uid_by_moref.pop(old_ref, None)
                self._others.setdefault(uid, {})[old_ref] = old
            others = self._others.get(uid)
            if others is not None:
                others.pop(ref, None)
                if not others:
                    del self._others[uid]
            self._by_uid[uid] = vm
            self._uid_by_moref[ref] = uid
            listeners = list(self._listeners) if old_ref != ref else []
        for notify in listeners:
            notify()

    def others(self, uid: str) -> dict[str, Any]:
        """moref -> VM of the other VMs seen carrying ``uid`` (candidates: they may be gone or
        carry another UID since; the caller reads them)."""
        with self._lock:
            return dict(self._others.get(uid) or {})

    def forget(self, uid: str, moref: str | None = None) -> bool:
        """Drop ``uid`` (only if it still maps to ``moref`` when given; a candidate ``moref`` is
        dropped from ``others``); True if the mapping was dropped. A candidate duplicate then
        becomes the mapping (the lowest ``vm-<n>``: the oldest)."""
        with self._lock:
            vm = self._by_uid.get(uid)
            others = self._others.get(uid)
            if moref is not None and others is not None and moref in others and (vm is None or moid(vm) != moref):
                del others[moref]
                if not others:
                    del self._others[uid]
                return False
            if vm is None or (moref is not None and moid(vm) != moref):
                return False
            del self._by_uid[uid]
            self._uid_by_moref.pop(moid(vm), None)
            self._infos.pop(moid(vm), None)
            self._dirty.pop(moid(vm), None)
            self._versions.pop(moid(vm), None)
            self._uncovered.pop(moid(vm), None)
            if others:
                ref = min(others, key=moref_order)
                self._by_uid[uid] = others.pop(ref)
                self._uid_by_moref[ref] = uid
                if not others:
                    del self._others[uid]
            return True

    # --- the last full read of each VM ----------------------------------------------------

    def mark(self) -> int:
        """Taken before a read: ``remember`` refuses a read older than a change seen since."""
        with self._lock:
            return self._seq

    def remember(self, info: VMInfo, change_version: str, since: int) -> None:
        """Keep ``info`` (read with ``config.changeVersion`` = ``change_version``, the read begun
        at ``mark()`` = ``since``) unless the watch is not authoritative, or saw since then a
        reset, a change of the VM other than of its configuration, or a configuration change to
        another version than the read's."""
        self.note_macs(info.moref, "read", (n.mac_address for n in info.nics))
        if not change_version:
            return
        kept = info
        if USERDATA_KEY in info.extra_config:
            kept = replace(info, extra_config={k: v for k, v in info.extra_config.items() if k != USERDATA_KEY})
        with self._lock:
            if not self.authoritative or self._cleared > since or self._dirty.get(info.moref, -1) > since:
                return
            if self._uncovered.get(info.moref, -1) > since:
                return  # a configuration change no changeVersion has been seen for yet
            seen = self._versions.get(info.moref)
            if seen is not None and seen[0] > since and seen[1] != change_version:
                return  # a configuration change this read may not show
            self._infos[info.moref] = (kept, change_version)

    # --- MACs in use (``macs`` module) ------------------------------------------------------

    def note_macs(self, moref: str, source: str, macs: Iterable[str]) -> None:
        """Record the MACs ``source`` ("labels": ``banlieue.nic.*`` values, "guest": guest.net,
        "read": a full read's cards) shows on VM ``moref`` (lower case; empty values ignored)."""
        found = frozenset(m.lower() for m in macs if m and ":" in m)
        with self._lock:
            self._note_macs(moref, source, found)

    def _note_macs(self, moref: str, source: str, found: frozenset[str]) -> None:
        if found:
            self._macs.setdefault(moref, {})[source] = found
        elif moref in self._macs:
            self._macs[moref].pop(source, None)
            if not self._macs[moref]:
                del self._macs[moref]

    def macs_in_use(self) -> set[str]:
        """Every MAC the index knows on a VM of this vCenter, and every reserved one."""
        with self._lock:
            return self._macs_in_use()

    def _macs_in_use(self) -> set[str]:
        out: set[str] = set()
        for sources in self._macs.values():
            for found in sources.values():
                out |= found
        for reserved in self._reserved.values():
            out |= reserved
        return out

    def forget_macs(self, moref: str) -> None:
        """VM ``moref`` is destroyed: its MACs are free again (before the watch reports the
        removal, or without a watch)."""
        with self._lock:
            self._macs.pop(moref, None)

    def mac_owners(self, wanted: Iterable[str], uid: str) -> dict[str, str]:
        """Which of the MACs ``wanted`` (any case) another VM of this vCenter has, as MAC (lower
        case) -> who has it: ``VM <moref>`` or ``a clone in flight``. The VMs and reservations of
        ``uid`` itself do not count. Only what ``macs_in_use`` knows (ADR 0014)."""
        want = {m.lower() for m in wanted}
        out: dict[str, str] = {}
        with self._lock:
            for moref, sources in self._macs.items():
                if self._uid_by_moref.get(moref) == uid:
                    continue
                for found in sources.values():
                    for mac in want & found:
                        out.setdefault(mac, f"VM {moref}")
            for other, reserved in self._reserved.items():
                if other != uid:
                    for mac in want & reserved:
                        out.setdefault(mac, "a clone in flight")
        return out

    def reserve_macs(self, uid: str, count: int, rand: Callable[[int, int], int] | None = None) -> list[str]:
        """``count`` MACs for a clone of ``uid`` (``macs.choose``: VMware's manual range, none in
        ``macs_in_use``), reserved for ``uid`` until ``release_macs``: two clones in flight in
        this process (any Provider on this vCenter) never get the same MAC."""
        with self._lock:
            chosen = macs.choose(self._macs_in_use(), count, rand)
            self._reserved.setdefault(uid, set()).update(chosen)
            return chosen

    def on_powered_on(self, moref: str, notify: Callable[[], None], hurry: bool = True) -> Callable[[], None]:
        """Call ``notify()`` (from the watch's thread; it must not block) once the change watch
        reports VM ``moref``'s ``runtime.powerState`` as poweredOn; returns the remover. A
        power-on whose worker holds a vCenter slot meanwhile hurries the watch (``hurry``); one
        followed in the background (``hurry`` False) waits for the watch's own gap."""
        remove = self._add_waiter(self._power_waiters, moref, notify)
        if hurry:
            self.hurry()
        return remove

    def _add_waiter(self, table: dict[str, list[Callable[[], None]]], key: str,
                    notify: Callable[[], None]) -> Callable[[], None]:
        """Register ``notify`` under ``key`` in ``table`` (under the index lock); returns the remover."""
        with self._lock:
            table.setdefault(key, []).append(notify)

        def remove() -> None:
            with self._lock:
                waiters = table.get(key)
                if waiters is not None and notify in waiters:
                    waiters.remove(notify)
                    if not waiters:
                        del table[key]

        return remove

    def release_macs(self, uid: str) -> None:
        """Drop the MACs reserved for ``uid`` (its VM is destroyed, or its MACs are known)."""
        with self._lock:
            self._reserved.pop(uid, None)

    def invalidate(self, moref: str) -> tuple[VMInfo, str] | None:
        """banlieue is changing the VM (a task it sends): drop its kept read, and refuse reads
        begun before now. Returns the dropped read and its changeVersion (None: there was none)."""
        with self._lock:
            self._seq += 1
            self._dirty[moref] = self._seq
            return self._infos.pop(moref, None)

    def hold(self, moref: str) -> None:
        """A power task on the VM is being sent: no lookup is answered from the kept read until
        ``release`` (the watch still updates it), and reads begun before now are not kept."""
        with self._lock:
            self._seq += 1
            self._dirty[moref] = self._seq
            self._held[moref] = False

    def release(self, moref: str, power_state: PowerState | None) -> None:
        """The power task ended; ``power_state``: the state it reached (None: it failed). The kept
        read takes that state unless the watch reported a power state since ``hold`` (then the
        watch's, the latest, stands)."""
        with self._lock:
            reported = self._held.pop(moref, True)
            got = self._infos.get(moref)
            if got is not None and power_state is not None and not reported:
                self._infos[moref] = (replace(got[0], power_state=power_state), got[1])

    def recall(self, moref: str) -> VMInfo | None:
        """The VM's last full read, as the watch's changes left it; None when there is none, the
        watch is not authoritative, or a power task of banlieue's runs on the VM and the watch
        has reported no power state since it was sent (once it has, the kept read is the latest:
        a reconcile woken by that report is answered without a read while the task's waiter, in
        the background or not, has yet to ``release``)."""
        with self._lock:
            if not self.authoritative or self._held.get(moref) is False:
                return None
            got = self._infos.get(moref)
            return got[0] if got is not None else None

    def observe(self, moref: str, changes: Mapping[str, Any], removed: bool = False) -> None:
        """The watch saw ``changes`` (path -> value; None: value not kept) of VM ``moref``, or its
        removal: update or drop its kept read (class docstring). Called before the change is
        handed to anyone."""
        with self._lock:
            self._seq += 1
            if removed:
                self._macs.pop(moref, None)
                self._drop_name(moref)
            elif (name := changes.get("name")) is not None:
                self._drop_name(moref)
                self._by_name[str(name)] = moref
                self._name_of[moref] = str(name)
                for notify in self._name_waiters.pop(str(name), []):
                    notify()
            extra = changes.get("config.extraConfig")
            if isinstance(extra, list):
                labels = (str(o.value) for o in extra if str(o.key).startswith(NIC_KEY_PREFIX))
                self._note_macs(moref, "labels", frozenset(m.lower() for m in labels if ":" in m))
            guest = changes.get("guest.net")
            if isinstance(guest, tuple):
                self._note_macs(moref, "guest", frozenset(str(m[0]).lower() for m in guest if m and m[0]))
            version = changes.get("config.changeVersion")
            if not removed and changes and set(changes) <= CONFIG_PATHS:
                # A configuration change (the VM's own reconfigure, usually): a read begun before
                # it is still right if it shows the changeVersion that comes with it (``remember``).
                if version is not None:
                    self._versions[moref] = (self._seq, str(version))
                    self._uncovered.pop(moref, None)
                else:
                    self._uncovered[moref] = self._seq
            else:
                self._dirty[moref] = self._seq
            if moref in self._held and "runtime.powerState" in changes:
                self._held[moref] = True
            if str(changes.get("runtime.powerState")) == "poweredOn":
                for notify in self._power_waiters.pop(moref, []):
                    notify()
            got = self._infos.get(moref)
            if got is None:
                return
            if removed:
                del self._infos[moref]
                return
            info, version = got
            for name, val in changes.items():
                if name == "config.changeVersion":
                    keep = val == version
                elif name == "runtime.powerState" and str(val) in _POWER:
                    info, keep = replace(info, power_state=_POWER[str(val)]), True
                elif name == "guest.ipAddress":
                    info, keep = replace(info, ip_address=str(val) if val else None), True
                elif name == "guest.net" and (ips := _guest_ips(val)) is not None:
                    nics = tuple(replace(n, ip_addresses=ips.get(n.mac_address, ())) for n in info.nics)
                    info, keep = replace(info, nics=nics), True
                elif name == "config.extraConfig":
                    # vCenter bumps changeVersion in the same update; alone (a guest's
                    # guestinfo write, or an update split by the collector) it is read again.
                    keep = "config.changeVersion" in changes
                elif name in _IDENTITY_PATHS:
                    # A collector's first report of a VM (its "enter": a clone banlieue has read
                    # already) lists every path. With the read's changeVersion in the same update
                    # the configuration is the one read; a value that is kept must match it too.
                    read: dict[str, Any] = {"config.instanceUuid": info.instance_uuid, "config.uuid": info.bios_uuid,
                                            "name": info.name, "config.template": False}
                    keep = str(changes.get("config.changeVersion")) == version and (
                        val is None or (val if isinstance(val, bool) else str(val)) == read[name])
                else:
                    keep = False
                if not keep:
                    del self._infos[moref]
                    return
            self._infos[moref] = (info, version)

    def _drop_name(self, moref: str) -> None:
        name = self._name_of.pop(moref, None)
        if name is not None and self._by_name.get(name) == moref:
            del self._by_name[name]

    def named(self, name: str) -> str | None:
        """The moref of the VM the watch last reported with ``name``, None when it knows none.
        A guess, never an identity: names are unique only per folder, and vcsim (like a
        collector at version granularity) may list a clone before its configuration carries
        the UID. ``Backend.create_vm`` uses it only to read a clone beside its task's last poll,
        and keeps that read only when the task's result is this moref (``tasks.ReadAlong``)."""
        with self._lock:
            return self._by_name.get(name)

    def on_named(self, name: str, notify: Callable[[], None]) -> Callable[[], None]:
        """Call ``notify()`` (from the watch's thread; it must not block) once the change watch
        reports a VM named ``name``; returns the remover."""
        return self._add_waiter(self._name_waiters, name, notify)

    def reset_reads(self) -> None:
        """Forget every kept read (a new collector: what happened meanwhile was not seen)."""
        with self._lock:
            self._by_name.clear()
            self._name_of.clear()
            self._seq += 1
            self._cleared = self._seq
            self._infos.clear()
            self._dirty.clear()
            self._versions.clear()
            self._uncovered.clear()

    def uid_of(self, moref: str) -> str | None:
        """The UID the index maps to ``moref`` (None when it has none)."""
        with self._lock:
            return self._uid_by_moref.get(moref)

    def morefs(self) -> dict[str, str]:
        """A snapshot: moref -> UID of every indexed VM."""
        with self._lock:
            return dict(self._uid_by_moref)

    def hurry(self) -> None:
        """Tell the change watch that a caller is waiting for its next batch (a power-on, a
        clone's name): it sends its next long poll ``watch.POLL_GAP_SECONDS`` after the last,
        not after the longer gap it grows to while updates keep coming. Any thread."""
        with self._lock:
            listeners = list(self._hurry_listeners)
        for notify in listeners:
            notify()

    def on_hurry(self, notify: Callable[[], None]) -> Callable[[], None]:
        """Call ``notify()`` (from any thread; it must not block) on each ``hurry``; returns the
        function that unsubscribes it."""
        return self._listen(self._hurry_listeners, notify)

    def subscribe(self, notify: Callable[[], None]) -> Callable[[], None]:
        """Call ``notify()`` (from any thread) whenever a UID gets a new moref; returns the
        function that unsubscribes it."""
        return self._listen(self._listeners, notify)

    def _listen(self, listeners: list[Callable[[], None]], notify: Callable[[], None]) -> Callable[[], None]:
        """Add ``notify`` to ``listeners`` under the lock; return the function that removes it."""
        with self._lock:
            listeners.append(notify)

        def unsubscribe() -> None:
            with self._lock:
                if notify in listeners:
                    listeners.remove(notify)

        return unsubscribe


def scan_vms(content: Any, with_config: bool = True) -> list[ObjectProps]:
    """Every VM and template with name and template flag, and (``with_config``) extraConfig and
    instance UUID (1 call), plus the folders/datacenters above them (to know each one's
    datacenter). Template lookups pass ``with_config=False``: extraConfig (guestinfo user data
    included) is most of the response, and at 10,000 VMs a template scan with it took seconds."""
    paths = ["name", "parent", "config.template"] + (["config.extraConfig", "config.instanceUuid"] if with_config else [])
    return retrieve(
        content,
        content.rootFolder,
        vm_traversal(),
        {
            vim.VirtualMachine: paths,
            vim.Folder: ["parent"],
            vim.Datacenter: ["name", "parent"],
        },
    )


def scan_uids(content: Any, index: VMIndex) -> None:
    """Refresh ``index`` from a full scan (VMs without a UID are ignored).

    Single-flight: a caller that waited for another's scan uses its result instead of scanning
    again. After a restart every lookup misses the empty index at once; each running its own
    scan of every VM's extraConfig (the pool's 8 workers per vCenter) multiplied the largest
    responses of the start-up by 8."""
    seen = index.scans
    with index.scan_lock:
        if index.scans != seen:
            return  # a scan completed while this caller waited: the index is as fresh
        for o in scan_vms(content):
            if o.type == "VirtualMachine":
                extra = extra_config(o)
                index.note_macs(moid(o.obj), "labels", vnics.nic_labels(extra).values())
                uid = extra.get(UID_KEY)
                if uid:
                    index.put(uid, o.obj, replace=False)
        index.scans += 1


def read_vm(content: Any, vm: Any, idx: InventoryIndex | None) -> VMInfo | None:
    """Read one VM's VMInfo in one call; None when it no longer exists."""
    got = read_vm_versioned(content, vm, idx)
    return got[0] if got is not None else None


def read_vm_versioned(content: Any, vm: Any, idx: InventoryIndex | None) -> tuple[VMInfo, str] | None:
    """``read_vm`` with the VM's ``config.changeVersion`` ("" when vCenter gave none): one call."""
    try:
        found = retrieve_objects(content, [vm], vim.VirtualMachine, VM_PATHS)
    except vmodl.fault.ManagedObjectNotFound:
        return None
    if not found:
        return None
    return to_vm_info(found[0], idx), str(found[0].get("config.changeVersion") or "")


def read_vm_full(content: Any, vm: Any, idx: InventoryIndex | None,
                 extra_paths: Iterable[str] = ()) -> tuple[VMInfo, str, ObjectProps] | None:
    """``read_vm_versioned`` with ``extra_paths`` read in the same call, and the raw properties
    (what ``clone.hardware_spec`` compares with a spec): one call; None when the VM is gone."""
    paths = VM_PATHS + [p for p in extra_paths if p not in VM_PATHS]
    try:
        found = retrieve_objects(content, [vm], vim.VirtualMachine, paths)
    except vmodl.fault.ManagedObjectNotFound:
        return None
    if not found:
        return None
    return to_vm_info(found[0], idx), str(found[0].get("config.changeVersion") or ""), found[0]


def _guest_ips(val: Any) -> dict[str, tuple[str, ...]] | None:
    """MAC -> addresses from a ``guest.net`` value: the lean reader's ((mac, ips), ...), pyVmomi's
    ``GuestNicInfo`` list, or None (no guest NIC). None when the value is of neither shape."""
    if val is None:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for item in val:
        if isinstance(item, tuple) and len(item) == 2:
            mac, ips = item
        elif hasattr(item, "macAddress"):
            mac, ips = str(item.macAddress or "").lower(), tuple(str(ip) for ip in item.ipAddress or [])
        else:
            return None
        if mac:
            out[mac] = tuple(ips)
    return out


def to_vm_info(o: ObjectProps, idx: InventoryIndex | None) -> VMInfo:
    extra = extra_config(o)
    devices = o.get("config.hardware.device") or []
    disks = tuple(-(-int(d.capacityInKB) // (1024 * 1024)) for d in devices if isinstance(d, vim.vm.device.VirtualDisk))
    guest_ips: dict[str, tuple[str, ...]] = {}
    for gn in o.get("guest.net") or []:
        if gn.macAddress:
            guest_ips[str(gn.macAddress).lower()] = tuple(str(ip) for ip in gn.ipAddress or [])
    nics = []
    cards = vnics.ethernet_cards(devices)
    for d, name in zip(cards, vnics.nic_names(devices, extra), strict=True):
        mac = vnics.mac_of(d)
        nics.append(NicStatus(mac_address=mac, network=_network_name(d, idx), ip_addresses=guest_ips.get(mac, ()),
                              name=name, connected=vnics.is_connected(d)))
    return VMInfo(
        uid=extra.get(UID_KEY),
        moref=o.moref,
        name=str(o.get("name")),
        power_state=_POWER.get(str(o.get("runtime.powerState")), "PoweredOff"),
        bios_uuid=str(o.get("config.uuid") or ""),
        instance_uuid=str(o.get("config.instanceUuid") or ""),
        num_cpus=int(o.get("config.hardware.numCPU") or 0),
        num_cores_per_socket=int(o.get("config.hardware.numCoresPerSocket") or 0),
        memory_mib=int(o.get("config.hardware.memoryMB") or 0),
        disks_gib=disks,
        nics=tuple(nics),
        ip_address=str(o.get("guest.ipAddress")) if o.get("guest.ipAddress") else None,
        extra_config={k: v for k, v in extra.items() if k.startswith(("guestinfo.", "banlieue."))},
        disk_names=vdisks.disk_names(devices, extra),
        disk_provisioning=tuple(vdisks.provisioning_of(d) for d in vdisks.virtual_disks(devices)),
        firmware=_firmware(o),
        os_disk=vdisks.os_disk_index(devices, extra),
    )


def _firmware(o: ObjectProps) -> Firmware | None:
    """``config.firmware`` in the API's terms (``efi-secure``: EFI with secure boot); None when
    the read did not include it."""
    fw = o.get("config.firmware")
    if fw is None:
        return None
    boot = o.get("config.bootOptions")
    if str(fw) == "efi":
        return "efi-secure" if boot is not None and bool(getattr(boot, "efiSecureBootEnabled", False)) else "efi"
    return "bios"


def _network_name(nic: Any, idx: InventoryIndex | None) -> str:
    backing = nic.backing
    if isinstance(backing, vim.vm.device.VirtualEthernetCard.DistributedVirtualPortBackingInfo):
        key = str(backing.port.portgroupKey)
        return idx.networks_by_key.get(key, key) if idx is not None else key
    return str(getattr(backing, "deviceName", "") or "")


def find_by_instance_uuid(content: Any, instance_uuid: str) -> Any | None:
    """SearchIndex.FindByUuid(vmSearch=True, instanceUuid=True): one call."""
    return content.searchIndex.FindByUuid(None, instance_uuid, True, True)


def find_template(content: Any, datacenter: str | None, name: str) -> TemplateInfo | None:
    """The template named ``name`` (in ``datacenter`` if given): 1 scan + 1 read."""
    objs = scan_vms(content, with_config=False)
    parents = {o.moref: moid(o.get("parent")) for o in objs if o.get("parent") is not None}
    dcs = {o.moref: str(o.get("name")) for o in objs if o.type == "Datacenter"}
    for o in objs:
        if o.type != "VirtualMachine" or not o.get("config.template") or o.get("name") != name:
            continue
        dc = datacenter_of(o.moref, parents, dcs)
        if datacenter is not None and dc != datacenter:
            continue
        detail = retrieve_objects(
            content,
            [o.obj],
            vim.VirtualMachine,
            ["config.hardware.numCPU", "config.hardware.memoryMB", "config.hardware.device", "config.firmware",
             "config.guestId", "config.instanceUuid", "snapshot"],
        )[0]
        devices = detail.get("config.hardware.device") or []
        disk = next((d for d in devices if isinstance(d, vim.vm.device.VirtualDisk)), None)
        return TemplateInfo(
            name=name,
            datacenter=dc or "",
            moref=o.moref,
            instance_uuid=str(detail.get("config.instanceUuid") or ""),
            num_cpus=int(detail.get("config.hardware.numCPU") or 0),
            memory_mib=int(detail.get("config.hardware.memoryMB") or 0),
            disk_gib=-(-int(disk.capacityInKB) // (1024 * 1024)) if disk is not None else 0,
            firmware=str(detail.get("config.firmware") or "bios"),
            guest_id=str(detail.get("config.guestId") or ""),
            has_snapshot=detail.get("snapshot") is not None and detail.get("snapshot").currentSnapshot is not None,
        )
    return None


def template_object(content: Any, datacenter: str, name: str) -> Any | None:
    """The template's managed object in ``datacenter`` (1 scan)."""
    objs = scan_vms(content, with_config=False)
    parents = {o.moref: moid(o.get("parent")) for o in objs if o.get("parent") is not None}
    dcs = {o.moref: str(o.get("name")) for o in objs if o.type == "Datacenter"}
    for o in objs:
        if o.type == "VirtualMachine" and o.get("config.template") and o.get("name") == name:
            if datacenter_of(o.moref, parents, dcs) == datacenter:
                return o.obj
    return None

