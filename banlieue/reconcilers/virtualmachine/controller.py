"""VirtualMachine reconciler wiring: gather -> ``virtualmachine.decide.decide`` -> execute (SPEC §4).

Writes per VM are few by construction (finalizer, one VSphereMachine apply that also carries the
provider's finalizer so the provider sends no finalizer patch of its own (ADR 0011), one status
write per meaningful change): status and the VSphereMachine are written only when they differ, only
onto the objects read (same UID: the machine apply, the migrate-annotation patch and the status
carry the read resourceVersion, ``reconcilers.same_object``), and
``ReadYourWrites`` stops a reconcile that runs before the informer has seen the controller's own
last write from writing the same thing again (or scheduling a peer as if this VM were unplaced).

Indexes on the VirtualMachine cache (``setup`` registers them): ``spec.classRef.name``,
``spec.imageRef.name``, ``status.scheduled.providerName`` (value ``<namespace>/<provider>``) and
``unscheduled`` (value ``<namespace>``, VMs without a placement) and
``spec.placement.antiAffinity`` (value ``<namespace>``, VMs with anti-affinity terms: the only
peers a VM without terms of its own must look at, so a reconcile does not read the whole
namespace).

What capacity and ranking read from the peers (pending memory and storage, peer counts per
Provider and failure domain) is not gathered per placement: ``PlacementTotals`` keeps it from
the VirtualMachine informer's events and this process's assumed placements (``setup`` registers
it on the informer), so placing a VM costs O(failure domains), not O(VMs of the namespace); the
Providers' per-domain ``capacity.updateTime`` is passed at each read, so a provisioned VM counts
until its domain's capacity was reported after it (scheduler rule 5).

Static addresses (``decide.address_conflict``): an unplaced VM with static addresses reads the
static addresses of the other VMs (with their classes) and standalone VSphereMachines of its
namespace, O(VMs of the namespace) for such a VM only; a VM with DHCP reads nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.provider import Provider
from banlieue.api.virtualmachine import AntiAffinityTerm, VirtualMachine, VirtualMachineReason
from banlieue.api.vmclass import VMClass
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    ANNOTATION_MIGRATE,
    FINALIZER_VIRTUAL_MACHINE,
    PROVIDER,
    VIRTUAL_MACHINE,
    VM_CLASS,
    VM_IMAGE,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.parsed import ParsedCache
from banlieue.reconcilers.provider_changes import PROVIDER_CAPACITY_CHANGED, PROVIDER_CHANGED
from banlieue.reconcilers.read_your_writes import ReadYourWrites
from banlieue.reconcilers.same_object import Replaced, write_same_object
from banlieue.reconcilers.virtualmachine.decide import (
    AddressClaim,
    Plan,
    Snapshot,
    current_placement,
    decide,
    static_addresses,
)
from banlieue.reconcilers.virtualmachine.machine_totals import (
    MachineReservations,
    owned_by_virtual_machine,
    standalone_changed,
    with_machines,
)
from banlieue.reconcilers.virtualmachine.placement_totals import PlacementTotals
from banlieue.reconcilers.virtualmachine.scheduler import (
    PeerPlacement,
    PeerTotals,
    SchedulingInput,
    capacity_report_times,
    class_storage_by_class,
    class_storage_gib,
    current_problem,
)
from banlieue.reconcilers.virtualmachine.status_mirror import InfraMachineRead
from banlieue.runtime.builder import ControllerBuilder, ManagerLike
from banlieue.runtime.cache import NAMESPACE_INDEX
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import Invalid, NotFound
from banlieue.runtime.event import Object, nested
from banlieue.runtime.log import get_logger
from banlieue.runtime.predicate import Funcs, Predicate, and_, watch_filter_predicate
from banlieue.runtime.reconcile import Request, Result

log = get_logger("reconcilers.virtualmachine")

INDEX_CLASS = "spec.classRef.name"
INDEX_IMAGE = "spec.imageRef.name"
INDEX_PROVIDER = "status.scheduled.providerName"
INDEX_UNSCHEDULED = "unscheduled"
INDEX_ANTI_AFFINITY = "spec.placement.antiAffinity"


def index_class(obj: Object) -> list[str]:
    """``spec.classRef.name`` of a VirtualMachine."""
    name = nested(obj, "spec", "classRef", "name")
    return [name] if isinstance(name, str) else []


def index_image(obj: Object) -> list[str]:
    """``spec.imageRef.name`` of a VirtualMachine."""
    name = nested(obj, "spec", "imageRef", "name")
    return [name] if isinstance(name, str) else []


def index_provider(obj: Object) -> list[str]:
    """``<namespace>/<status.scheduled.providerName>`` (Providers are namespaced)."""
    name = nested(obj, "status", "scheduled", "providerName")
    return [f"{obj['metadata'].get('namespace', '')}/{name}"] if isinstance(name, str) else []


def index_unscheduled(obj: Object) -> list[str]:
    """``<namespace>`` of a VirtualMachine without a placement."""
    return [] if nested(obj, "status", "scheduled", "providerName") else [str(obj["metadata"].get("namespace", ""))]


def index_anti_affinity(obj: Object) -> list[str]:
    """``<namespace>`` of a VirtualMachine with anti-affinity terms."""
    return [str(obj["metadata"].get("namespace", ""))] if nested(obj, "spec", "placement", "antiAffinity") else []


def _log_invalid(raw: Mapping[str, Any], err: ValidationError) -> None:
    log.warning("object does not parse, treated as absent", kind=raw.get("kind"), name=nested(raw, "metadata", "name"))


def _parse(model: Any, raw: Object | None) -> Any:
    if raw is None:
        return None
    try:
        return model.from_wire(raw)
    except ValidationError as err:
        _log_invalid(raw, err)
        return None


@dataclass(frozen=True)
class _PeerFields:
    """What anti-affinity reads from a peer VirtualMachine (``_peer_fields``)."""

    labels: Mapping[str, str]
    where: tuple[Any, Any]
    """(status.scheduled.providerName, status.scheduled.failureDomain), unchecked."""
    terms: tuple[AntiAffinityTerm, ...]

    def placement(self, name: str, where: tuple[Any, Any]) -> PeerPlacement | None:
        """The peer as placed on ``where``; None when ``where`` is not a placement."""
        if not (isinstance(where[0], str) and isinstance(where[1], str)):
            return None
        return PeerPlacement(name, dict(self.labels), where[0], where[1], self.terms)


def _peer_fields(raw: Object) -> _PeerFields:
    scheduled = nested(raw, "status", "scheduled") or {}
    terms: list[AntiAffinityTerm] = []
    for term in nested(raw, "spec", "placement", "antiAffinity") or ():
        try:
            terms.append(AntiAffinityTerm.from_wire(term))
        except ValidationError:
            continue
    return _PeerFields(
        labels=dict(raw["metadata"].get("labels") or {}),
        where=(scheduled.get("providerName"), scheduled.get("failureDomain")),
        terms=tuple(terms),
    )


class VirtualMachineReconciler:
    """Reconciles one VirtualMachine: see ``virtualmachine.decide`` for the rules."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.selected = watch_filter_predicate(ctx.watch_filter or "").create
        """CAPI ``--watch-filter``: VMs without the label are another instance's (or nobody's)."""
        self.vms = ReadYourWrites()
        self._parsed = ParsedCache(_log_invalid)
        self.machines = ReadYourWrites()
        self.totals = PlacementTotals()
        """Peer sums per namespace, fed by the VirtualMachine informer (``setup``) and by this
        process's placements (``reconcile`` assumes them until the informer shows them)."""
        self.machine_totals = MachineReservations()
        """What the VSphereMachines no VirtualMachine owns (direct, CAPI) reserve per domain, fed
        by the VSphereMachine informer (``setup``): added to the peers' reservations."""
        self._peer_memo: dict[str, tuple[str, _PeerFields, PeerPlacement | None]] = {}
        """Per VM key: (resourceVersion, what anti-affinity reads, the peer as placed), see ``_peers``."""

    def _peers(self, namespace: str, me: str, own_terms: bool) -> tuple[PeerPlacement, ...]:
        """Placements of the namespace's other VMs that anti-affinity (rule 6) reads: every VM
        when this one has terms, else those with terms (symmetric anti-affinity); a placement
        this process assumed counts instead of the cached one. Capacity and ranking read
        ``self.totals`` instead, so a VM without terms in a namespace without terms walks nothing.

        What a peer contributes is derived once per peer resourceVersion and reused: a VM with
        terms reads every VM of the namespace at each placement, and decoding each of them again
        each time made a burst of N such VMs cost O(N^2) JSON decoding."""
        cache = self.ctx.cache
        index = NAMESPACE_INDEX if own_terms else INDEX_ANTI_AFFINITY
        out: list[PeerPlacement] = []
        for key in cache.index_keys(VIRTUAL_MACHINE, index, namespace):
            name = key.partition("/")[2]
            if name == me:
                continue
            rv = cache.resource_version(VIRTUAL_MACHINE, key)
            if rv is None:
                continue  # gone since the index was read
            memo = self._peer_memo.get(key)
            if memo is not None and memo[0] == rv and not self.vms.has(key):
                fields, placed = memo[1], memo[2]
            else:
                raw = self.vms.view(key, cache.get(VIRTUAL_MACHINE, name, namespace))
                if raw is None:
                    continue
                fields = _peer_fields(raw)
                placed = fields.placement(name, fields.where)
                if str(raw["metadata"].get("resourceVersion", "")) == rv:
                    self._peer_memo[key] = (rv, fields, placed)
            assumed = self.totals.assumed(key)
            if assumed is not None and (placed is None or (placed.provider_name, placed.failure_domain) != assumed):
                placed = fields.placement(name, assumed)
            if placed is not None:
                out.append(placed)
        return tuple(out)

    def _class_size(self, name: str) -> tuple[int, int]:
        """(memory MiB, storage GiB) of a VM of class ``name``; (0, 0) when the class is unknown."""
        vm_class = self._parsed.parse(VMClass, self.ctx.cache.get(VM_CLASS, name))
        return (vm_class.spec.hardware.memory_mib, class_storage_gib(vm_class)) if vm_class is not None else (0, 0)

    def _class_shape(self, name: str) -> tuple[int, dict[str, int]]:
        """(memory MiB, disk GiB per storage class) of a VM of class ``name``; (0, {}) when the
        class is unknown."""
        vm_class = self._parsed.parse(VMClass, self.ctx.cache.get(VM_CLASS, name))
        return (vm_class.spec.hardware.memory_mib, class_storage_by_class(vm_class)) if vm_class is not None else (0, {})

    def _address_claims(self, namespace: str, me: str) -> tuple[AddressClaim, ...]:
        """The static addresses the namespace's other VirtualMachines (their classes' and their
        own) and standalone VSphereMachines (devices with a network class) claim."""
        cache, parse = self.ctx.cache, self._parsed.parse
        out: list[AddressClaim] = []
        for key in cache.index_keys(VIRTUAL_MACHINE, NAMESPACE_INDEX, namespace):
            name = key.partition("/")[2]
            if name == me:
                continue
            peer = parse(VirtualMachine, cache.get(VIRTUAL_MACHINE, name, namespace))
            peer_class = parse(VMClass, cache.get(VM_CLASS, peer.spec.class_ref.name)) if peer is not None else None
            if peer is None or peer_class is None:
                continue
            sched = peer.status.scheduled if peer.status else None
            placed = sched is not None and bool(sched.provider_name)
            out += [AddressClaim(ip, network_class, f"VirtualMachine {name}", placed, peer.metadata.creation_timestamp)
                    for _, network_class, ip in static_addresses(peer, peer_class)]
        for raw in cache.list(VSPHERE_MACHINE, namespace):
            if owned_by_virtual_machine(raw):
                continue  # its VirtualMachine's claim is counted above
            machine = parse(VSphereMachine, raw)
            for dev in ((machine.spec.network.devices if machine and machine.spec.network else None) or ()):
                network_class = dev.network_class
                if network_class is None:
                    continue  # a raw port group: not comparable with a network class
                for address in dev.addresses or ():
                    try:
                        ip = str(ipaddress.ip_interface(address).ip)
                    except ValueError:
                        continue
                    out.append(AddressClaim(ip, network_class, f"VSphereMachine {raw['metadata']['name']}", True,
                                            machine.metadata.creation_timestamp if machine else None))
        return tuple(out)

    def gather(self, request: Request) -> tuple[Snapshot, Object, Object | None] | None:
        """The snapshot, the VM as read, and the VSphereMachine as read; None when the VM is gone."""
        cache = self.ctx.cache
        key = f"{request.namespace}/{request.name}"
        raw = self.vms.view(key, cache.get(VIRTUAL_MACHINE, request.name, request.namespace))
        vm: VirtualMachine | None = _parse(VirtualMachine, raw)
        if raw is None or vm is None or not self.selected(raw):
            self.totals.drop_assumed(key)
            self._peer_memo.pop(key, None)
            return None
        machine_raw = self.machines.view(key, cache.get(VSPHERE_MACHINE, request.name, request.namespace))
        machine: VSphereMachine | None = _parse(VSphereMachine, machine_raw)
        parsed = self._parsed.parse
        providers = tuple(
            p for p in (parsed(Provider, o) for o in cache.list(PROVIDER, request.namespace)) if p is not None
        )
        vm_class: VMClass | None = parsed(VMClass, cache.get(VM_CLASS, vm.spec.class_ref.name))
        image: VMImage | None = parsed(VMImage, cache.get(VM_IMAGE, vm.spec.image_ref.name))
        peers: tuple[PeerPlacement, ...] = ()
        totals: PeerTotals | None = None
        claims: tuple[AddressClaim, ...] = ()
        current = current_placement(vm, InfraMachineRead.from_machine(machine) if machine else None)
        if vm_class is not None and current is None and static_addresses(vm, vm_class):
            claims = self._address_claims(request.namespace, request.name)
        if vm_class is not None and image is not None:
            # Peers only matter when placing (anti-affinity and capacity are not re-checked for
            # a valid current placement); skipping them keeps steady-state reconciles O(1).
            if current is None or current_problem(SchedulingInput(vm, vm_class, image, providers, (), current)):
                peers = self._peers(request.namespace, request.name,
                                    bool(vm.spec.placement and vm.spec.placement.anti_affinity))
                totals = with_machines(
                    self.totals.peer_totals(request.namespace, key, self._class_size,
                                            capacity_report_times(providers), self._class_shape),
                    self.machine_totals.reserved(request.namespace, providers))
        snapshot = Snapshot(vm=vm, vm_class=vm_class, image=image, providers=providers, peers=peers,
                            machine=machine, now=self.ctx.now().astimezone(UTC),
                            peer_totals=totals, address_claims=claims)
        return snapshot, raw, machine_raw

    async def reconcile(self, request: Request) -> Result:
        gathered = self.gather(request)
        if gathered is None:
            return Result()
        snapshot, raw, machine_raw = gathered
        plan = decide(snapshot)
        key = f"{request.namespace}/{request.name}"
        if plan.placement is not None:
            self.totals.assume(key, plan.placement)
        try:
            await self.execute(key, raw, machine_raw, plan)
        except NotFound:
            # The VM went away while we wrote; its delete event finishes the job.
            return Result()
        except Replaced as err:
            # The VM or its VSphereMachine was re-created under its name while we worked from the
            # old copy: nothing more is written; the new object's own add event reconciles it.
            log.info("object replaced, nothing more written", vm=key, replaced=str(err), read_uid=err.read_uid,
                     current_uid=err.current_uid)
            return Result()
        return Result()

    async def execute(self, key: str, raw: Object, machine_raw: Object | None, plan: Plan) -> None:
        """Carry out ``plan`` in the documented order, recording each write for ``ReadYourWrites``."""
        client, fm = self.ctx.client, self.ctx.field_manager
        meta = raw["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        current = raw
        if plan.add_finalizer:
            current = await client.add_finalizer(VIRTUAL_MACHINE, current, FINALIZER_VIRTUAL_MACHINE)
            self.vms.record(key, raw, current)
        if plan.delete_machine and machine_raw is not None:
            uid = machine_raw["metadata"].get("uid")
            await client.delete(VSPHERE_MACHINE, name, namespace, ignore_not_found=True,
                                preconditions={"uid": uid} if uid else None)
            deleting = {**machine_raw, "metadata": {**machine_raw["metadata"],
                                                    "deletionTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
            self.machines.record(key, machine_raw, deleting)
        if plan.apply_machine is not None:
            body = plan.apply_machine
            try:
                if machine_raw is None:
                    applied = await client.apply(VSPHERE_MACHINE, body, field_manager=fm, force=True)  # creates it
                else:
                    # Only onto the machine read (same UID): one deleted and re-created under its
                    # name since is not this VM's to change (reconcilers.same_object).
                    applied = await write_same_object(
                        client, VSPHERE_MACHINE, machine_raw, body,
                        lambda b: client.apply(VSPHERE_MACHINE, b, field_manager=fm, force=True))
            except Invalid as err:
                if not _finalizer_refused(err):
                    raise
                # The machine is being deleted and its finalizer already went (our cached copy
                # predates both): kube refuses new finalizers then. Nothing to apply; the
                # deletion's watch events bring the next reconcile.
                log.info("vspheremachine is being deleted; not applied", machine=key)
                return
            self.machines.record(key, machine_raw, applied)
        if plan.clear_migrate_annotation:
            before = current
            # Only off the VM read: a VM re-created under its name keeps its own annotation.
            current = await write_same_object(
                client, VIRTUAL_MACHINE, before, {"metadata": {"annotations": {ANNOTATION_MIGRATE: None}}},
                lambda b: client.patch(VIRTUAL_MACHINE, name, namespace, b))
            self.vms.record(key, before, current)
        if plan.status is not None:
            body = {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"),
                    "metadata": {"name": name, "namespace": namespace}, "status": plan.status}
            before = current
            # Only onto the VM read (same UID), never onto one re-created under its name.
            current = await write_same_object(
                client, VIRTUAL_MACHINE, before, body,
                lambda b: client.apply_status(VIRTUAL_MACHINE, b, field_manager=fm, force=True))
            self.vms.record(key, before, current)
        if plan.remove_finalizer:
            await client.remove_finalizer(VIRTUAL_MACHINE, current, FINALIZER_VIRTUAL_MACHINE)
            self.vms.forget(key)
            self.totals.drop_assumed(key)
        for event in plan.events:
            self.ctx.recorder.event(current, event.type, event.reason, event.message)


def _finalizer_refused(err: Invalid) -> bool:
    """Whether a 422 is kube's "no new finalizers can be added if the object is being deleted"
    (apimachinery ``ValidateNoNewFinalizers``: a Forbidden cause on ``metadata.finalizers``)."""
    return any(c.get("field") == "metadata.finalizers" for c in err.causes) or "no new finalizers" in err.message


def _vm_update_matters(old: Object, new: Object) -> bool:
    # Spec (generation), labels, annotations (banlieue.io/migrate) and deletion matter; the
    # controller's own status writes do not.
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return any(om.get(k) != nm.get(k) for k in ("generation", "labels", "annotations", "deletionTimestamp"))


def _placement_freed(old: Object, new: Object) -> bool:
    # A new placement only consumes capacity and topology; a moved or cleared one, or relabelled
    # peer, may let a VM refused for capacity or anti-affinity fit; a peer's changed network
    # settings may free a static address (AddressConflict).
    before = nested(old, "status", "scheduled")
    return bool(
        (before and before != nested(new, "status", "scheduled"))
        or nested(old, "metadata", "labels") != nested(new, "metadata", "labels")
        or nested(old, "spec", "network") != nested(new, "spec", "network")
    )


RETRY_ON_PEER_CHANGE = frozenset({VirtualMachineReason.ANTI_AFFINITY_UNSATISFIED, VirtualMachineReason.INSUFFICIENT_CAPACITY,
                                  VirtualMachineReason.ADDRESS_CONFLICT})
"""Scheduling failures a peer's deletion, move, relabelling or network edit can resolve."""


def _refused_for_peers(obj: Object) -> bool:
    for cond in nested(obj, "status", "conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Scheduled":
            return cond.get("status") == "False" and cond.get("reason") in RETRY_ON_PEER_CHANGE
    return False


def _address_conflict(obj: Object) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == "Scheduled" and c.get("status") == "False"
               and c.get("reason") == VirtualMachineReason.ADDRESS_CONFLICT for c in nested(obj, "status", "conditions") or ())


def _placement_invalid(obj: Object) -> bool:
    """``PlacementValid`` False: the VM waits for another placement to fit (room may free up)."""
    return any(isinstance(c, Mapping) and c.get("type") == "PlacementValid" and c.get("status") == "False"
               for c in nested(obj, "status", "conditions") or ())


def _requests(objs: Iterable[Object], exclude: tuple[str, str] | None = None) -> list[Request]:
    out = []
    for o in objs:
        ns, name = str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"])
        if (ns, name) != exclude:
            out.append(Request(ns, name))
    return out


def setup(mgr: ManagerLike, ctx: RoleContext) -> Controller:
    """Register the ``virtualmachine`` controller: for_(VirtualMachine), owns(VSphereMachine),
    VMClass/VMImage -> the VMs using them, Provider -> the VMs placed on it and the unscheduled
    VMs of its namespace (a change of nothing but its capacity: the unscheduled ones only,
    ``reconcilers.provider_changes``), a VM's deletion, moved placement or relabelling -> the VMs of its
    namespace refused for capacity or anti-affinity. Registers the indexes of the module docstring."""
    cache = ctx.cache
    for index, fn in ((INDEX_CLASS, index_class), (INDEX_IMAGE, index_image), (INDEX_PROVIDER, index_provider),
                      (INDEX_UNSCHEDULED, index_unscheduled), (INDEX_ANTI_AFFINITY, index_anti_affinity)):
        cache.add_indexer(VIRTUAL_MACHINE, index, fn)

    scoped: Predicate = watch_filter_predicate(ctx.watch_filter or "")

    def vms(objs: Iterable[Object], exclude: tuple[str, str] | None = None) -> list[Request]:
        # Map functions honour --watch-filter too: only the for_() events are filtered otherwise.
        return _requests([o for o in objs if scoped.create(o)], exclude)

    def by_class(obj: Object) -> list[Request]:
        # The VMs of the class, and those refused because a VM of it holds their static
        # address (its ipam may have changed; AddressConflict has no timed retry).
        users = cache.by_index(VIRTUAL_MACHINE, INDEX_CLASS, str(obj["metadata"]["name"]))
        namespaces = {str(o["metadata"].get("namespace", "")) for o in users}
        blocked = [o for ns in namespaces for o in cache.by_index(VIRTUAL_MACHINE, INDEX_UNSCHEDULED, ns) if _address_conflict(o)]
        return vms([*users, *blocked])

    def by_image(obj: Object) -> list[Request]:
        return vms(cache.by_index(VIRTUAL_MACHINE, INDEX_IMAGE, str(obj["metadata"]["name"])))

    def by_provider(obj: Object) -> list[Request]:
        ns = str(obj["metadata"].get("namespace", ""))
        placed = cache.by_index(VIRTUAL_MACHINE, INDEX_PROVIDER, f"{ns}/{obj['metadata']['name']}")
        return vms([*placed, *cache.by_index(VIRTUAL_MACHINE, INDEX_UNSCHEDULED, ns)])

    def unscheduled_of(obj: Object) -> list[Request]:
        # A capacity rewrite can only decide a VM still waiting for room (provider_changes):
        # unscheduled, or placed where it may no longer stay and waiting for room to move.
        ns = str(obj["metadata"].get("namespace", ""))
        moving = [o for o in cache.list(VIRTUAL_MACHINE, ns) if _placement_invalid(o)]
        return vms([*cache.by_index(VIRTUAL_MACHINE, INDEX_UNSCHEDULED, ns), *moving])

    def peers_of(obj: Object) -> list[Request]:
        ns = str(obj["metadata"].get("namespace", ""))
        refused = [o for o in cache.by_index(VIRTUAL_MACHINE, INDEX_UNSCHEDULED, ns) if _refused_for_peers(o)]
        return vms(refused, (ns, str(obj["metadata"]["name"])))

    reconciler = VirtualMachineReconciler(ctx)
    # The informer calls handlers inline, so the sums include an event before any reconcile it
    # enqueues runs; the initial list reaches them before the informer reports synced.
    mgr.get_informer(VIRTUAL_MACHINE).add_event_handler(reconciler.totals)
    mgr.get_informer(VSPHERE_MACHINE).add_event_handler(reconciler.machine_totals)

    def refused_after_machine(obj: Object) -> list[Request]:
        # A machine no VirtualMachine owns went or moved: the room it held may fit a refused VM.
        if owned_by_virtual_machine(obj):
            return []
        ns = str(obj["metadata"].get("namespace", ""))
        return vms([o for o in cache.by_index(VIRTUAL_MACHINE, INDEX_UNSCHEDULED, ns) if _refused_for_peers(o)])

    return (
        ControllerBuilder(mgr)
        .named("virtualmachine")
        .for_(VIRTUAL_MACHINE, predicates=[and_(scoped, Funcs(update=_vm_update_matters))])
        .owns(VSPHERE_MACHINE, predicates=[scoped])
        .watches(VM_CLASS, by_class)
        .watches(VM_IMAGE, by_image)
        .watches(PROVIDER, by_provider, predicates=[PROVIDER_CHANGED])
        .watches(PROVIDER, unscheduled_of, predicates=[PROVIDER_CAPACITY_CHANGED])
        .watches(VIRTUAL_MACHINE, peers_of, predicates=[Funcs(create=lambda _o: False, update=_placement_freed)])
        .watches(VSPHERE_MACHINE, refused_after_machine, predicates=[Funcs(create=lambda _o: False, update=standalone_changed)])
        .with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles)
        .complete(reconciler)
    )
