"""VSphereMachine controller of the ``provider vsphere`` role (SPEC §3, §4; field manager
``banlieue.io/provider-vsphere``): gather -> ``vspheremachine.decide.decide`` -> execute.

One reconcile walks the machine as far as it can: decide, do the one thing the plan asks (add
the finalizer, connect and look the VM up, clone/converge, power, destroy), feed the outcome
back into the snapshot and decide again (at most ``MAX_STEPS`` times). Writes per machine on
the happy path: status ``Cloning`` before the clone (1), ``spec.providerID`` (a merge patch of
that field alone, guarded by the read resourceVersion, which cannot re-create a deleted
object, 1), final status (1); plus the finalizer (1) only when the machine came
without it (the VirtualMachine controller's apply carries it, ADR 0011; CAPI-created machines do
not), and ``WaitingForIPAddress`` (1) only when the IP comes more than
``PROGRESS_WRITE_INTERVAL_SECONDS`` after the clone started (progress-only status changes are
coalesced, ``vspheremachine.progress``). Status is written only when it differs from the stored
one (both normalised through the model). Backend errors never escape as exceptions except when the plan asks for a retry
with backoff (``VSphereMachineRetry``, after the status has been written).

Public API: ``setup(mgr, ctx) -> Controller`` (name ``vspheremachine``); indexes
``INDEX_UID``, ``INDEX_INSTANCE_UUID``, ``INDEX_BOOTSTRAP_SECRET`` on VSphereMachine
(``vspheremachine.sources``). Reasons: see ``vspheremachine.decide``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from banlieue.api.infrastructure import VSphereMachine, VSphereMachineStatus
from banlieue.api.provider import Provider
from banlieue.backends.base import Backend, BackendError, Connection, VMInfo, VMSpec
from banlieue.reconcilers.connection import ConnectionConfigError
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    ANNOTATION_CLONE_TASK,
    CAPI_CLUSTER,
    CAPI_LABEL_CLUSTER_NAME,
    CAPI_LABEL_CONTROL_PLANE,
    CAPI_LABEL_WATCH_FILTER,
    CAPI_MACHINE,
    FINALIZER_VSPHERE_MACHINE,
    PROVIDER,
    SECRET,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.last_connection import last_known, remembered_connection_for
from banlieue.reconcilers.parsed import ParsedCache, parse_provider
from banlieue.reconcilers.provider_changes import PROVIDER_CAPACITY_CHANGED, PROVIDER_CHANGED
from banlieue.reconcilers.referenced import referenced
from banlieue.reconcilers.refused import hear_refusals
from banlieue.reconcilers.same_object import Replaced, write_same_object
from banlieue.reconcilers.vspheremachine.decide import (
    Action,
    Event,
    Failure,
    Plan,
    Snapshot,
    clone_started,
    decide,
    missing_object,
    power_state_event,
    ready_reason,
    task_failed,
    task_failure_retry_seconds,
    waiting_for_cluster_api,
)
from banlieue.reconcilers.vspheremachine.messages import condition_message
from banlieue.reconcilers.vspheremachine.placement import (
    DomainChoice,
    PlacementError,
    bootstrap_secret_ref,
    capi_failure_domain,
    capi_machine_owner,
    choose_cluster_failure_domain,
    is_capi_path,
    machine_owns_back,
    read_bootstrap,
)
from banlieue.reconcilers.vspheremachine.power_ons import PowerOns
from banlieue.reconcilers.vspheremachine.sources import (
    INDEX_BOOTSTRAP_SECRET,
    INDEX_INSTANCE_UUID,
    INDEX_UID,
    CapiWatch,
    MapFuncs,
    VMWatch,
    register_indexes,
)
from banlieue.reconcilers.vspheremachine.vcenter_slots import (
    VCenterSlots,
    cap_for_workers,
    slot_key,
    vm_exists,
)
from banlieue.reconcilers.vspheremachine.writes import OwnWrites, recordable
from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import NotFound
from banlieue.runtime.log import get_logger
from banlieue.runtime.manager import Manager
from banlieue.runtime.predicate import watch_filter_predicate
from banlieue.runtime.reconcile import Request, Result, RetryError

__all__ = ["INDEX_BOOTSTRAP_SECRET", "INDEX_INSTANCE_UUID", "INDEX_UID", "VSphereMachineReconciler", "VSphereMachineRetry", "setup"]

log = get_logger("banlieue.reconcilers.vspheremachine.controller")

MAX_STEPS = 8
"""Decide/act rounds per reconcile (finalizer, connect, converge, power and the final status)."""
CAPI_NOT_SYNCED_REQUEUE = 2.0
"""Seconds to wait when a CAPI-path machine arrives before the CAPI caches are synced."""
VCENTER_BUSY_REQUEUE = 1.0
"""Seconds before retrying a reconcile deferred because its vCenter holds all its slots, when
no wake channel runs (``vspheremachine.vcenter_slots``; the controller built by ``setup`` runs one, and then a
deferred request waits in line instead)."""


class VSphereMachineRetry(RetryError):
    """Raised after the status is written when the plan asks for a retry with backoff (logged
    without a traceback: the condition already says what failed)."""


class VSphereMachineReconciler:
    """Reconciles one VSphereMachine (see the module docstring). ``capi`` answers whether the
    CAPI Machine/Cluster caches can be read (None: CAPI is never consulted). ``slots`` caps
    the workers one vCenter may hold (default: ``cap_for_workers(ctx.max_concurrent_reconciles)``
    per Connection ``endpoint``); a reconcile that finds its vCenter full returns before any
    backend call: ``Result()`` in the vCenter's waiting list while the slots' wake channel runs,
    else ``Result(requeue_after=VCENTER_BUSY_REQUEUE)``."""

    def __init__(self, ctx: RoleContext, backend: Backend, capi: CapiWatch | None = None,
                 writes: OwnWrites | None = None, slots: VCenterSlots | None = None) -> None:
        self.ctx = ctx
        self.slots = slots if slots is not None else VCenterSlots(cap_for_workers(ctx.max_concurrent_reconciles))
        # Power-ons followed outside the vCenter slot while their wake channel runs (power_ons).
        self.power_ons = PowerOns()
        self.backend = backend
        self.capi = capi
        self.writes = writes if writes is not None else OwnWrites()
        # Ready reason of the last transition Event recorded per UID: the same reason twice is
        # no transition (a failing retry loop must not post an Event per attempt).
        self._last_transition: dict[str, str] = {}
        # Last status / providerID this process wrote, by object UID: a reconcile that runs on a
        # cache not yet updated by our own write must not write the same thing again (only this
        # role writes VSphereMachine status and spec.providerID).
        self._written_status: dict[str, dict[str, Any]] = {}
        self._written_provider_id: dict[str, str] = {}
        # Spec this process last converged each VM to (create succeeded), by UID, until a stored
        # status says provisioned: a deferred progress status (ADR 0011) must not cost a second
        # converge (Snapshot.converged_spec).
        self._converged: dict[str, VMSpec] = {}
        # Consecutive create attempts that failed because a named vCenter object (template,
        # pool, folder, datastore, network) is missing, by UID: the back-off of the re-check
        # (Snapshot.missing_retries).
        self._missing: dict[str, int] = {}
        # Consecutive clones vCenter refused (CloneFailed), by UID: the back-off of the next
        # clone (Snapshot.task_failures, decide.TASK_FAILURE_FIRST_RETRY_SECONDS).
        self._task_failures: dict[str, int] = {}
        # uid -> when a refused clone may be sent again (``Snapshot.clone_not_before``).
        self._clone_not_before: dict[str, datetime] = {}
        # Providers validated once per resourceVersion (every reconcile reads its namespace's).
        self._parsed = ParsedCache()
        # Failure domain chosen by this process for a CAPI machine with none (issue 17), by UID,
        # until its status shows it: counted for the next choice at once, before the Cloning
        # status (which records it) is written, so concurrent workers spread machines too.
        self._chosen_domain: dict[str, str] = {}
        # The machine as returned by the clone-task annotation patch, by UID, until the
        # reconcile that made it takes it as its copy (``_record_clone_task``).
        self._annotated: dict[str, dict[str, Any]] = {}

    # --- gather -------------------------------------------------------------------------
    def _in_scope(self, raw: dict[str, Any]) -> bool:
        meta = raw.get("metadata") or {}
        if self.ctx.namespace and meta.get("namespace") != self.ctx.namespace:
            return False
        if self.ctx.watch_filter and (meta.get("labels") or {}).get(CAPI_LABEL_WATCH_FILTER) != self.ctx.watch_filter:
            return False
        return True

    async def _gather(self, machine: VSphereMachine) -> Snapshot | None:
        cache = self.ctx.cache
        ns = machine.metadata.namespace
        capi = is_capi_path(machine, CAPI_LABEL_CLUSTER_NAME)
        capi_machine = cluster = None
        if capi:
            if self.capi is None or not self.capi.ready():
                return None
            owner = capi_machine_owner(machine)
            capi_machine = cache.get(CAPI_MACHINE, owner, ns) if owner else None
            if capi_machine is not None and not machine_owns_back(machine, capi_machine):
                # Not that Machine's infrastructure machine: never its bootstrap data (issue 23).
                log.warning("owner Machine does not reference this VSphereMachine", machine=str(machine.metadata.name), owner=owner)
                capi_machine = None
            cluster_name = (machine.metadata.labels or {}).get(CAPI_LABEL_CLUSTER_NAME) or ((capi_machine or {}).get("spec") or {}).get("clusterName")
            cluster = cache.get(CAPI_CLUSTER, str(cluster_name), ns) if cluster_name else None
        providers = tuple(p for p in (parse_provider(raw, self._parsed) for raw in cache.list(PROVIDER, ns)) if p is not None)
        bootstrap = bootstrap_error = None
        ref = bootstrap_secret_ref(machine, capi_machine, capi)
        if ref is not None:
            # A direct GET of the referenced name (reconcilers.referenced): Secrets are never listed.
            # Once the VM exists (instanceUUID recorded) the copy read before will do and is not
            # re-read periodically: CAPI never changes a Machine's bootstrap data once written.
            settled = bool(machine.status and machine.status.instance_uuid)
            secret = await referenced(cache).fetch(self.ctx.client, SECRET, ref[0], ns, settled=settled)
            if secret is None:
                bootstrap_error = f"bootstrap data Secret {ns}/{ref[0]} not found"
            else:
                try:
                    bootstrap = read_bootstrap(secret, ref[1])
                except PlacementError as err:
                    bootstrap_error = err.message
        domain_choice = None
        if capi and cluster is not None and self._needs_domain(machine, capi_machine):
            domain_choice = self._choose_domain(machine, cluster, providers)
        return Snapshot(
            machine=machine, now=self.ctx.now(), capi_machine=capi_machine, cluster=cluster, providers=providers, domain_choice=domain_choice,
            bootstrap=bootstrap, bootstrap_error=bootstrap_error, clone_grace_seconds=self.ctx.vsphere_task_timeout,
            known_connections=last_known(cache).known(ns) if machine.metadata.deletion_timestamp is not None else frozenset(),
            converged_spec=self._converged_spec(machine), spec_error=self.backend.spec_error,
            guest_data_drifted=self.backend.guest_data_drifted,
            missing_retries=self._missing.get(machine.metadata.uid or "", 0),
            task_failures=self._task_failures.get(machine.metadata.uid or "", 0),
            clone_not_before=self._clone_not_before.get(machine.metadata.uid or ""),
        )

    def _needs_domain(self, machine: VSphereMachine, capi_machine: Mapping[str, Any] | None) -> bool:
        """A CAPI machine that banlieue must place itself: no Machine.spec.failureDomain, no
        spec.failureDomain, no providerRef, and not placed yet (status.failureDomain)."""
        uid = machine.metadata.uid or ""
        if machine.status is not None and machine.status.failure_domain:
            self._chosen_domain.pop(uid, None)  # recorded in the status now
            return False
        if machine.metadata.deletion_timestamp is not None:
            return False
        ref = machine.spec.provider_ref
        return not (capi_failure_domain(capi_machine) or machine.spec.failure_domain or (ref is not None and ref.name))

    def _choose_domain(self, machine: VSphereMachine, cluster: Mapping[str, Any], providers: tuple[Provider, ...]) -> DomainChoice:
        """``choose_cluster_failure_domain`` over the machines of the same Cluster in the cache
        (their status.failureDomain, or what this process chose for them)."""
        uid = machine.metadata.uid or ""
        if uid in self._chosen_domain:
            return DomainChoice(self._chosen_domain[uid])
        cluster_name = str((cluster.get("metadata") or {}).get("name"))
        used: Counter[str] = Counter()
        for raw in self.ctx.cache.list(VSPHERE_MACHINE, machine.metadata.namespace):
            meta = raw.get("metadata") or {}
            if (meta.get("labels") or {}).get(CAPI_LABEL_CLUSTER_NAME) != cluster_name or meta.get("uid") == uid:
                continue
            fd = ((raw.get("status") or {}).get("failureDomain")) or self._chosen_domain.get(str(meta.get("uid")))
            if fd:
                used[str(fd)] += 1
        choice = choose_cluster_failure_domain(cluster, providers, used, memory_mib=machine.spec.memory_mib,
                                               control_plane=CAPI_LABEL_CONTROL_PLANE in (machine.metadata.labels or {}))
        if choice.name is not None:
            self._chosen_domain[uid] = choice.name
        return choice

    def _converged_spec(self, machine: VSphereMachine) -> VMSpec | None:
        uid = machine.metadata.uid or ""
        status = machine.status
        if status is not None and status.initialization is not None and status.initialization.provisioned:
            self._converged.pop(uid, None)  # recorded in the status now: the memory is not needed
            return None
        return self._converged.get(uid)

    # --- execute ------------------------------------------------------------------------
    async def _connection(self, snap: Snapshot, plan: Plan) -> tuple[Snapshot, Connection | None]:
        """The connection the plan asks for (no backend call); None with the snapshot updated
        when there is none."""
        if plan.last_known is not None:
            # Deleting after the Secret (or the Provider) went: the last connection built here.
            known = last_known(self.ctx.cache).get(f"{snap.machine.metadata.namespace}/{plan.last_known}")
            if known is None:
                return replace(snap, known_connections=snap.known_connections - {plan.last_known}), None
            conn = known
        else:
            assert plan.provider is not None
            await referenced(self.ctx.cache).fetch_provider(self.ctx.client, plan.provider)
            try:
                conn = remembered_connection_for(plan.provider, self.ctx.cache)
            except ConnectionConfigError as err:
                return replace(snap, connection_error=(err.reason, err.message)), None
        return snap, conn

    async def _look_up(self, snap: Snapshot, conn: Connection) -> Snapshot:
        status = snap.machine.status
        try:
            vm = await self.backend.find_vm(conn, snap.machine.metadata.uid or "", status.instance_uuid if status else None)
            task_key = (snap.machine.metadata.annotations or {}).get(ANNOTATION_CLONE_TASK)
            clone_task = None
            started = clone_started(status) if vm is None and status is not None else None
            if started is not None and task_key:
                # A clone recorded as started, no VM yet: its task says whether it still runs
                # (wait, whatever the time), failed (clone again) or is forgotten (ADR 0012).
                clone_task = await self.backend.clone_task_state(conn, task_key)
            elif started is not None:
                # No task key: the process that sent the clone died before recording it (the
                # first seconds of a clone). vCenter's event history tells whether a clone into
                # this VM's name started since, and its source whether one still runs (ADR 0012).
                clone_task = await self.backend.clone_sent_state(conn, snap.machine.metadata.uid or "",
                                                                 snap.machine.metadata.name or "", started)
        except BackendError as err:
            # The detail stays in the log (issue 23): the condition gets condition_message's.
            log.info("vsphere lookup failed", machine=str(snap.machine.metadata.name), reason=err.reason, error=str(err))
            return replace(snap, looked_up=True, failure=Failure("lookup", err.reason, condition_message("lookup", err)))
        return replace(snap, looked_up=True, vm=vm, clone_task=clone_task)

    async def _record_clone_task(self, snap: Snapshot, key: str) -> None:
        """Annotate the machine with its clone task's key (``ANNOTATION_CLONE_TASK``) the moment
        vCenter returned it, so that a process started after this one dies can resolve it."""
        meta = snap.machine.metadata
        # Only onto the machine read (a merge patch honours metadata.resourceVersion as the
        # apply does); the object returned goes on as the reconcile's copy (``_annotated``), so
        # the status written after the clone does not trip over this write's version.
        read = {"metadata": meta.to_wire()}
        written = await write_same_object(
            self.ctx.client, VSPHERE_MACHINE, read, {"metadata": {"annotations": {ANNOTATION_CLONE_TASK: key}}},
            lambda b: self.ctx.client.patch(VSPHERE_MACHINE, meta.name or "", meta.namespace, b))
        self._annotated[meta.uid or ""] = written
        self.writes.wrote(written, status=False)

    async def _act(self, snap: Snapshot, action: Action, conn: Connection) -> Snapshot:
        uid = snap.machine.metadata.uid or ""
        try:
            if action.kind == "create":
                assert action.spec is not None
                result = await self.backend.create_vm(conn, action.spec,
                                                      on_clone_task=lambda key: self._record_clone_task(snap, key))
                self._converged[uid] = action.spec
                if result.message:
                    self._event(snap, Event("Normal", "CloneModeChanged", result.message))
                return replace(snap, vm=result.vm, converged=True, failure=None)
            if action.kind == "power" and action.state == "PoweredOn" and self.power_ons.waking:
                return self._power_on(snap, conn)
            if action.kind == "power":
                info = await self.backend.set_power_state(conn, uid, action.state, action.off_mode, action.soft_timeout)
                # A refused hardware change stays known to decide (HardwareChangePending): the
                # power request went ahead of it, and the change is not tried again this pass.
                kept = snap.failure if snap.failure is not None and snap.failure.step == "create" else None
                return replace(snap, vm=info, powered=True, failure=kept)
            if action.kind == "destroy_duplicate":
                return await self._destroy_duplicate(snap, action.moref, conn)
            destroyed = await self.backend.destroy_vm(conn, uid, action.off_mode, action.soft_timeout)
            return replace(snap, vm=None, destroyed=destroyed, failure=None)
        except BackendError as err:
            log.info("vsphere action failed", machine=str(snap.machine.metadata.name), action=action.kind, reason=err.reason, error=str(err))
            if action.kind == "create" and err.reason == "VMNotFound":
                # The backend returned this UID's VM before and it is gone now (removed by hand,
                # or it vanished while configured): VMNotFound, never a second clone.
                return replace(snap, vm=None, failure=Failure("create", "VMNotFound", condition_message("create", err)))
            assert action.kind != "destroy_duplicate"  # handled by _destroy_duplicate
            return replace(snap, failure=Failure(action.kind, err.reason, condition_message(action.kind, err)))

    def _power_on(self, snap: Snapshot, conn: Connection) -> Snapshot:
        """Send the machine's power-on and follow it in the background (``power_ons``): the
        reconcile goes on to write ``PoweringOn`` and gives back its worker and vCenter slot.
        The failure of the last one is raised (BackendError) as a waited-for power-on's would
        have been. Never called while one is followed: ``_reconcile`` returns before."""
        meta = snap.machine.metadata
        uid = meta.uid or ""
        failed = self.power_ons.take(uid)
        if failed is not None:
            raise failed
        # A refused hardware change stays known to decide (HardwareChangePending), as below.
        kept = snap.failure if snap.failure is not None and snap.failure.step == "create" else None

        def powered(info: VMInfo) -> None:
            self._event(snap, power_state_event(info))

        self.power_ons.start(
            Request(meta.namespace or "", meta.name or ""), uid,
            lambda: self.backend.set_power_state(conn, uid, "PoweredOn", hurry=False), powered)
        return replace(snap, power_pending=True, failure=kept)

    async def _destroy_duplicate(self, snap: Snapshot, moref: str, conn: Connection) -> Snapshot:
        """``Backend.destroy_duplicate`` of the other VM ``moref`` carrying the machine's UID;
        the snapshot records it destroyed, or left (not removable when read again, or the
        destroy failed: reported with why, tried again at the next reconcile)."""
        assert snap.vm is not None
        [dup] = [d for d in snap.vm.duplicates if d.moref == moref]
        try:
            gone = await self.backend.destroy_duplicate(conn, snap.machine.metadata.uid or "", moref)
            why = "it changed since it was found (read again before destroying)"
        except BackendError as err:
            # The detail stays in the log (issue 23): the condition names the fault type only.
            log.info("vsphere action failed", machine=str(snap.machine.metadata.name), action="destroy_duplicate",
                     reason=err.reason, error=str(err))
            gone, why = False, f"destroying it failed ({err.reason}); the log has vCenter's detail"
        if gone:
            vm = replace(snap.vm, duplicates=tuple(d for d in snap.vm.duplicates if d.moref != moref))
            return replace(snap, vm=vm, duplicates_destroyed=(*snap.duplicates_destroyed, dup))
        left = replace(dup, removable=False, why=why)
        vm = replace(snap.vm, duplicates=tuple(left if d.moref == moref else d for d in snap.vm.duplicates))
        return replace(snap, vm=vm, duplicates_left=(*snap.duplicates_left, left))

    def _event(self, snap: Snapshot, event: Event) -> None:
        obj = {"apiVersion": VSPHERE_MACHINE.api_version, "kind": VSPHERE_MACHINE.kind, "metadata": snap.machine.metadata.to_wire()}
        self.ctx.recorder.event(obj, event.type, event.reason, event.message)

    async def _write_status(self, raw: dict[str, Any], status: VSphereMachineStatus) -> dict[str, Any]:
        desired = status.to_wire()
        current = VSphereMachineStatus.from_wire(raw.get("status") or {}).to_wire()
        meta = raw["metadata"]
        if desired == current:
            # The object shows it: the memo has done its job. Dropped, so it costs nothing per
            # machine once provisioned (10,000 status copies otherwise) and cannot hide a later
            # change made by someone else.
            self._written_status.pop(meta["uid"], None)
            return raw
        if self._written_status.get(meta["uid"]) == desired:
            return raw
        body = {
            "apiVersion": VSPHERE_MACHINE.api_version, "kind": VSPHERE_MACHINE.kind,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": desired,
        }
        # Only onto the object read (same UID), never onto one re-created under its name.
        written = await write_same_object(
            self.ctx.client, VSPHERE_MACHINE, raw, body,
            lambda b: self.ctx.client.apply_status(VSPHERE_MACHINE, b, field_manager=self.ctx.field_manager, force=True))
        self._written_status[meta["uid"]] = desired
        self.writes.wrote(written, status=True)
        return written

    async def _write_provider_id(self, raw: dict[str, Any], provider_id: str) -> dict[str, Any]:
        # spec.providerID alone, under this role's field manager: the VirtualMachine controller
        # applies the rest of the spec under its own, so the two never conflict. A merge patch,
        # not a server-side apply: an apply creates the object when it does not exist, and a
        # machine deleted (finalizer gone) after this reconcile read it would come back as a
        # new object carrying the old one's providerID (issue 19). The patch answers 404 then.
        meta = raw["metadata"]
        if self._written_provider_id.get(meta["uid"]) == provider_id:
            return raw
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "spec": {"providerID": provider_id}}
        written = await write_same_object(
            self.ctx.client, VSPHERE_MACHINE, raw, body,
            lambda b: self.ctx.client.patch(VSPHERE_MACHINE, meta["name"], meta["namespace"], b,
                                            field_manager=self.ctx.field_manager))
        self._written_provider_id[meta["uid"]] = provider_id
        self.writes.wrote(written, status=False)
        return written

    async def reconcile(self, request: Request) -> Result:
        """Reconcile one VSphereMachine (module docstring); ends every reconcile with
        ``slots.settle`` so a wake token this request did not use goes to the next waiter."""
        try:
            return await self._reconcile(request)
        finally:
            self.slots.settle(request)

    async def _reconcile(self, request: Request) -> Result:
        cached = self.ctx.cache.get(VSPHERE_MACHINE, request.name, request.namespace)
        if cached is None:
            return Result()
        if self.power_ons.running(str((cached.get("metadata") or {}).get("uid") or "")):
            # Its power-on is followed in the background, and its end enqueues the machine: a
            # reconcile now would only read the VM again (its kept read is held meanwhile).
            return Result()
        raw = dict(cached)
        if self.writes.cache_behind(raw):
            # Our last write is not in the cache yet: decide on the server's copy, never on one
            # older than what this process last wrote.
            try:
                raw = await self.ctx.client.get(VSPHERE_MACHINE, request.name, request.namespace)
            except NotFound:
                return Result()
            self.writes.observed(raw)
        if not self._in_scope(raw):
            return Result()
        try:
            machine = VSphereMachine.from_wire(raw)
        except ValidationError as err:
            log.warning("malformed VSphereMachine", machine=str(request), error=str(err))
            return Result()
        if machine.spec.provider_id and self._written_provider_id.get(machine.metadata.uid or "") == machine.spec.provider_id:
            del self._written_provider_id[machine.metadata.uid or ""]  # stored now: memo done (as in _write_status)
        snap = await self._gather(machine)
        if snap is None:
            # CAPI path before the CAPI kinds can be read: say so (Ready False) rather than
            # leave the machine without a status, and look again shortly.
            served = self.capi is not None and self.capi.served_seen
            if self.capi is not None and not served:
                self.capi.wanted()  # discovery looks every few seconds while a machine waits
            if self.capi is not None and self.capi.settling():
                # A start: discovery or the CAPI caches are seconds away. Nothing is written, so
                # a machine reported before keeps its Ready condition (sources.CAPI_SYNC_GRACE_SECONDS).
                return Result(requeue_after=CAPI_NOT_SYNCED_REQUEUE)
            waiting = waiting_for_cluster_api(machine, self.ctx.now(), served)
            if waiting.to_wire() != VSphereMachineStatus.from_wire(raw.get("status") or {}).to_wire():
                log.info("vspheremachine waits for Cluster API", machine=str(request), capi_served=served)
                try:
                    await self._write_status(raw, waiting)
                except (NotFound, Replaced):
                    return Result()  # gone, or re-created under this name: its own events follow
            return Result(requeue_after=CAPI_NOT_SYNCED_REQUEUE)
        initial = ready_reason(machine.status)
        # Ready reason of the last status this reconcile wrote (a coalesced final step writes
        # none, ADR 0011: the Cloning written before the clone is then the transition to report).
        final = initial
        conn: Connection | None = None
        slot: str | None = None  # vCenter whose slot this reconcile holds (released in finally)
        events: list[Event] = []
        plan = Plan()
        try:
            for _ in range(MAX_STEPS):
                plan = decide(snap)
                if plan.add_finalizer:
                    raw = await self.ctx.client.add_finalizer(VSPHERE_MACHINE, raw, FINALIZER_VSPHERE_MACHINE)
                    self.writes.wrote(raw, status=False)
                    snap = replace(snap, machine=VSphereMachine.from_wire(raw))
                    continue
                if plan.connect:
                    snap, conn = await self._connection(snap, plan)
                    if conn is not None:
                        if slot is None:
                            # A machine whose VM exists is served first (vcenter_slots): its
                            # reconcile is short, and it should not wait behind every clone to come.
                            key = slot_key(self.backend, conn)
                            if not self.slots.try_acquire(key, request, first=vm_exists(snap.machine)):
                                if self.slots.waking:
                                    # In line for the vCenter: the next release enqueues it.
                                    log.debug("vcenter busy, waiting for a slot", machine=str(request),
                                              endpoint=conn.endpoint, cap=self.slots.cap)
                                    return Result()
                                log.debug("vcenter busy, deferring", machine=str(request), endpoint=conn.endpoint,
                                          cap=self.slots.cap, requeue_after=VCENTER_BUSY_REQUEUE)
                                return Result(requeue_after=VCENTER_BUSY_REQUEUE)
                            slot = key
                        snap = await self._look_up(snap, conn)
                    continue
                if plan.action is None or conn is None:
                    if slot is not None:
                        # What is left (providerID, status, finalizer) is API writes: the next
                        # machine in line may use the vCenter meanwhile (issue 22: the slot was
                        # held about 1.5 s past each 5 s clone, for these writes).
                        self.slots.release(slot)
                        slot = None
                    break
                events.extend(plan.events)
                if plan.write_status_first and plan.status is not None:
                    raw = await self._write_status(raw, plan.status)
                    final = ready_reason(plan.status)
                    snap = replace(snap, machine=VSphereMachine.from_wire(raw))
                snap = await self._act(snap, plan.action, conn)
                raw = self._annotated.pop(str(machine.metadata.uid or ""), raw)
            else:
                log.warning("vspheremachine reconcile did not settle", machine=str(request), steps=MAX_STEPS)
            events.extend(plan.events)
            if plan.provider_id is not None:
                # Writing spec bumps metadata.generation: decide again so the status written
                # below carries the new observedGeneration (no second status write later).
                raw = await self._write_provider_id(raw, plan.provider_id)
                snap = replace(snap, machine=VSphereMachine.from_wire(raw))
                plan = decide(snap)
                events.extend(plan.events)
            if plan.status is not None:
                raw = await self._write_status(raw, plan.status)
                final = ready_reason(plan.status)
            if plan.remove_finalizer:
                await self.ctx.client.remove_finalizer(VSPHERE_MACHINE, raw, FINALIZER_VSPHERE_MACHINE)
                uid = str(raw["metadata"].get("uid"))
                for table in (self._written_status, self._written_provider_id, self._last_transition, self._converged,
                              self._missing, self._task_failures, self._clone_not_before, self._chosen_domain):
                    table.pop(uid, None)
                self.writes.forget(uid)
                self.power_ons.forget(uid)
        except NotFound:
            return Result()  # deleted while we worked: nothing left to report on
        except Replaced as err:
            # Re-created under the same name while we worked from the old copy: nothing of the
            # old object's is written; the new object's own add event reconciles it.
            log.info("vspheremachine replaced, nothing written", machine=str(request), read_uid=err.read_uid,
                     current_uid=err.current_uid)
            return Result()
        finally:
            if snap.failure is not None and missing_object(snap.failure):
                self._missing[str(machine.metadata.uid or "")] = snap.missing_retries + 1
            elif snap.looked_up:
                self._missing.pop(str(machine.metadata.uid or ""), None)
            if snap.failure is not None and task_failed(snap.failure):
                self._task_failures[str(machine.metadata.uid or "")] = snap.task_failures + 1
                # Counted from the refusal, not from the reconcile's start: the clone's own wait
                # (seconds on vCenter) is no part of the back-off.
                self._clone_not_before[str(machine.metadata.uid or "")] = self.ctx.now() + timedelta(
                    seconds=task_failure_retry_seconds(snap.task_failures + 1))
            elif snap.looked_up and snap.vm is not None:
                self._task_failures.pop(str(machine.metadata.uid or ""), None)
                self._clone_not_before.pop(str(machine.metadata.uid or ""), None)
            if slot is not None:
                self.slots.release(slot)
            uid = str(machine.metadata.uid or "")
            recorded, last = recordable(events, initial, final, self._last_transition.get(uid))
            if last is not None and not plan.remove_finalizer:  # nothing kept once the finalizer went
                self._last_transition[uid] = last
            for event in recorded:
                self._event(snap, event)
        if plan.retry:
            ready = [c for c in (plan.status.conditions if plan.status else None) or [] if c.type == "Ready"]
            raise VSphereMachineRetry(ready[0].message if ready else "retrying")
        return Result(requeue_after=plan.requeue_after)


def setup(mgr: Manager, ctx: RoleContext) -> Controller:
    """Register the ``vspheremachine`` controller: for VSphereMachine (``--watch-filter`` applies
    to it), watches Provider, the referenced Secrets and ConfigMaps (re-read by name), the optional CAPI Machine/Cluster, and the
    vCenter property collector of every vSphere Provider. Raises ValueError without a backend."""
    referenced(ctx.cache).allow_http_endpoints = ctx.allow_http_endpoints
    if ctx.backend is None:
        raise ValueError("the vspheremachine controller needs a backend (provider role)")
    register_indexes(ctx.cache)
    maps = MapFuncs(ctx.cache)
    capi = CapiWatch(mgr, ctx.client, maps)
    vm_watch = VMWatch(ctx.backend, ctx.cache, maps, ctx.namespace, providers=mgr.get_informer(PROVIDER), client=ctx.client)
    writes = OwnWrites()
    reconciler = VSphereMachineReconciler(ctx, ctx.backend, capi, writes)
    # vCenter refused a Provider's credentials (its change watch or a reconcile logging in
    # again): re-read the Secret now, not at the next --secret-resync-period (reconcilers.refused).
    hear_refusals(mgr, ctx)
    return (
        ControllerBuilder(mgr)
        .named("vspheremachine")
        # Our own status writes do not re-enqueue (backoff applies to failures); see
        # vspheremachine.writes. First, so it sees every update.
        .for_(VSPHERE_MACHINE, predicates=[writes.predicate(), watch_filter_predicate(ctx.watch_filter or "")])
        .watches(PROVIDER, maps.provider, predicates=[PROVIDER_CHANGED])
        # Capacity is rewritten about every 30 s while VMs come and go; mapping each rewrite to
        # every machine not Ready made reconciles grow with the square of a wave's machines.
        .watches(PROVIDER, maps.provider_capacity, predicates=[PROVIDER_CAPACITY_CHANGED])
        # Referenced Secrets/ConfigMaps that changed (re-read by name, never watched).
        .watches_channel(referenced(ctx.cache).changes(ctx.client, ctx.secret_resync_period), maps.referenced)
        .watches_channel(capi.requests())
        .watches_channel(vm_watch.requests())
        .watches_channel(reconciler.slots.requests())
        .watches_channel(reconciler.power_ons.requests())
        .with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles)
        .complete(reconciler)
    )
