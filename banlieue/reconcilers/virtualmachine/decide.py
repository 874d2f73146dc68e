"""VirtualMachine: the pure ``decide(snapshot) -> Plan`` (SPEC §2 VirtualMachine, §4).

Order of the rules (all branching lives here; ``banlieue.reconcilers.virtualmachine.controller`` executes):

1. ``spec.paused``: ``Paused`` True, nothing else (CAPI v1beta2 Paused condition; as in CAPI,
   paused wins over deletion; the finalizer is not added and status.observedGeneration does not
   advance while paused).
2. Deleting: delete the VSphereMachine, wait until it is gone (Ready False ``Deleting``), then drop
   the finalizer ``banlieue.io/virtualmachine``.
3. Add the finalizer; resolve VMClass and VMImage (missing -> ``Scheduled`` False
   ``ClassNotFound``/``ImageNotFound``, the message naming the field to check and no other
   class or image: whoever reads the VM may not be allowed to list these cluster-scoped kinds,
   new-user finding).
   A VM whose VSphereMachine exists is kept as it is when its class went away or cannot be applied
   where it runs (``ClassNotOffered``): ``ReferencesResolved`` False, only power is applied.
4. Schedule (``banlieue.reconcilers.virtualmachine.scheduler``), keeping the current placement while valid.
5. Drift (current placement invalid): ``manual`` is the default (ADR 0012). ``automatic`` (or ``manual`` with annotation
   ``banlieue.io/migrate: "true"``) deletes the VSphereMachine, waits until it is gone, then
   places again (``Migrating`` True ``ProviderChanged``/``FailureDomainChanged`` until the new
   machine is Ready; a Warning ``MigrationDestroysVM`` says what is destroyed; the annotation is
   cleared when the new placement is written); ``manual``
   without the annotation and ``never`` keep the old placement with ``PlacementValid`` False.
   When nothing else fits, the old placement is kept too. An annotation set while the placement
   is valid is cleared (there is nothing to migrate; it must not authorise a later move).
6. Apply the VSphereMachine (only when it differs from the cached one), mirror its status through
   ``InfraMachineRead`` (held while the machine is in a provisioning step, see ``in_progress``),
   and compute ``Ready``: True only when InfrastructureReady is True, the
   machine is provisioned and the observed power state is the desired one. With no
   VSphereMachine and none being created (the VM is not scheduled), InfrastructureReady is False
   ``WaitingForInfrastructure`` "no VSphereMachine yet: ..." pointing at ``Scheduled``.

The status in the plan is the full desired status, or None when it equals the current one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from banlieue.api.conditions import get_condition, set_condition
from banlieue.api.infrastructure import GROUP as INFRA_GROUP
from banlieue.api.infrastructure import VSphereMachine, VSphereMachineReason
from banlieue.api.meta import Condition, ConditionStatus, ContractVersionedObjectReference, Initialization
from banlieue.api.provider import Provider
from banlieue.api.virtualmachine import (
    MigrationPolicy,
    ScheduledPlacement,
    VirtualMachine,
    VirtualMachineReason,
    VirtualMachineStatus,
)
from banlieue.api.virtualmachine import VirtualMachineConditionType as C
from banlieue.api.vmclass import ClassInterface, IPAMSource, VMClass
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.kinds import (
    ANNOTATION_MIGRATE,
    FINALIZER_VIRTUAL_MACHINE,
    PROVIDER_CLASS_VSPHERE,
)
from banlieue.reconcilers.virtualmachine.machine_decide import (
    desired_machine,
    machine_differs,
    owns,
    power_only_machine,
)
from banlieue.reconcilers.virtualmachine.scheduler import (
    FIRMWARE_FEATURES,
    PeerPlacement,
    PeerTotals,
    Placement,
    SchedulingDecision,
    SchedulingInput,
    firmware_supported,
    image_template,
    schedule,
)
from banlieue.reconcilers.virtualmachine.status_mirror import InfraMachineRead

Reason = VirtualMachineReason
"""Condition reasons (SPEC §4's and banlieue's own; docs/operations.md lists them for operators)."""


PROGRESS_REASONS = frozenset(
    {VSphereMachineReason.CLONING, VSphereMachineReason.POWERING_ON, VSphereMachineReason.WAITING_FOR_IP_ADDRESS}
)
"""VSphereMachine Ready reasons mirrored as ``WaitingForInfrastructure``: each step would otherwise
cost a VirtualMachine status write (the write budget per VM is small). Failure reasons
(``CloneFailed``, ``TemplateNotFound``, ``InvalidSpec``...) are mirrored as they are."""

NOT_SCHEDULED_INFRA_MESSAGE = "no VSphereMachine yet: the VirtualMachine is not scheduled (see the Scheduled condition)"


@dataclass(frozen=True)
class Snapshot:
    """The VM, what it references (None when missing), every Provider of its namespace, the
    placements of the other VMs of the namespace, its VSphereMachine (None when absent), now.
    ``peer_totals``:
    the peers' sums for capacity and ranking when the caller keeps them (``SchedulingInput.totals``;
    ``peers`` then holds only the peers anti-affinity reads)."""

    vm: VirtualMachine
    vm_class: VMClass | None
    image: VMImage | None
    providers: tuple[Provider, ...]
    peers: tuple[PeerPlacement, ...]
    machine: VSphereMachine | None
    now: datetime
    peer_totals: PeerTotals | None = None
    address_claims: tuple[AddressClaim, ...] = ()
    """The static addresses the other VMs and standalone VSphereMachines of the namespace claim
    (gathered only while the VM is unplaced and has static addresses itself)."""


@dataclass(frozen=True)
class AddressClaim:
    """A static address another object of the VM's namespace claims: ``ip`` (no prefix length)
    on ``network_class``, by ``holder`` (``VirtualMachine web-1``, ``VSphereMachine m-0``), which
    is ``placed`` (scheduled, or a VSphereMachine that exists) or not, created at ``created``."""

    ip: str
    network_class: str
    holder: str
    placed: bool
    created: datetime | None


def class_not_offered(s: Snapshot, current: tuple[str, str] | None) -> tuple[str, str] | None:
    """(``ClassNotOffered``, message) when the VM has a live VSphereMachine on ``current`` and its
    VMClass now names a storage or network class that failure domain does not offer
    (``availableStorageClasses``/``availableNetworkClasses``), or a firmware it does not support,
    while every class (and the firmware) the machine is built with still is offered there: the miss comes from a catalogue edit, not from the
    Provider. Else None (a Provider that stopped offering what the machine uses is drift, step 5).

    ADR 0012: a running VM that is fine never turns NotReady, and is never migrated, because of a
    catalogue edit. Applying the edit would make the machine unrealisable (``InvalidSpec``) and a
    migration would destroy the VM; the VM is kept as it is instead (``unresolved``)."""
    machine, vm_class = s.machine, s.vm_class
    if current is None or machine is None or vm_class is None or machine.metadata.deletion_timestamp is not None:
        return None
    provider = next((p for p in s.providers if p.metadata.name == current[0]), None)
    domains = (provider.status.failure_domains if provider is not None and provider.status else None) or ()
    domain = next((d for d in domains if d.name == current[1]), None)
    if provider is None or domain is None:
        return None
    attrs = domain.attributes
    storage = set((attrs.available_storage_classes if attrs else None) or ())
    networks = set((attrs.available_network_classes if attrs else None) or ())
    live_storage = {d.storage_class for d in machine.spec.disks or () if d.storage_class}
    live_networks = {d.network_class for d in (machine.spec.network.devices if machine.spec.network else None) or ()
                     if d.network_class}
    reported = set((attrs.features if attrs else None) or ()) & FIRMWARE_FEATURES
    live_firmware = str(machine.spec.firmware) if machine.spec.firmware else None
    if not live_storage <= storage or not live_networks <= networks or (
            reported and live_firmware is not None and live_firmware not in reported):
        return None
    missing = [f"storage class {n}" for n in sorted({d.storage_class for d in vm_class.spec.hardware.disks or ()} - storage)]
    missing += [f"network class {n}" for n in sorted(
        {i.network_class for i in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ()} - networks)]
    if not firmware_supported(vm_class, domain):
        missing.append(f"firmware {vm_class.spec.firmware}")
    if not missing:
        return None
    return (VirtualMachineReason.CLASS_NOT_OFFERED,
            f"VMClass {vm_class.metadata.name} names {', '.join(missing)}, which failure domain {current[1]} of "
            f"Provider {current[0]} does not offer (offered: storage {', '.join(sorted(storage)) or 'none'}; network "
            f"{', '.join(sorted(networks)) or 'none'}): add it to the Provider's spec.capabilities or change the class back")


def interface_mismatch(vm: VirtualMachine, vm_class: VMClass) -> tuple[str, str] | None:
    """(``InterfaceNotInClass``, message) when ``vm.spec.network.interfaces`` names an interface
    its VMClass does not have, else None. The class is another object, so admission cannot check
    this (CEL sees one object); the controller refuses to place or change the VM instead."""
    overrides = vm.spec.network.interfaces if vm.spec.network is not None else None
    have = [nic.name for nic in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ()]
    unknown = [o.name for o in overrides or () if o.name not in have]
    if not unknown:
        return None
    listed = ", ".join(have) if have else "none"
    return (VirtualMachineReason.INTERFACE_NOT_IN_CLASS,
            f"spec.network.interfaces: VMClass {vm_class.metadata.name} has no interface {', '.join(unknown)} "
            f"(its interfaces: {listed}); override only the class's interfaces")


def _effective_ip(vm: VirtualMachine, nic: ClassInterface) -> tuple[list[str], str | None, str | None, str]:
    """(addresses, gateway4, gateway6, where) of class interface ``nic`` once the VM's override of
    it is applied field by field (as ``desired_machine`` does); ``where`` names the source of
    the addresses for messages."""
    override = next((o for o in (vm.spec.network.interfaces if vm.spec.network else None) or () if o.name == nic.name), None)
    static = nic.ipam.static if nic.ipam is not None and nic.ipam.source is IPAMSource.STATIC else None
    addresses = [str(a) for a in (override.addresses if override is not None and override.addresses is not None
                                  else (static.addresses if static is not None else None)) or ()]
    gateway4 = (override.gateway4 if override is not None and override.gateway4 is not None
                else static.gateway4 if static is not None else None)
    gateway6 = (override.gateway6 if override is not None and override.gateway6 is not None
                else static.gateway6 if static is not None else None)
    return addresses, None if gateway4 is None else str(gateway4), None if gateway6 is None else str(gateway6), nic.name


_LINK_LOCAL6 = ipaddress.IPv6Network("fe80::/10")


def _unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``ip`` is an address a host may be given: not unspecified, loopback, multicast,
    link-local nor 255.255.255.255 (the admission rule ``banlieue.api.meta.HOST_PREFIX_RULES``,
    Go ``netip.Addr.IsGlobalUnicast``), for values stored before admission refused them."""
    return not (ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local
                or ip == ipaddress.IPv4Address("255.255.255.255"))


def network_inconsistency(vm: VirtualMachine, vm_class: VMClass) -> tuple[str, str] | None:
    """(``NetworkSettingsInconsistent``, message) when the VM's effective interface settings (its
    overrides over the class's, each valid on its own) cannot work in a guest, else None.

    Rules (what cloud-init/netplan would accept but the guest could not use): a gateway must lie
    in one of its interface's networks of that family and be none of the interface's own
    addresses nor (IPv4, /30 or shorter) the network or broadcast address of its network (an IPv6 gateway may also be link-local,
    as router advertisements give it, RFC 4861); an IPv4 address on a network of prefix length
    /30 or shorter is neither the network nor the broadcast address (RFC 919/RFC 3021 leave /31
    and /32 without either); an address is on one interface only; ``gateway4`` needs IPv4 on its
    interface (an address, or DHCPv4: a class interface of source dhcp whose VM override sets no
    addresses); one interface at most has a gateway of each family (a guest has one default
    route per family; two of the same metric leave undefined which is used, netplan reports
    them as conflicting); addresses and gateways are unicast (``_unicast``). Admission checks the same on each object alone
    (``banlieue.api.meta.interface_ip_rules``, ``one_default_gateway_rules``); this is for the
    VM's overrides together with its class's values.
    """
    problems: list[str] = []
    seen: dict[str, str] = {}
    gateways: dict[int, list[str]] = {4: [], 6: []}
    overrides = {o.name: o for o in (vm.spec.network.interfaces if vm.spec.network else None) or ()}
    for nic in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ():
        addresses, gateway4, gateway6, name = _effective_ip(vm, nic)
        ifaces = [ipaddress.ip_interface(a) for a in addresses]
        override = overrides.get(nic.name)
        replaced = override is not None and bool(override.addresses)
        dhcp4 = (nic.ipam is None or nic.ipam.source is IPAMSource.DHCP) and not replaced
        if gateway4 is not None and not dhcp4 and not any(i.version == 4 for i in ifaces):
            why = ("its addresses replace the class's, and DHCPv4 is off" if replaced
                   else "the class's interface is static without an IPv4 address")
            problems.append(f"{name} has gateway4 {gateway4} but no IPv4 address ({why})")
        for family, gateway in ((4, gateway4), (6, gateway6)):
            if gateway is not None:
                gateways[family].append(name)
        for iface in ifaces:
            if not _unicast(iface.ip):
                problems.append(f"{name} address {iface} is not a unicast host address")
            ip = str(iface.ip)
            if ip in seen and seen[ip] != name:
                problems.append(f"address {ip} is on interfaces {seen[ip]} and {name}")
            seen.setdefault(ip, name)
            net = iface.network
            if iface.version == 4 and net.prefixlen <= 30 and iface.ip in (net.network_address, net.broadcast_address):
                which = "network" if iface.ip == net.network_address else "broadcast"
                problems.append(f"{name} address {iface} is the {which} address of {net}")
        for family, gateway in ((4, gateway4), (6, gateway6)):
            if gateway is None:
                continue
            gw = ipaddress.ip_address(gateway)
            if not _unicast(gw) and not (family == 6 and gw in _LINK_LOCAL6):
                problems.append(f"{name} gateway{family} {gw} is not a unicast address")
                continue
            if any(i.ip == gw for i in ifaces):
                problems.append(f"{name} gateway{family} {gw} is the interface's own address: the guest cannot route "
                                "through it")
                continue
            edge = next((i.network for i in ifaces if i.version == 4 and i.network.prefixlen <= 30
                         and gw in (i.network.network_address, i.network.broadcast_address)), None)
            if edge is not None:
                which = "network" if gw == edge.network_address else "broadcast"
                problems.append(f"{name} gateway{family} {gw} is the {which} address of {edge}: the guest cannot route "
                                "through it")
                continue
            nets = [i.network for i in ifaces if i.version == family]
            if not nets:
                continue  # DHCP / SLAAC interfaces: the gateway's reach cannot be judged here
            if any(gw in n for n in nets) or (family == 6 and gw in _LINK_LOCAL6):
                continue
            problems.append(f"{name} gateway{family} {gw} is outside its networks "
                            f"({', '.join(str(n) for n in nets)}): the guest could not reach it")
    for family, names in gateways.items():
        if len(names) > 1:
            problems.append(f"gateway{family} is set on interfaces {', '.join(names[:-1])} and {names[-1]}: a guest has "
                            f"one IPv{family} default route; keep gateway{family} on the interface that carries it")
    if not problems:
        return None
    return (VirtualMachineReason.NETWORK_SETTINGS_INCONSISTENT,
            f"spec.network.interfaces over VMClass {vm_class.metadata.name}: {'; '.join(problems)}; "
            "fix the addresses or gateways of the VM (or of its class)")


def static_addresses(vm: VirtualMachine, vm_class: VMClass) -> list[tuple[str, str, str]]:
    """(interface, network class, address without prefix length) of every static address the VM
    gets: its class's, replaced per interface by its own (``_effective_ip``)."""
    out: list[tuple[str, str, str]] = []
    for nic in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ():
        addresses, _, _, name = _effective_ip(vm, nic)
        for address in addresses:
            try:
                out.append((name, nic.network_class, str(ipaddress.ip_interface(address).ip)))
            except ValueError:
                continue  # refused at admission; a stored bad value claims nothing
    return out


def address_conflict(vm: VirtualMachine, vm_class: VMClass, claims: Sequence[AddressClaim]) -> tuple[str, str] | None:
    """(``AddressConflict``, message) when a static address of the VM (``static_addresses``) is
    claimed on the same network class by an object that holds it, else None.

    Rule (banlieue's; SPEC §2 lets a VMClass, which many VMs share, carry static addresses, and
    a VM give its own): a static address belongs to one guest of a network. Two guests with one
    address break each other's traffic (RFC 5227 calls it an address conflict), and the guest
    cannot be told apart by the one who created it, so the second is not cloned. A claim holds
    the address when its object is placed (scheduled or, for a VSphereMachine, existing: a
    running VM is never taken down for a newcomer), else when it is older (creation time, then
    ``holder``, so two unplaced VMs agree which one waits). Same network = same network class
    of the namespace (the placement is not known yet; a class maps to one port group per failure
    domain). Only checked before the VM is placed (callers pass no claims otherwise)."""
    mine = static_addresses(vm, vm_class)
    if not mine or not claims:
        return None
    me = f"VirtualMachine {vm.metadata.name}"
    created = vm.metadata.creation_timestamp
    problems: list[str] = []
    for iface, network_class, ip in mine:
        for c in claims:
            if c.ip != ip or c.network_class != network_class:
                continue
            older = (c.created is not None and created is not None and
                     (c.created, c.holder) < (created, me))
            if c.placed or older or (created is not None and c.created is None):
                problems.append(f"{iface} address {ip} on network class {network_class} is {c.holder}'s"
                                + ("" if c.placed else " (created first)"))
                break
    if not problems:
        return None
    return (VirtualMachineReason.ADDRESS_CONFLICT,
            f"{'; '.join(problems)}: a static address belongs to one VM of a network; give this VM its own address "
            "in spec.network.interfaces (a VMClass with static addresses fits one VM), or free it on the other; "
            "the VM is not cloned until then")


def not_found_message(kind: str, wanted: str) -> str:
    """``VMClass "smal" not found: check spec.classRef.name ...``: the name asked for and the
    field to fix, never the names that exist. VMClasses and VMImages are cluster-scoped, and
    whoever reads a VirtualMachine may not be allowed to list them (the shipped RBAC grants no
    tenant role that): a list in the message told them anyway (new-user finding)."""
    field = "spec.classRef.name" if kind == "VMClass" else "spec.imageRef.name"
    short, plural = ("bvmc", "VMClasses") if kind == "VMClass" else ("bvmi", "VMImages")
    return (f'{kind} "{wanted}" not found: check {field} (kubectl get {short} lists the {plural}, '
            "if you may list them; else ask your cluster administrator)")


@dataclass(frozen=True)
class RecordedEvent:
    """A Kubernetes Event to record about the VM."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What to do, in order: add finalizer, delete machine, apply machine (full SSA body), clear
    the migrate annotation, write status (full desired status; None = unchanged), remove the
    finalizer. ``placement``: (provider, failure domain) the VM is placed on, for the
    reconciler's assumed-placement cache."""

    add_finalizer: bool = False
    delete_machine: bool = False
    apply_machine: dict[str, Any] | None = None
    clear_migrate_annotation: bool = False
    status: dict[str, Any] | None = None
    remove_finalizer: bool = False
    placement: tuple[str, str] | None = None
    events: tuple[RecordedEvent, ...] = ()


class _Conds:
    """Accumulates condition changes (set_condition semantics) for one generation."""

    def __init__(self, current: Sequence[Condition] | None, generation: int | None, now: datetime) -> None:
        self.items = list(current or ())
        self.generation = generation
        self.now = now

    def set(self, type_: str, status: ConditionStatus | bool, reason: str, message: str = "") -> None:
        # metav1.Condition caps messages at 32768 characters; scheduler messages quote user input.
        self.items = set_condition(self.items, type_, status, reason, message[:32768], self.generation, self.now)


def current_placement(vm: VirtualMachine, machine: InfraMachineRead | None) -> tuple[str, str] | None:
    """(provider, failure domain) the VM is placed on: ``status.scheduled``, else the placement of
    its VSphereMachine (status lost); None when unplaced."""
    sched = vm.status.scheduled if vm.status else None
    if sched is not None and sched.provider_name and sched.failure_domain:
        return (sched.provider_name, sched.failure_domain)
    if machine is not None and machine.provider_name and machine.failure_domain:
        # Status lost (restored from a backup, wiped): adopt the machine's placement.
        return (machine.provider_name, machine.failure_domain)
    return None


def _old_placement(s: Snapshot, current: tuple[str, str]) -> Placement:
    sched = s.vm.status.scheduled if s.vm.status else None
    pclass = (sched.provider_class if sched else None) or PROVIDER_CLASS_VSPHERE
    same = sched is not None and (sched.provider_name, sched.failure_domain) == current
    return Placement(
        provider_name=current[0],
        provider_class=pclass,
        failure_domain=current[1],
        template=image_template(s.image, pclass) if s.image else None,
        resolved_storage=tuple((sched.resolved_storage if sched and same else None) or ()),
        resolved_networks=tuple((sched.resolved_networks if sched and same else None) or ()),
    )


def _scheduled(s: Snapshot, target: Placement) -> ScheduledPlacement:
    old = s.vm.status.scheduled if s.vm.status else None
    same = old is not None and (old.provider_name, old.failure_domain) == (target.provider_name, target.failure_domain)
    return ScheduledPlacement(
        provider_name=target.provider_name,
        provider_class=target.provider_class,
        failure_domain=target.failure_domain,
        resolved_storage=list(target.resolved_storage) or None,
        resolved_networks=list(target.resolved_networks) or None,
        scheduled_at=(old.scheduled_at if same and old is not None else None) or s.now,
    )


def _infra_condition(conds: _Conds, machine: InfraMachineRead | None, name: str, will_exist: bool = True) -> None:
    """InfrastructureReady from the machine; ``will_exist`` False: there is no VSphereMachine and
    none is being applied (the VM is not scheduled)."""
    ready = machine.ready if machine is not None else None
    if machine is None and not will_exist:
        conds.set(C.INFRASTRUCTURE_READY, False, Reason.WAITING_FOR_INFRASTRUCTURE, NOT_SCHEDULED_INFRA_MESSAGE)
    elif ready is None or (ready.status is not ConditionStatus.TRUE and ready.reason in PROGRESS_REASONS):
        # One reason and message for "absent", "no Ready yet" and every progress step, so the
        # VM's status is written once while the machine is being provisioned.
        conds.set(C.INFRASTRUCTURE_READY, False, Reason.WAITING_FOR_INFRASTRUCTURE, f"VSphereMachine {name} is not Ready yet")
    else:
        conds.set(C.INFRASTRUCTURE_READY, ready.status, ready.reason, ready.message)


def _finish(s: Snapshot, conds: _Conds, status: VirtualMachineStatus, **plan: Any) -> Plan:
    status.conditions = conds.items
    desired = status.to_wire()
    current = (s.vm.status or VirtualMachineStatus()).to_wire()
    return Plan(status=None if desired == current else desired, **plan)


def _ready(conds: _Conds, s: Snapshot, machine: InfraMachineRead | None, blocked: tuple[str, str] | None) -> None:
    name = s.vm.metadata.name or ""
    infra = get_condition(conds.items, C.INFRASTRUCTURE_READY)
    desired_power = s.vm.spec.desired_power_state
    if blocked is not None:
        conds.set(C.READY, False, *blocked)
    elif infra is None or infra.status is not ConditionStatus.TRUE:
        conds.set(C.READY, False, infra.reason if infra else Reason.WAITING_FOR_INFRASTRUCTURE,
                  infra.message if infra else "")
    elif machine is None or not machine.provisioned:
        conds.set(C.READY, False, Reason.WAITING_FOR_INFRASTRUCTURE, f"VSphereMachine {name} is not provisioned yet")
    elif machine.power_state is not desired_power:
        observed = machine.power_state.value if machine.power_state else "unknown"
        conds.set(C.READY, False, Reason.WAITING_FOR_POWER_STATE, f"desired {desired_power.value}, observed {observed}")
    else:
        conds.set(C.READY, True, Reason.READY)


def in_progress(machine: InfraMachineRead | None) -> bool:
    """Whether the machine is still being provisioned: no Ready condition yet, or Ready False
    with a progress reason (``PROGRESS_REASONS``)."""
    if machine is None:
        return False
    ready = machine.ready
    return ready is None or (ready.status is not ConditionStatus.TRUE and ready.reason in PROGRESS_REASONS)


def _mirror(status: VirtualMachineStatus, machine: InfraMachineRead | None, name: str, exists: bool) -> None:
    status.infrastructure_ref = (
        ContractVersionedObjectReference(api_group=INFRA_GROUP, kind="VSphereMachine", name=name) if exists else None
    )
    if in_progress(machine):
        # While the provider steps through cloning, powering on and waiting for an address, the
        # mirrored fields keep their last written values: one VM status write when the step
        # sequence ends instead of one per step (the write budget per VM is small).
        return
    status.initialization = Initialization(provisioned=True) if machine and machine.provisioned else None
    status.addresses = list(machine.addresses) or None if machine else None
    # CAPI's Machine controller copies spec.providerID once the InfraMachine is provisioned.
    status.provider_id = machine.provider_id if machine and machine.provisioned else None
    status.observed_power_state = machine.power_state if machine else None


@dataclass
class _Placing:
    """Where this reconcile leaves the VM: ``target`` to apply (None: nothing to apply) and
    whether it is ``valid`` (False: an invalid placement kept by policy), what blocks Ready
    (reason, message), and the side effects of a migration."""

    target: Placement | None = None
    valid: bool = True
    blocked: tuple[str, str] | None = None
    delete_machine: bool = False
    clear_annotation: bool = False


class _Decider:
    """One run of ``decide``: the snapshot, the conditions being built, the events to record."""

    def __init__(self, s: Snapshot) -> None:
        self.s = s
        self.vm = s.vm
        self.name = s.vm.metadata.name or ""
        self.conds = _Conds(s.vm.status.conditions if s.vm.status else None, s.vm.metadata.generation, s.now)
        self.machine = InfraMachineRead.from_machine(s.machine) if s.machine is not None else None
        self.status = (s.vm.status or VirtualMachineStatus()).model_copy(deep=True)
        self.events: list[RecordedEvent] = []
        self.was_scheduled = get_condition(self.conds.items, C.SCHEDULED)
        migrating = get_condition(self.conds.items, C.MIGRATING)
        self.was_migrating = migrating is not None and migrating.status is ConditionStatus.TRUE
        self.annotated = (s.vm.metadata.annotations or {}).get(ANNOTATION_MIGRATE) == "true"

    def unschedulable(self, reason: str, message: str) -> tuple[str, str]:
        self.conds.set(C.SCHEDULED, False, reason, message)
        if self.was_scheduled is None or self.was_scheduled.reason != reason:
            self.events.append(RecordedEvent("Warning", "FailedScheduling", message))
        return (reason, message)

    def paused(self) -> Plan:
        self.conds.set(C.PAUSED, True, Reason.PAUSED, "spec.paused is true")
        if get_condition(self.conds.items, C.READY) is None:
            self.conds.set(C.READY, False, Reason.PAUSED, "spec.paused is true")
        return _finish(self.s, self.conds, self.status)

    def deleting(self) -> Plan:
        if FINALIZER_VIRTUAL_MACHINE not in (self.vm.metadata.finalizers or ()):
            return Plan()
        if self.machine is None:
            return Plan(remove_finalizer=True)
        _infra_condition(self.conds, self.machine, self.name)
        self.conds.set(C.READY, False, Reason.DELETING, f"waiting for VSphereMachine {self.name} to be deleted")
        return _finish(self.s, self.conds, self.status, delete_machine=not self.machine.deleting)

    def conflict(self) -> Plan:
        """A VSphereMachine of the VM's name belongs to something else: leave it alone."""
        if self.vm.metadata.deletion_timestamp is not None:
            return Plan(remove_finalizer=FINALIZER_VIRTUAL_MACHINE in (self.vm.metadata.finalizers or ()))
        message = (f"VSphereMachine {self.name} exists and belongs to another object; delete it or give this "
                   "VirtualMachine another name")
        self.conds.set(C.PAUSED, False, Reason.NOT_PAUSED)
        self.status.observed_generation = self.vm.metadata.generation
        for type_ in (C.SCHEDULED, C.INFRASTRUCTURE_READY, C.READY):
            self.conds.set(type_, False, Reason.INFRASTRUCTURE_CONFLICT, message)
        if self.was_scheduled is None or self.was_scheduled.reason != Reason.INFRASTRUCTURE_CONFLICT:
            self.events.append(RecordedEvent("Warning", Reason.INFRASTRUCTURE_CONFLICT, message))
        return _finish(self.s, self.conds, self.status, events=tuple(self.events))

    def unresolved(self, current: tuple[str, str] | None, mismatch: tuple[str, str] | None = None) -> _Placing:
        """The VMClass or VMImage is missing, or ``mismatch`` = (reason, message) says the VM's
        spec names something its class lacks (``InterfaceNotInClass``), network settings that
        cannot work with the class's (``NetworkSettingsInconsistent``), or the class names a
        storage/network class the placed VM's failure domain does not offer (``ClassNotOffered``,
        ``class_not_offered``): nothing can be placed or applied. A VM that is placed and has its VSphereMachine keeps running as it is (ADR 0012):
        its machine is left alone and mirrored, ``Ready`` follows it, and ``ReferencesResolved``
        False says what is missing; a new VMClass/VMImage of that name (or a fixed spec) is picked
        up when it appears."""
        vm = self.vm
        if mismatch is not None:
            reason, message = mismatch
        elif self.s.vm_class is None:
            reason = VirtualMachineReason.CLASS_NOT_FOUND
            message = not_found_message("VMClass", vm.spec.class_ref.name)
        else:
            reason = VirtualMachineReason.IMAGE_NOT_FOUND
            message = not_found_message("VMImage", vm.spec.image_ref.name)
        if current is not None and self.machine is not None and not self.machine.deleting:
            self.conds.set(C.REFERENCES_RESOLVED, False, reason, f"{message}; the running VM is kept as it is")
            return _Placing(target=None)
        blocked = self.unschedulable(reason, message)
        if get_condition(self.conds.items, C.PLACEMENT_VALID) is None:
            self.conds.set(C.PLACEMENT_VALID, ConditionStatus.UNKNOWN, Reason.NOT_SCHEDULED, "not scheduled yet")
        if get_condition(self.conds.items, C.MIGRATING) is None:
            self.conds.set(C.MIGRATING, False, Reason.NOT_MIGRATING)
        return _Placing(blocked=blocked)

    def drift(self, decision: SchedulingDecision, current: tuple[str, str], invalid: tuple[str, str]) -> _Placing:
        """The current placement is no longer valid, ``invalid`` = (reason, message) (SPEC §4
        drift, migration policies)."""
        bad_reason, bad_message = invalid
        policy = self.vm.spec.migration_policy
        may_move = policy is MigrationPolicy.AUTOMATIC or (policy is MigrationPolicy.MANUAL and self.annotated)
        new = decision.placement
        if may_move and new is not None:
            reason = (VirtualMachineReason.PROVIDER_CHANGED if new.provider_name != current[0]
                      else VirtualMachineReason.FAILURE_DOMAIN_CHANGED)
            message = f"moving from {current[0]}/{current[1]} to {new.provider_name}/{new.failure_domain}: {bad_message}"
            self.conds.set(C.MIGRATING, True, reason, message)
            if not self.was_migrating:
                self.events.append(RecordedEvent("Normal", reason, message))
                # A move is a re-creation: say what it destroys (ADR 0012).
                self.events.append(RecordedEvent("Warning", Reason.MIGRATION_DESTROYS_VM, (
                    f"migrationPolicy {policy.value}{' (annotated ' + ANNOTATION_MIGRATE + ')' if policy is MigrationPolicy.MANUAL else ''}: "
                    f"destroying VM {self.name} and its disks on {current[0]}/{current[1]} (guest data is lost) "
                    f"and cloning a new one from the image on {new.provider_name}/{new.failure_domain}")))
            if self.machine is None:
                # The old machine is gone: place again (the annotation is used up now).
                return _Placing(target=new, clear_annotation=self.annotated)
            self.conds.set(C.PLACEMENT_VALID, False, bad_reason, bad_message)
            wait = f"waiting for VSphereMachine {self.name} to be deleted before placing it on {new.provider_name}/{new.failure_domain}"
            return _Placing(blocked=(reason, wait), delete_machine=not self.machine.deleting)
        if may_move and self.machine is None:
            # The old machine is gone and nothing else fits: wait rather than recreate the VM on
            # a placement known to be invalid.
            self.conds.set(C.PLACEMENT_VALID, False, bad_reason, bad_message)
            reason = decision.reason or VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED
            return _Placing(blocked=self.unschedulable(reason, decision.message))
        if policy is MigrationPolicy.NEVER:
            hint = "migrationPolicy is never: the VM stays where it is"
        elif new is None:
            hint = f"no other placement fits ({decision.reason}: {decision.message})"
        else:
            hint = f'annotate {ANNOTATION_MIGRATE}="true" to move it to {new.provider_name}/{new.failure_domain}'
        self.conds.set(C.PLACEMENT_VALID, False, bad_reason, f"{bad_message}; {hint}")
        self.conds.set(C.MIGRATING, False, Reason.NOT_MIGRATING)
        return _Placing(target=_old_placement(self.s, current), valid=False)

    def place(self, decision: SchedulingDecision, current: tuple[str, str] | None) -> _Placing:
        """Schedule, or handle drift of the current placement."""
        if current is not None and decision.current_invalid is not None:
            return self.drift(decision, current, decision.current_invalid)
        if decision.placement is None:
            reason = decision.reason or VirtualMachineReason.NO_PROVIDER_MATCHED
            blocked = self.unschedulable(reason, decision.message)
            self.conds.set(C.PLACEMENT_VALID, ConditionStatus.UNKNOWN, Reason.NOT_SCHEDULED, "not scheduled yet")
            self.conds.set(C.MIGRATING, False, Reason.NOT_MIGRATING)
            return _Placing(blocked=blocked)
        if not self.was_migrating:
            self.conds.set(C.MIGRATING, False, Reason.NOT_MIGRATING)
        elif self.machine is not None and self.machine.provisioned and self.machine.ready is not None and \
                self.machine.ready.status is ConditionStatus.TRUE:
            # A migration ends when the machine on the new placement is Ready.
            self.conds.set(C.MIGRATING, False, Reason.NOT_MIGRATING)
        # A migrate annotation on a valid placement has nothing to authorise: clear it.
        return _Placing(target=decision.placement, clear_annotation=self.annotated)

    def apply(self, placing: _Placing, current: tuple[str, str] | None) -> dict[str, Any] | None:
        """Record ``placing.target`` as the placement; the VSphereMachine body when it differs."""
        target = placing.target
        if target is None or self.s.vm_class is None:
            return None
        where = (target.provider_name, target.failure_domain)
        if placing.valid:
            self.conds.set(C.PLACEMENT_VALID, True, Reason.VALID)
        scheduled_before = self.was_scheduled is not None and self.was_scheduled.status is ConditionStatus.TRUE
        if not scheduled_before or where != current:
            self.events.append(RecordedEvent("Normal", Reason.SCHEDULED, f"placed on {where[0]}/{where[1]}"))
        self.conds.set(C.SCHEDULED, True, Reason.SCHEDULED, f"on {where[0]}/{where[1]}")
        self.status.scheduled = _scheduled(self.s, target)
        if self.machine is not None and self.machine.deleting:
            return None  # recreated once gone
        wanted = desired_machine(self.vm, self.s.vm_class, target)
        return wanted if machine_differs(self.s.machine, wanted) else None


def decide(s: Snapshot) -> Plan:
    """The plan for one reconcile of ``s.vm`` (module docstring). Never raises."""
    d = _Decider(s)
    if s.vm.spec.paused:
        return d.paused()
    if s.machine is not None and not owns(s.vm, s.machine):
        return d.conflict()
    if s.vm.metadata.deletion_timestamp is not None:
        return d.deleting()
    d.conds.set(C.PAUSED, False, Reason.NOT_PAUSED)
    d.status.observed_generation = s.vm.metadata.generation
    current = current_placement(s.vm, d.machine)
    mismatch = (interface_mismatch(s.vm, s.vm_class) or network_inconsistency(s.vm, s.vm_class)
                or (address_conflict(s.vm, s.vm_class, s.address_claims) if current is None else None)
                or class_not_offered(s, current) if s.vm_class is not None else None)
    if s.vm_class is None or s.image is None or mismatch is not None:
        placing = d.unresolved(current, mismatch)
    else:
        if get_condition(d.conds.items, C.REFERENCES_RESOLVED) is not None:
            d.conds.set(C.REFERENCES_RESOLVED, True, Reason.RESOLVED)
        decision = schedule(SchedulingInput(s.vm, s.vm_class, s.image, s.providers, s.peers, current, totals=s.peer_totals))
        placing = d.place(decision, current)
    apply_machine = d.apply(placing, current)
    if (apply_machine is None and (s.vm_class is None or s.image is None or mismatch is not None)
            and s.machine is not None and d.machine is not None and not d.machine.deleting):
        # Nothing can be applied but power, which is always carried out (ADR 0012).
        apply_machine = power_only_machine(s.vm, s.machine)
    blocked = placing.blocked
    migrating = get_condition(d.conds.items, C.MIGRATING)
    if blocked is None and migrating is not None and migrating.status is ConditionStatus.TRUE:
        blocked = (migrating.reason, migrating.message)
    _infra_condition(d.conds, d.machine, d.name, will_exist=d.machine is not None or apply_machine is not None)
    pending = d.machine.hardware_change_pending if d.machine is not None else None
    if pending is not None:
        # What of a class edit is not applied to the VM yet (ADR 0012): shown, never NotReady.
        message = pending.message or ""
        held = get_condition(d.conds.items, C.REFERENCES_RESOLVED)
        if held is not None and held.status is ConditionStatus.FALSE and pending.status is ConditionStatus.TRUE:
            # The class edit is held whole (the machine is left alone): what the machine reports
            # pending comes from the class as it was last applied, not from the class as it
            # reads now (it read as if the current class asked it).
            message = (f"the VMClass edit is not applied ({held.reason}, see ReferencesResolved); "
                       f"from the class as last applied: {message}")
        d.conds.set(C.HARDWARE_CHANGE_PENDING, pending.status, pending.reason, message)
    _mirror(d.status, d.machine, d.name, d.machine is not None or apply_machine is not None)
    _ready(d.conds, s, d.machine, blocked)
    target = placing.target
    return _finish(
        s, d.conds, d.status,
        add_finalizer=FINALIZER_VIRTUAL_MACHINE not in (s.vm.metadata.finalizers or ()),
        delete_machine=placing.delete_machine,
        apply_machine=apply_machine,
        clear_migrate_annotation=placing.clear_annotation,
        placement=(target.provider_name, target.failure_domain) if target is not None else None,
        events=tuple(d.events),
    )
