"""``VSphereBackend``: the Backend protocol on pyvmomi (ARCHITECTURE.md "Backends").

Blocking pyvmomi calls run in a bounded thread pool per vCenter (``max_workers``, default 8);
asyncio does the waiting (tasks, guest shutdown) so no thread is held while vCenter works.
One session per Provider (``Connection.session_key``), re-established on NotAuthenticated.
Inventory name lookups are cached per vCenter for ``index_ttl`` seconds (re-read on NotFound,
and once the vCenter answers again after it stopped answering).
``create_vm`` never clones a UID twice in one process: once it has returned a VM for a UID, a
later call that finds no VM raises NotFound ``VMNotFound`` (removed by hand; the caller's copy
of the object may predate its status), as does a VM that vanishes while it is configured.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

import structlog
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import (
    Backend,
    BackendError,
    Capabilities,
    Connection,
    CreateResult,
    InvalidSpec,
    Inventory,
    NicSpec,
    NotFound,
    PowerOffMode,
    PowerState,
    TaskFailed,
    TemplateInfo,
    Transient,
    VCenterAbout,
    VMChange,
    VMInfo,
    VMSpec,
)
from banlieue.backends.vsphere import clone, duplicates, events, find, guestinfo, macs, nics, power, tasks
from banlieue.backends.vsphere.allowlist import Network
from banlieue.backends.vsphere.health import PROBE_INTERVAL
from banlieue.backends.vsphere.inventory import InventoryIndex, build_index, failure_domains
from banlieue.backends.vsphere.properties import ObjectProps, moid, retrieve_objects
from banlieue.backends.vsphere.session import Session, SessionPool
from banlieue.backends.vsphere.tasks import Runner, wait_task
from banlieue.backends.vsphere.watch import POLL_GAP_MAX_SECONDS, POLL_GAP_SECONDS, watch_vms

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl

log = structlog.get_logger("banlieue.backends.vsphere")

CONVERGE_PATHS = [
    "runtime.powerState",
    "config.hardware.numCPU",
    "config.hardware.numCoresPerSocket",
    "config.hardware.memoryMB",
    "config.hardware.device",
    "config.extraConfig",
    "config.firmware",
    "config.bootOptions",
]


CLONE_OUTCOME_UNKNOWN = "CloneOutcomeUnknown"
"""Reason of a clone whose CloneVM_Task may have been accepted but whose outcome is not known
(answer lost, task not followed to its end): the caller must look the VM up by UID, and wait
for the clone, before cloning again (ADR 0009, ADR 0012)."""

CLONE_TASK_RECORD_AFTER = 5.0
"""Seconds a clone task runs before its key is handed to ``create_vm``'s ``on_clone_task``."""

CLONE_FIRST_POLL = 0.8
"""Share of the expected clone duration (moving average per vCenter) before a clone's first poll."""

CLONE_FIRST_POLL_MAX = 10.0
"""Seconds a clone's first poll waits at most (a vCenter that was slow for a while, a fault)."""

CLONE_NAMED_MARGIN = 0.5
"""Seconds above the watch's poll gap (``watch_poll_gap``, 1 s by default) that a clone's task poll
waits at most, in all, for the change watch to name the clone, so that the poll reads it beside
the task (``tasks.ReadAlong``): 1.5 s by default. A clone the collector never reports (one vcsim
lists and finishes within one tick) costs that much time, never a request."""

ABOUT_FRESH_SECONDS = 5.0
"""Seconds after a call through a session answered during which ``about`` answers from the
session without a ``CurrentTime`` of its own (the reachability probe's interval)."""

UNHURRIED_SIGNAL_MARGIN = 2.0
"""Seconds above the watch's longest gap (``watch_poll_gap_max``) that a power-on which does not
hurry the watch (``set_power_state(hurry=False)``) waits for the watch's report before it polls
its task: the batch may come a collector tick after the gap."""

FRESH_SECONDS = 2.0
"""How long create_vm's read-back of a VM stands in for set_power_state's read (seconds)."""


class VSphereBackend:
    """Backend for vCenter. Parameters: ``max_workers`` threads per vCenter, ``task_timeout``
    seconds per vSphere task (``--vsphere-task-timeout``), ``request_timeout`` seconds per SOAP
    request, ``watch_max_wait`` seconds per long poll, ``watch_poll_gap`` seconds from a long poll
    that brought updates to the next (``watch.POLL_GAP_SECONDS``; while a caller waits on the watch),
    ``watch_poll_gap_max`` seconds the gap grows to while updates keep coming and nobody waits
    (``watch.POLL_GAP_MAX_SECONDS``), ``index_ttl`` seconds of name caching,
    ``allowed_networks`` the endpoint allow-list (``allowlist``; None: any endpoint)."""

    def __init__(
        self,
        max_workers: int = 8,
        task_timeout: float = 600.0,
        request_timeout: float = 120.0,
        watch_max_wait: float = 60.0,
        watch_poll_gap: float = POLL_GAP_SECONDS,
        watch_poll_gap_max: float = POLL_GAP_MAX_SECONDS,
        index_ttl: float = 60.0,
        probe_interval: float = PROBE_INTERVAL,
        allowed_networks: Sequence[Network] | None = None,
    ) -> None:
        self.sessions = SessionPool(max_workers=max_workers, request_timeout=request_timeout,
                                    probe_interval=probe_interval, allowed_networks=allowed_networks)
        self.task_timeout = task_timeout
        self.watch_max_wait = watch_max_wait
        self.watch_poll_gap = watch_poll_gap
        self.watch_poll_gap_max = watch_poll_gap_max
        self.index_ttl = index_ttl
        self._indexes: dict[str, tuple[float, InventoryIndex]] = {}
        self._vm_indexes: dict[str, find.VMIndex] = {}
        # vCenter label -> UIDs whose VM create_vm returned (this process): never cloned again.
        self._delivered: dict[str, set[str]] = {}
        self._templates: dict[tuple[str, str, str], tuple[float, Any]] = {}
        # vCenter label -> clone duration expected (seconds, moving average): the first poll of a
        # clone task waits that long (``tasks.wait_task`` ``first_poll``; issue 22).
        self._clone_seconds: dict[str, float] = {}
        # (vCenter, datacenter, template) -> (monotonic time, template moref, CONVERGE_PATHS read)
        self._template_props: dict[tuple[str, str, str], tuple[float, str, dict[str, Any]]] = {}
        self._template_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        # UID -> (monotonic time, VM object, VMInfo) create_vm just read: set_power_state's
        # starting point when it follows within FRESH_SECONDS (taken once).
        self._fresh: dict[str, tuple[float, Any, VMInfo]] = {}
        # (vCenter label, UID) -> (CloneVM task, clone mode, message) of a clone whose outcome
        # this process has not seen yet (answer past the task timeout, task not followed).
        self._clone_tasks: dict[tuple[str, str], tuple[Any, Any, str]] = {}
        # A vCenter that stopped answering may come back with another inventory (a restarted
        # vcsim regenerates it; its server crashes on the old objects and drops the connection:
        # RemoteDisconnected until the 60 s TTL ran out): re-read names once it answers again.
        self.sessions.add_reconnect_listener(self._forget_inventory)

    # --- plumbing ---------------------------------------------------------------------------

    def _forget_inventory(self, label: str) -> None:
        """Drop the cached inventory index and templates of vCenter ``label`` (any thread), and the
        tasks seen ended there (``tasks.forget_ended``: a restarted vCenter reuses task keys)."""
        self._indexes.pop(label, None)
        tasks.forget_ended(label)
        for key in [k for k in list(self._templates) if k[0] == label]:
            self._templates.pop(key, None)
        for key in [k for k in list(self._template_props) if k[0] == label]:
            self._template_props.pop(key, None)

    def release_unused(self, wanted: Callable[[tuple[str, str, str]], bool]) -> list[str]:
        """Issue 23 case 6: release the sessions ``wanted`` refuses (by ``Connection.session_key``),
        the endpoints left unused (thread pool, probe) with their caches (inventory index, VM
        index, templates), and the metric series of Providers that hold no session any more
        (``SessionPool.release_unused``). Returns the released endpoint labels. Kept: the UIDs
        ``create_vm`` delivered on an endpoint (the guard against a second clone outlives a
        Provider that comes back; a few bytes per VM created by this process)."""
        released = self.sessions.release_unused(wanted)
        for label in released:
            self._forget_inventory(label)
            self._vm_indexes.pop(label, None)
            for key in [k for k in list(self._template_locks) if k[0] == label]:
                self._template_locks.pop(key, None)
        return released

    def _runner(self, conn: Connection) -> Runner:
        return partial(self.sessions.run, conn)

    def soap_requests(self, conn: Connection) -> int:
        """SOAP round trips sent to ``conn``'s vCenter so far (for benchmarks)."""
        return self.sessions.endpoint_for(conn).soap_requests

    def _vm_index(self, conn: Connection) -> find.VMIndex:
        label = self.sessions.endpoint_for(conn).label
        return self._vm_indexes.setdefault(label, find.VMIndex())

    def _nets(self, conn: Connection) -> InventoryIndex | None:
        """The cached inventory index of ``conn``'s vCenter (names of distributed port groups in
        a VMInfo), None before one was built; never a SOAP call."""
        cached = self._indexes.get(self.sessions.endpoint_for(conn).label)
        return cached[1] if cached else None

    async def _index(self, conn: Connection, fresh: bool = False) -> InventoryIndex:
        label = self.sessions.endpoint_for(conn).label
        cached = self._indexes.get(label)
        if cached is not None and not fresh and time.monotonic() - cached[0] < self.index_ttl:
            return cached[1]
        idx = await self.sessions.run(conn, lambda s: build_index(s.content))
        self._indexes[label] = (time.monotonic(), idx)
        return idx

    async def _locate(self, conn: Connection, uid: str, trust_miss: bool = True) -> tuple[Any, VMInfo] | None:
        """(VM object, VMInfo) for ``uid``: cached moref (1 call), else a full scan (2 calls)
        unless a running change watch keeps the index complete (0 calls for a miss).
        ``trust_miss`` False: scan even then. For a VM there is evidence of (a status that
        recorded it, one this process delivered, one to destroy) a miss in the watch-kept index
        is not proof: a VM moved by hand into another folder can leave the collector's view
        ("leave", a removal to the watch) and stay in vCenter (CAPV #1396; seen on vcsim)."""
        index = self._vm_index(conn)
        idx = self._indexes.get(self.sessions.endpoint_for(conn).label)
        nets = idx[1] if idx else None

        known = index.get(uid)
        if known is not None:
            kept = index.recall(moid(known))
            if kept is not None and kept.uid == uid:
                return known, kept  # the last full read, and the watch saw nothing it misses

        def locate(s: Session) -> tuple[Any, VMInfo] | None:
            # A mapping that is gone or relabelled is dropped; another VM seen with the UID
            # (a candidate duplicate) then takes its place and is read in turn.
            for _ in range(1 + len(index.others(uid))):
                vm = index.get(uid)
                if vm is None:
                    break
                since = index.mark()
                got = find.read_vm_versioned(s.content, vm, nets)
                if got is not None and got[0].uid == uid:
                    index.remember(got[0], got[1], since)
                    return vm, got[0]
                index.forget(uid, moid(vm))
            if index.authoritative and trust_miss:
                return None  # the change watch keeps the index complete: no scan needed
            find.scan_uids(s.content, index)
            vm = index.get(uid)
            if vm is None:
                return None
            info = find.read_vm(s.content, vm, nets)
            return (vm, info) if info is not None else None

        return await self.sessions.run(conn, locate)

    # --- Backend ----------------------------------------------------------------------------

    def spec_error(self, spec: VMSpec) -> str | None:
        """The guestinfo size limit (``guestinfo.spec_error``): user data over 64 KiB even
        gzip+base64-encoded, or base64 metadata over 64 KiB."""
        return guestinfo.spec_error(spec)

    def guest_data_drifted(self, vm: VMInfo, spec: VMSpec) -> bool:
        """``guestinfo.metadata_drifted``: the cloud-init metadata differs from the spec's."""
        return guestinfo.metadata_drifted(vm, spec)

    async def check_connection(self, conn: Connection) -> str:
        # CurrentTime needs a live session: one request proves reachability and credentials.
        await self.sessions.run(conn, lambda s: s.si.CurrentTime())
        sess = await self.sessions.session(conn)
        return str(sess.content.about.apiVersion)

    async def about(self, conn: Connection) -> VCenterAbout:
        # A session call answered within ABOUT_FRESH_SECONDS proves the session is live and its
        # vCenter the one ``about`` names (``Session.succeeded_at``): in a wave, the re-measure's
        # CurrentTime cost 0.06 requests per machine (issue 22).
        sess = await self.sessions.session(conn)
        if sess.about is not None and time.monotonic() - sess.succeeded_at < ABOUT_FRESH_SECONDS:
            return sess.about
        # The probe of identity itself: not refused when another vCenter answers.
        await self.sessions.run(conn, lambda s: s.si.CurrentTime(), check_identity=False)
        sess = await self.sessions.session(conn)
        assert sess.about is not None  # read at login
        return sess.about

    async def inventory(self, conn: Connection, capabilities: Capabilities) -> Inventory:
        return failure_domains(await self._index(conn, fresh=True), capabilities)

    async def find_template(self, conn: Connection, datacenter: str | None, name: str) -> TemplateInfo | None:
        return await self.sessions.run(conn, lambda s: find.find_template(s.content, datacenter, name))

    async def find_vm(self, conn: Connection, uid: str, instance_uuid: str | None = None) -> VMInfo | None:
        # A known instance UUID: the VM existed, so a miss is checked by a scan before "gone".
        found = await self._locate(conn, uid, trust_miss=not instance_uuid)
        if found is not None:
            index = self._vm_index(conn)
            if not index.others(uid):
                return found[1]
            # Another VM was seen with this UID: the one kept, with the others listed (ADR 0012).
            nets = self._nets(conn)
            current = found
            return (await self.sessions.run(
                conn, lambda s: duplicates.resolve(s.content, index, uid, current, instance_uuid, nets)))[1]
        if not instance_uuid:
            return None

        nets = self._nets(conn)

        def by_uuid(s: Session) -> VMInfo | None:
            vm = find.find_by_instance_uuid(s.content, instance_uuid)
            return find.read_vm(s.content, vm, nets) if vm is not None else None

        return await self.sessions.run(conn, by_uuid)

    async def create_vm(
        self, conn: Connection, spec: VMSpec, on_clone_task: Callable[[str], Awaitable[None]] | None = None
    ) -> CreateResult:
        run = self._runner(conn)
        vcenter = self.sessions.endpoint_for(conn).label
        delivered = self._delivered.setdefault(vcenter, set())
        found = await self._locate(conn, spec.uid, trust_miss=spec.uid not in delivered)
        created = False
        mode: Any = spec.clone_mode
        message = ""
        # The VM as the clone task's last poll read it, when that read shows the clone's work.
        along: tuple[ObjectProps, int] | None = None
        if found is not None:
            self._clone_tasks.pop((vcenter, spec.uid), None)  # the clone landed: found by UID
        elif (vcenter, spec.uid) in self._clone_tasks:
            found, mode, message = await self._clone_outcome(conn, spec)
            created = found is not None
        if found is None:
            if spec.uid in delivered:
                # This process handed out the VM for this UID and it is gone now (removed by
                # hand): the caller's view may be stale, but a second clone is never right.
                raise NotFound(f"the VM for {spec.uid} was removed from vCenter; not cloning it again", reason="VMNotFound", public=True)
            vm, mode, message, along = await self._clone(conn, spec, on_clone_task)
            created = True
        else:
            vm = found[0]
        idx = await self._index(conn)
        linked = mode == "linkedClone"

        index = self._vm_index(conn)

        async def read() -> tuple[tuple[VMInfo, str, Any], int]:
            since = index.mark()
            got = await run(lambda s: find.read_vm_full(s.content, vm, idx, CONVERGE_PATHS))
            if got is None:
                raise NotFound(f"VM for {spec.uid} disappeared while it was configured", reason="VMNotFound", public=True)
            return got, since

        # One read is both the converge's starting point and, when the VM already is as the spec
        # says (a clone that carried its configuration: the usual case), the VMInfo returned.
        # After a clone it is usually the one the clone task's last poll carried (``_clone``).
        try:
            if along is not None:
                props, since = along
                got = (find.to_vm_info(props, idx), str(props.get("config.changeVersion") or ""), props)
            else:
                got, since = await read()
            if await self._converge(run, vm, spec, idx, linked, vcenter, conn, got[2].props):
                got, since = await read()
        except NotFound as exc:
            # ManagedObjectNotFound (reason "NotFound", not a named inventory object): the VM
            # itself went while it was configured.
            if exc.reason != "NotFound" or await run(lambda s: find.read_vm(s.content, vm, None)) is not None:
                raise
            raise NotFound(f"VM for {spec.uid} disappeared while it was configured", reason="VMNotFound", public=True) from exc
        info = got[0]
        if info.uid == spec.uid:
            index.remember(info, got[1], since)
            index.note_macs(info.moref, "read", (n.mac_address for n in info.nics))
            index.release_macs(spec.uid)  # the VM's MACs are known from its read now
        delivered.add(spec.uid)
        self._fresh[spec.uid] = (time.monotonic(), vm, info)
        log.info("vsphere vm converged", vcenter=vcenter, vm=info.name, created=created, clone_mode=mode)
        return CreateResult(vm=info, created=created, clone_mode=mode, message=message)

    async def _converge(
        self, run: Runner, vm: Any, spec: VMSpec, idx: InventoryIndex, linked: bool, vcenter: str, conn: Connection,
        props: dict[str, Any],
    ) -> bool:
        """Apply what differs from ``spec`` to the VM read as ``props`` (``CONVERGE_PATHS``):
        hardware (and guestinfo in the same ReconfigVM when every final MAC is known), else
        guestinfo after reading generated MACs. True when a reconfigure was sent."""
        def read(s: Session) -> dict[str, Any]:
            return retrieve_objects(s.content, [vm], vim.VirtualMachine, CONVERGE_PATHS)[0].props

        try:
            hardware, macs = clone.hardware_spec(idx, spec, props, linked)
        except NotFound:
            idx = await self._index(conn, fresh=True)  # a port group or datastore added since
            hardware, macs = clone.hardware_spec(idx, spec, props, linked)
        if hardware is not None and props.get("runtime.powerState") != "poweredOff":
            if hardware.numCPUs or hardware.memoryMB or hardware.numCoresPerSocket:
                # vcsim applies these at any power state; vCenter needs hot-add: banlieue never relies on it.
                raise InvalidSpec("the VM is powered on: CPU and memory change only while it is powered off", public=True)
        have = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
        if hardware is not None and all(m is not None for m in macs):
            want = guestinfo.keep_redacted(
                self._guestinfo(spec, [(n, m) for n, m in zip(spec.nics, macs, strict=True) if m is not None]), have
            )
            hardware.extraConfig = list(hardware.extraConfig or []) + [
                vim.option.OptionValue(key=k, value=v) for k, v in want.items()
            ]
            await self._reconfigure(run, vm, hardware, conn)
            return True
        else:
            if hardware is not None:
                await self._reconfigure(run, vm, hardware, conn)
                props = await run(read)
            # Each spec NIC's MAC by its name (``nics`` module); a card added with a generated MAC
            # gets its ``new:<rank>`` label replaced by the MAC in this same reconfigure.
            extra = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
            matched = nics.match_nics(props.get("config.hardware.device") or [], extra, [n.name for n in spec.nics])
            pairs = [(n, nics.mac_of(matched[n.name])) for n in spec.nics if n.name in matched]
            want = guestinfo.keep_redacted(self._guestinfo(spec, pairs), extra)
            if nics.nic_labels(extra):
                want.update({nics.NIC_KEY_PREFIX + n.name: mac for n, mac in pairs if mac})
            update = clone.extra_config_spec(want, props)
            if update is not None:
                await self._reconfigure(run, vm, update, conn)
            return hardware is not None or update is not None

    def _guestinfo(self, spec: VMSpec, pairs: list[tuple[NicSpec, str]]) -> dict[str, str]:
        return guestinfo.guestinfo(spec.uid, spec.hostname or spec.name, pairs, spec.user_data)

    async def _reconfigure(self, run: Runner, vm: Any, cfg: Any, conn: Connection) -> None:
        index = self._vm_index(conn)
        index.invalidate(moid(vm))  # no lookup answers from a read of before this change
        try:
            task = await run(lambda s: vm.ReconfigVM_Task(spec=cfg))
            await wait_task(run, task, "reconfigure", self.task_timeout, conn.provider)
        finally:
            index.invalidate(moid(vm))

    async def _clone(
        self, conn: Connection, spec: VMSpec, on_clone_task: Callable[[str], Awaitable[None]] | None = None
    ) -> tuple[Any, Any, str, tuple[ObjectProps, int] | None]:
        """Clone ``spec`` (carrying its configuration); (VM, clone mode, message, read), where read
        is (the VM's ``find.VM_PATHS``, ``VMIndex.mark`` before it) when the clone task's last poll
        read the VM beside it and that read can stand for the read after the clone, else None.

        That read (issue 22: one request per clone instead of a task poll and a read) is sent only
        when the change watch already reports a VM with the UID or the clone's name (vcsim and
        vCenter list a clone before it ends), and used only when the task succeeded with that very VM as its
        ``info.result`` (never another VM carrying the UID) and the read shows what the clone
        carried (``clone.carried``): the property collector reads the task and the VM each at
        its own moment, so on vCenter a VM read beside a task seen done may predate the clone's
        end. Otherwise create_vm reads the VM as before (ADR 0014)."""
        run = self._runner(conn)
        vcenter = self.sessions.endpoint_for(conn).label
        key = (vcenter, spec.datacenter, spec.template)
        # One lookup per template at a time: the lookup scans every VM of the vCenter, and a
        # burst of clones of one template would otherwise all miss the cache and scan at once
        # (9% of the manager's CPU while 1,000 VMs were provisioned: docs/performance.md).
        template_props: dict[str, Any] = {}
        async with self._template_locks.setdefault(key, asyncio.Lock()):
            cached = self._templates.get(key)
            if cached is not None and time.monotonic() - cached[0] < self.index_ttl:
                template = cached[1]
            else:
                template = await run(lambda s: find.template_object(s.content, spec.datacenter, spec.template))
                if template is not None:
                    self._templates[key] = (time.monotonic(), template)
            if template is not None:
                # The template's hardware, the base of the configuration the clone carries: read
                # once per template and ``index_ttl`` (the template lock makes a burst read it once).
                props = self._template_props.get(key)
                if props is None or time.monotonic() - props[0] >= self.index_ttl or props[1] != moid(template):
                    try:
                        read = await run(lambda s: retrieve_objects(
                            s.content, [template], vim.VirtualMachine, CONVERGE_PATHS)[0].props)
                    except NotFound:
                        self._templates.pop(key, None)  # the cached template was removed or replaced
                        raise
                    props = (time.monotonic(), moid(template), read)
                    self._template_props[key] = props
                template_props = props[2]
        if template is None:
            datacenters = sorted((await self._index(conn)).datacenters)
            if spec.datacenter and spec.datacenter not in datacenters:
                # Said as what it is (a new-user review: it read "template 'ubuntu-22.04' not found in 'DCX'").
                raise NotFound(f"datacenter {spec.datacenter!r} not found: this vCenter has {', '.join(datacenters) or 'none'}",
                               reason="DatacenterNotFound", public=True)
            raise NotFound(f"template {spec.template!r} not found in {spec.datacenter!r}", reason="TemplateNotFound", public=True)
        snapshot = None
        if spec.clone_mode == "linkedClone":

            def current_snapshot(s: Session) -> Any:
                snap = retrieve_objects(s.content, [template], vim.VirtualMachine, ["snapshot"])[0].get("snapshot")
                return snap.currentSnapshot if snap is not None else None

            snapshot = await run(current_snapshot)
        idx = await self._index(conn)
        try:
            plan = clone.clone_plan(idx, spec, snapshot)
        except NotFound:
            idx = await self._index(conn, fresh=True)
            plan = clone.clone_plan(idx, spec, snapshot)
        # The clone carries the disks converged on the template's (``_configured``): a spec that
        # cannot be completed (a shrink of the boot disk, no slot left) raises InvalidSpec here,
        # before anything is cloned, so no half-built VM is left (issue 19).
        index = self._vm_index(conn)
        plan = self._configured(index, idx, spec, plan, template_props)
        # A VM the watch reports with the clone's name before the clone is sent is another VM:
        # never the guess read beside the clone's task (``clone_guess``).
        name_taken = index.named(spec.name)
        try:
            task = await run(lambda s: template.CloneVM_Task(folder=plan.folder, name=spec.name, spec=plan.spec))
        except NotFound:
            self._templates.pop(key, None)  # the cached template was removed or replaced
            index.release_macs(spec.uid)
            raise
        except Transient as exc:
            # The request may have reached vCenter (answer past the request timeout, connection
            # lost, vCenter hung): a clone may be running. Never a definitive failure.
            raise Transient(f"clone of {spec.name!r}: no answer ({exc}); it may still be running",
                            reason=CLONE_OUTCOME_UNKNOWN) from exc
        # Kept until the task's outcome is known: a later call resolves the clone by this task
        # instead of cloning again (``_clone_outcome``).
        self._clone_tasks[(vcenter, spec.uid)] = (task, plan.mode, plan.message)
        sent = time.monotonic()
        expected = self._clone_seconds.get(vcenter, 0.0)

        def clone_guess() -> Any | None:
            # The VM the watch reports with the UID, else with the clone's name (vcsim lists a
            # clone before its configuration, and may not report the UID set afterwards): a
            # guess, kept only if the task's result names it (``_clone`` docstring).
            found = index.get(spec.uid)
            if found is not None:
                return found
            ref = index.named(spec.name)
            return vim.VirtualMachine(ref, task._stub) if ref is not None and ref != name_taken else None

        along = tasks.ReadAlong(target=clone_guess, type_=vim.VirtualMachine, paths=find.VM_PATHS, mark=index.mark)
        unnamed: Callable[[], None] = lambda: None  # noqa: E731
        if index.authoritative:
            # The watch names the clone within its next batch (``watch_poll_gap``); a poll that
            # would read the task alone waits for that, CLONE_NAMED_MARGIN s more at most.
            # A poll waiting for the name hurries the watch (``VMIndex.hurry``): its next batch
            # comes within ``watch_poll_gap`` of the last, whatever gap it grew to.
            along.known, along.grace = asyncio.Event(), self.watch_poll_gap + CLONE_NAMED_MARGIN
            along.hurry = index.hurry
            loop = asyncio.get_running_loop()
            known = along.known

            def named() -> None:  # from the watch's thread
                loop.call_soon_threadsafe(known.set)

            unnamed = index.on_named(spec.name, named)
        waiter = asyncio.ensure_future(
            wait_task(run, task, f"clone {spec.template!r} to {spec.name!r}", self.task_timeout, conn.provider,
                      first_poll=min(CLONE_FIRST_POLL * expected, CLONE_FIRST_POLL_MAX), along=along))
        recorded = on_clone_task is None

        async def record() -> None:
            nonlocal recorded
            if recorded or on_clone_task is None:
                return
            recorded = True
            try:
                await on_clone_task(str(task._moId))
            except Exception as exc:  # a help for a restart, never a reason to fail the clone
                log.warning("vsphere clone task key not recorded", vcenter=vcenter, vm=spec.name, error=str(exc))

        try:
            if not recorded:
                # Handed out for a clone still running after CLONE_TASK_RECORD_AFTER seconds, or
                # whose outcome became unknown: a quick clone (most on a simulator) costs no write.
                done, _ = await asyncio.wait({waiter}, timeout=CLONE_TASK_RECORD_AFTER)
                if not done:
                    await record()
            vm = await waiter
        except Transient as exc:
            await record()
            raise Transient(f"clone of {spec.name!r}: lost track of its task ({exc}); it may still be running",
                            reason=CLONE_OUTCOME_UNKNOWN) from exc
        except TaskFailed as exc:
            if exc.reason != "TaskTimeout":
                self._clone_tasks.pop((vcenter, spec.uid), None)
                if macs.is_conflict(str(exc)):
                    # Kept reserved: the next clone of this UID chooses other MACs (``macs``).
                    log.warning("vsphere clone refused a MAC address", vcenter=vcenter, vm=spec.name, error=str(exc))
                    raise TaskFailed(f"{exc}; banlieue chose this NIC's MAC in VMware's manual range and will choose "
                                     "another at the next attempt (or give the NIC a macAddress)",
                                     reason=macs.CONFLICT_REASON, public=True) from exc
                index.release_macs(spec.uid)
                raise
            await record()
            raise TaskFailed(f"{exc}; the clone may still be running", reason=CLONE_OUTCOME_UNKNOWN) from exc
        except BackendError:
            self._clone_tasks.pop((vcenter, spec.uid), None)
            index.release_macs(spec.uid)
            raise
        finally:
            unnamed()
            if not waiter.done():
                waiter.cancel()  # this call was cancelled: stop following the task
        self._clone_tasks.pop((vcenter, spec.uid), None)
        # Seen done this long after it was sent (poll lag included: a first poll that comes too
        # early lowers the next estimate, one that comes late raises it by the back-off step).
        took = time.monotonic() - sent
        self._clone_seconds[vcenter] = took if expected == 0.0 else 0.8 * expected + 0.2 * took
        self._vm_index(conn).put(spec.uid, vm)
        made = None
        if along.props is None:
            beside = "none"  # the watch knew no VM to read beside the task's last poll
        elif along.props.moref != moid(vm):
            beside = "other-vm"
        elif not clone.carried(plan.spec.config, along.props.props):
            beside = "incomplete"
        else:
            beside, made = "used", (along.props, along.since)
        log.info("vsphere vm cloned", vcenter=vcenter, vm=spec.name, clone_mode=plan.mode, read_beside_task=beside)
        return vm, plan.mode, plan.message, made

    def _configured(self, index: find.VMIndex, idx: InventoryIndex, spec: VMSpec, plan: clone.ClonePlan,
                    template_props: dict[str, Any]) -> clone.ClonePlan:
        """``plan`` carrying the whole configuration (``clone.with_config``): the template's
        hardware converged to ``spec`` (``clone.hardware_spec``) with a MAC chosen for every NIC
        whose spec gives none (``macs``; reserved in ``index`` until the VM is read), and the
        guestinfo naming those MACs. Raises InvalidSpec like the converge (before any clone), and
        InvalidSpec with reason ``MacAddressConflict`` when a MAC the spec gives is another VM's of
        this vCenter or given to two NICs (issue F5: vCenter does not check manual MACs, ADR 0014)."""
        given = [(n.name, n.mac_address.lower()) for n in spec.nics if n.mac_address]
        owners = index.mac_owners((mac for _, mac in given), spec.uid)
        seen: dict[str, str] = {}
        for name, mac in given:
            other = seen.setdefault(mac, name)
            if other != name:
                raise InvalidSpec(f"NICs {other!r} and {name!r} are given the same macAddress {mac}: give each NIC its own",
                                  reason=macs.CONFLICT_REASON, public=True)
            if mac in owners:
                raise InvalidSpec(f"NIC {name!r}: macAddress {mac} is already used by {owners[mac]} of this vCenter; "
                                  "nothing was cloned: give the NIC another macAddress, or none to let banlieue choose "
                                  "a free one (re-checked every 60 s)", reason=macs.CONFLICT_REASON, public=True)
        chosen = iter(index.reserve_macs(spec.uid, sum(1 for n in spec.nics if not n.mac_address)))
        planned = replace(spec, nics=tuple(n if n.mac_address else replace(n, mac_address=next(chosen))
                                           for n in spec.nics))
        try:
            # hardware_spec edits the devices it changes: a copy, the cached template read stays as read.
            hardware, nic_macs = clone.hardware_spec(idx, planned, copy.deepcopy(template_props),
                                                     plan.mode == "linkedClone")
            pairs = [(n, m) for n, m in zip(spec.nics, nic_macs, strict=True) if m is not None]
            want = self._guestinfo(spec, pairs)
        except BackendError:
            index.release_macs(spec.uid)
            raise
        return clone.with_config(plan, hardware, want)

    async def _clone_outcome(self, conn: Connection, spec: VMSpec) -> tuple[tuple[Any, VMInfo] | None, Any, str]:
        """Resolve a clone this process started and lost track of, by its task: (VM, VMInfo) when
        it succeeded, None when it failed or vCenter forgot the task (clone again). Raises
        Transient CloneOutcomeUnknown while the task is queued or running (never a second clone)."""
        run = self._runner(conn)
        vcenter = self.sessions.endpoint_for(conn).label
        task, mode, message = self._clone_tasks[(vcenter, spec.uid)]

        def read(s: Session) -> Any:
            try:
                found = retrieve_objects(s.content, [task], vim.Task, ["info.state", "info.result", "info.key"])
            except vmodl.fault.ManagedObjectNotFound:
                return None
            return found[0] if found else None

        info = await run(read)
        state = str(info.get("info.state")) if info is not None else ""
        if state in ("queued", "running"):
            raise Transient(f"clone of {spec.name!r}: its task {info.moref} is still running; not cloning again",
                            reason=CLONE_OUTCOME_UNKNOWN)
        self._clone_tasks.pop((vcenter, spec.uid), None)
        vm = info.get("info.result") if state == "success" else None
        if vm is None:
            log.info("vsphere clone task ended without a VM; cloning again", vcenter=vcenter, vm=spec.name, state=state or "forgotten")
            return None, spec.clone_mode, ""
        self._vm_index(conn).put(spec.uid, vm)
        got = await run(lambda s: find.read_vm(s.content, vm, None))
        if got is None or got.uid != spec.uid:
            return None, spec.clone_mode, ""
        log.info("vsphere clone resolved by its task", vcenter=vcenter, vm=spec.name, task=info.moref)
        return (vm, got), mode, message

    async def clone_task_state(self, conn: Connection, key: str) -> str:
        task = vim.Task(key)

        def read(s: Session) -> str:
            try:
                found = retrieve_objects(s.content, [task], vim.Task, ["info.state"])
            except vmodl.fault.ManagedObjectNotFound:
                return "unknown"
            return str(found[0].get("info.state")) if found else "unknown"

        return await self.sessions.run(conn, read)

    async def destroy_duplicate(self, conn: Connection, uid: str, moref: str) -> bool:
        """Destroy the VM ``moref`` carrying ``uid`` that is not the one kept, after reading it
        again: only when it still carries ``uid``, is not the index's mapping (the VM kept) and
        is provably ours and empty (``duplicates.removable``). True when destroyed (or gone),
        False when left; raises like ``destroy_vm``."""
        run = self._runner(conn)
        index = self._vm_index(conn)
        vcenter = self.sessions.endpoint_for(conn).label

        def check(s: Session) -> tuple[Any, VMInfo | None, str]:
            vm = vim.VirtualMachine(moref, s.stub)
            info = find.read_vm(s.content, vm, None)
            if info is None:
                return vm, None, ""
            if info.uid != uid:
                return vm, info, f"it carries uid {info.uid}, not {uid}"
            kept = index.get(uid)
            if kept is None or moid(kept) == moref:
                return vm, info, "it is the VM kept for the machine"
            ok, why = duplicates.removable(s.content, vm, info)
            return vm, info, "" if ok else why

        vm, info, why = await run(check)
        if info is None:
            index.forget(uid, moref)
            return True
        if why:
            log.warning("vsphere duplicate vm left", vcenter=vcenter, vm=info.name, moref=moref, uid=uid, why=why)
            return False
        try:
            task = await run(lambda s: vm.Destroy_Task())
            await wait_task(run, task, f"destroy duplicate {info.name}", self.task_timeout, conn.provider)
        except NotFound:
            pass  # already gone
        except BackendError as exc:
            if "ManagedObjectNotFound" not in str(exc) and exc.reason != "NotFound":
                raise
        index.forget(uid, moref)
        log.warning("vsphere duplicate vm destroyed", vcenter=vcenter, vm=info.name, moref=moref, uid=uid,
                    instance_uuid=info.instance_uuid)
        return True

    async def clone_sent_state(self, conn: Connection, uid: str, name: str, since: datetime) -> str:
        """Resolve a clone recorded as started at ``since`` whose task key was never recorded
        (the process died in the first seconds of the clone, or the clone request's answer was
        lost with the vCenter that was to give it), by vCenter's event history
        (``events.clones_started``) and its queue:

        - no clone into ``name`` started since then: while a clone task is queued or running
          anywhere on the vCenter (``TaskManager.recentTask``; a queued task has no event yet,
          and may be this one), "unknown" (the caller waits, at most the task timeout); with
          none, the request never became a task, or its task ended before vCenter's history
          was lost (a restarted vcsim has none): the VM is looked up by ``uid`` with a full scan;
        - a clone into ``name`` started: "running" while a clone task runs on its source (never
          a second clone: it may be this one), else the full scan.

        The scan gives "success" when the VM is there, "error" when it is not (clone again at
        once). Before, no clone in the history meant "unknown" whatever the queue: a vCenter
        restarted under a clone (``make dev`` restarts a killed simulator) held the machine for
        the whole task timeout, 10 minutes, with the vCenter answering (new-user review, issue
        22 session 14). 2-3 calls when nothing was started, 3-4 per source otherwise, plus the
        scan."""
        run = self._runner(conn)
        started = await run(lambda s: events.clones_started(s.content, name, since))
        if not started:
            queued = await run(lambda s: tasks.in_flight(s.content, s.content.taskManager, tasks.CLONE_TASKS,
                                                         vim.TaskManager))
            if queued:
                log.info("vsphere clone without a recorded task: not in the history, clones in flight",
                         vm=name, tasks=[moid(t) for t in queued])
                return "unknown"
            found = await self._locate(conn, uid, trust_miss=False)
            log.info("vsphere clone without a recorded task resolved", vm=name, found=found is not None)
            return "success" if found is not None else "error"
        sources = {moid(e.source): e.source for e in started}

        def running(s: Session) -> list[str]:
            return [ref for ref, src in sources.items() if tasks.in_flight(s.content, src, tasks.CLONE_TASKS)]

        busy = await run(running)
        if busy:
            log.info("vsphere clone without a recorded task is running", vm=name, sources=busy)
            return "running"
        found = await self._locate(conn, uid, trust_miss=False)
        return "success" if found is not None else "error"

    async def set_power_state(
        self,
        conn: Connection,
        uid: str,
        state: PowerState,
        off_mode: PowerOffMode = "trySoft",
        soft_timeout: float = 300.0,
        hurry: bool = True,
    ) -> VMInfo:
        run = self._runner(conn)
        nets = self._nets(conn)  # port group names in the VMInfo returned, as find_vm gives them
        fresh = self._fresh.pop(uid, None)
        # create_vm read this VM moments ago in this process (the usual create-then-power-on of
        # one reconcile): no second read. A stale power state fails the call or its task
        # (InvalidPowerState), and then the VM is read and the call made again, once.
        use_fresh = fresh is not None and time.monotonic() - fresh[0] < FRESH_SECONDS
        if fresh is not None and use_fresh:
            vm, before = fresh[1], fresh[2]
        else:
            found = await self._locate(conn, uid)
            if found is None:
                raise NotFound(f"no VM carries uid {uid}", reason="VMNotFound", public=True)
            vm, before = found
        if not use_fresh and await tasks.wait_in_flight(run, vm, tasks.POWER_TASKS, f"earlier power task on {before.name}",
                                                        self.task_timeout, conn.provider):
            # A power task sent earlier (an answer lost, a process that died) ran on: its result
            # is the starting point, never a second call on top of it.
            now = await run(lambda s: find.read_vm(s.content, vm, nets))
            if now is None:
                raise NotFound(f"VM for {uid} disappeared", reason="VMNotFound", public=True)
            before = now
        if before.power_state == state:
            return before
        # A power change leaves the configuration (changeVersion) as it was: the kept read stays,
        # held from lookups while the task runs, updated by the watch meanwhile (a guest's
        # address at power-on), and takes the new power state at the end (``VMIndex.release``).
        index = self._vm_index(conn)
        index.hold(before.moref)
        reached: PowerState | None = None
        try:
            info = await self._set_power(conn, uid, vm, before, state, off_mode, soft_timeout, use_fresh, nets, hurry)
            reached = info.power_state if info.power_state == state else None
        finally:
            index.release(before.moref, reached)
        return info

    async def _set_power(
        self, conn: Connection, uid: str, vm: Any, before: VMInfo, state: PowerState, off_mode: PowerOffMode,
        soft_timeout: float, use_fresh: bool, nets: InventoryIndex | None, hurry: bool = True,
    ) -> VMInfo:
        """``set_power_state`` once the VM is known and not in ``state`` yet."""
        run = self._runner(conn)
        index = self._vm_index(conn)
        powered_on: asyncio.Event | None = None
        remove: Callable[[], None] = lambda: None  # noqa: E731
        if state == "PoweredOn" and index.authoritative:
            # The change watch reporting the VM powered on ends the PowerOnVM_Task: no task polls
            # (issue 22), unless the watch has not reported it within ``tasks.SIGNAL_FALLBACK``.
            event = powered_on = asyncio.Event()
            loop = asyncio.get_running_loop()

            def notify() -> None:
                loop.call_soon_threadsafe(event.set)

            remove = index.on_powered_on(before.moref, notify, hurry)
        # Not hurried, the watch reports within its longest gap: the task is polled only after that.
        fallback = tasks.SIGNAL_FALLBACK if hurry else self.watch_poll_gap_max + UNHURRIED_SIGNAL_MARGIN
        try:
            await power.set_power(run, vm, state, off_mode, soft_timeout, self.task_timeout, conn.provider,
                                  before.power_state, powered_on, fallback)
        except Transient as exc:
            if exc.reason == "PowerOffPending":
                raise
            # The call may have reached vCenter: its outcome is read from runtime.powerState (and
            # a task it started is waited for) before anything is sent again.
            await tasks.wait_in_flight(run, vm, tasks.POWER_TASKS, f"power task on {before.name}", self.task_timeout,
                                       conn.provider)
            if await power.power_state(run, vm) != state:
                raise Transient(f"power {state} of {before.name}: outcome unknown ({exc}); not sent again before the "
                                "VM's power state is read", reason="PowerOutcomeUnknown") from exc
        except BackendError as exc:
            if not use_fresh or (exc.reason != "InvalidPowerState" and not isinstance(exc, TaskFailed)):
                raise
            return await self.set_power_state(conn, uid, state, off_mode, soft_timeout, hurry)
        finally:
            remove()
        if use_fresh and before.power_state == "PoweredOff" and state == "PoweredOn":
            # Powering on changes nothing else VMInfo reports (a guest reports addresses later,
            # through the change watch): the read-back would return this.
            return replace(before, power_state="PoweredOn")
        info = await run(lambda s: find.read_vm(s.content, vm, nets))
        if info is None:
            raise NotFound(f"VM for {uid} disappeared", reason="VMNotFound", public=True)
        return info

    async def destroy_vm(
        self, conn: Connection, uid: str, off_mode: PowerOffMode = "trySoft", soft_timeout: float = 300.0
    ) -> bool:
        """Power off (``off_mode``) and destroy the VM carrying ``uid``, then every other VM seen
        carrying it (``find.VMIndex.others``); False when there is none.
        A destroy or power task already running on the VM (sent by an earlier call whose answer
        was lost, or by a process that died) is waited for, never sent a second time; a
        Destroy_Task whose outcome is not known raises Transient ``DestroyOutcomeUnknown``, so a
        destroy is reported done only once the task succeeded or the VM is gone (ADR 0012)."""
        found = await self._locate(conn, uid, trust_miss=False)
        if found is None:
            return False
        vm, info = found
        self._vm_index(conn).invalidate(info.moref)  # powered off and destroyed from here on
        run = self._runner(conn)
        vcenter = self.sessions.endpoint_for(conn).label
        kinds = tasks.DESTROY_TASKS | tasks.POWER_TASKS
        if await tasks.wait_in_flight(run, vm, kinds, f"earlier task on {info.name}", self.task_timeout, conn.provider):
            now = await run(lambda s: find.read_vm(s.content, vm, None))
            if now is None:
                self._forget_vm(conn, vcenter, uid)
                log.info("vsphere vm destroyed by an earlier task", vcenter=vcenter, vm=info.name)
                return True
            info = now
        if info.power_state != "PoweredOff":
            await power.set_power(
                run, vm, "PoweredOff", off_mode, soft_timeout, self.task_timeout, conn.provider, info.power_state
            )
            if await power.power_state(run, vm) != "PoweredOff":
                raise Transient(f"guest {info.name} has not shut down within {soft_timeout:.0f} s", reason="PowerOffPending", public=True)
        try:
            task = await run(lambda s: vm.Destroy_Task())
            await wait_task(run, task, f"destroy {info.name}", self.task_timeout, conn.provider)
        except NotFound:
            pass  # already gone: success
        except Transient as exc:
            # The call may have reached vCenter, or its task runs on unfollowed: done only once
            # the VM is gone; the next call waits for a running destroy instead of sending one.
            if await run(lambda s: find.read_vm(s.content, vm, None)) is not None:
                raise Transient(f"destroy of {info.name}: outcome unknown ({exc}); the VM is still there",
                                reason="DestroyOutcomeUnknown") from exc
        except BackendError as exc:
            if "ManagedObjectNotFound" not in str(exc) and exc.reason != "NotFound":
                raise
        # Its MACs may be given to another machine now (``_configured`` refuses a MAC in use).
        self._vm_index(conn).forget_macs(info.moref)
        self._forget_vm(conn, vcenter, uid)
        log.info("vsphere vm destroyed", vcenter=vcenter, vm=info.name)
        if self._vm_index(conn).get(uid) is not None:
            # Another VM seen carrying this UID (ADR 0012 decision 9): deleting the object
            # destroys every VM that carries it, each read again first.
            await self.destroy_vm(conn, uid, off_mode, soft_timeout)
        return True

    def _forget_vm(self, conn: Connection, vcenter: str, uid: str) -> None:
        self._vm_index(conn).forget(uid)
        self._vm_index(conn).release_macs(uid)
        self._delivered.get(vcenter, set()).discard(uid)
        self._fresh.pop(uid, None)

    def endpoint_label(self, conn: Connection) -> str:
        """``host:port`` of ``conn``'s vCenter (the label of metrics and reconnect notices).
        Raises BackendError (InvalidEndpoint)."""
        return SessionPool.label_of(conn)

    def add_reconnect_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """``callback(label)`` once a vCenter that stopped answering answers again (any SOAP
        round trip: the change watch's retries, a session login, a reconciler's call); called
        from a pool thread, it must not block. Returns the remover. See ``session``."""
        return self.sessions.add_reconnect_listener(callback)

    def add_refused_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """``callback(provider)`` (``namespace/name``) when vCenter refuses a login with that
        Provider's credentials (``InvalidLogin``: a password changed in vCenter); called from a
        pool thread, it must not block. Returns the remover. See ``session``."""
        return self.sessions.add_refused_listener(callback)

    def unreachable_since(self, conn: Connection) -> float | None:
        """Wall-clock seconds (epoch) since which ``conn``'s vCenter has not answered its
        reachability probe (``health``), or None while it answers."""
        return self.sessions.unreachable_since(conn)

    def seconds_since_answer(self, conn: Connection) -> float | None:
        """Seconds since ``conn``'s vCenter last answered a request of this process's sessions,
        or None when none was answered yet (``SessionPool.seconds_since_answer``)."""
        return self.sessions.seconds_since_answer(conn)

    def add_unreachable_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """``callback(label)`` when a vCenter that answered stops answering (a round trip
        refused, reset or timed out); called from a pool or watch thread, it must not block.
        Returns the remover. See ``session``."""
        return self.sessions.add_unreachable_listener(callback)

    async def watch(self, conn: Connection) -> AsyncIterator[VMChange]:
        sess = await self.sessions.checked_session(conn)
        async for change in watch_vms(sess, self._vm_index(conn), self.watch_max_wait, self.watch_poll_gap,
                                     self.watch_poll_gap_max):
            yield change

    async def close(self) -> None:
        await self.sessions.close()


def as_backend(backend: VSphereBackend) -> Backend:
    """Static proof (checked by mypy --strict) that VSphereBackend satisfies the Backend protocol."""
    return backend
