"""The VirtualMachine scheduler: a pure function from (VM, class, image, Providers, peers) to a placement.

SPEC §4 "schedule (pure function: provider selector, failure-domain selector, image ready on that
Provider, storage/network classes and features available, firmware, capacity, required
anti-affinity by topology label value excluding itself; keep the current placement while it stays
valid; otherwise most free capacity, then name)".

Filters, in order (a candidate is one failure domain of one Provider of the VM's namespace):

1. Provider: a class this role can realise (``vsphere``: the only InfraMachine kind is
   VSphereMachine) with a source in the VMImage, matching ``placement.providerSelector``
   (absent: every Provider) -> ``NoProviderMatched``.
2. Image: the Provider's ``status.images[]`` row for the VMImage (written there, not on the
   cluster-scoped VMImage, by the VMImage controller; issue 23) with ``ready: true``, on a
   Provider whose ``ProviderReachable`` is not False (a vCenter that stopped answering takes no
   new VM at once, before the image row follows its ``Ready``) and that is not ``Ready`` False
   ``DuplicateVCenter`` (another, older Provider reaches the same vCenter and places there:
   ADR 0013) -> ``ImageNotReady``.
3. Failure domain: labels match ``placement.failureDomainSelector`` (absent: all); the class's
   storage classes ⊆ ``availableStorageClasses``, network classes ⊆ ``availableNetworkClasses``,
   class features ⊆ domain features ∪ Provider ``spec.capabilities.features``
   -> ``NoFailureDomainMatched``.
4. Firmware: the class firmware is one of the domain's features when the domain reports any
   firmware feature (``bios``/``efi``/``efi-secure``, as the vSphere inventory detects them); a
   domain reporting none is not filtered on firmware -> ``FirmwareUnsupported``.
5. Capacity, reservation first (issue 21; docs/concepts.md "How capacity is counted"): the
   domain's ``memoryTotalMiB`` minus the configured memory of every peer placed there (and of
   every VSphereMachine no VirtualMachine owns: ``machine_totals``) >= class memory, and per datastore (``capacity.storageClasses[].datastore``, shared by the domains that
   store onto it, so counted once) its ``totalGiB`` minus the disks placed on it from any domain
   of the Provider >= the class's disks there (``reservation_shortfall``); then, as a guard,
   capacity (free, as the Provider reports it, minus what the peers placed on the domain that the
   report may not include yet will take: those not provisioned yet, and those provisioned at or
   after the domain's ``capacity.updateTime`` — all provisioned ones when it has none; the
   report is refreshed every 300 s, so a VM counts until a report taken after it was
   provisioned is written): memoryMiB >= class memory, storageGiB >= sum of the class disks.
   CPU MHz is not a filter: vSphere overcommits vCPUs and reserves no MHz by default, so a vCPU
   count has no MHz cost to compare. An unreported dimension is not filtered
   -> ``InsufficientCapacity``.
6. Required anti-affinity (Kubernetes ``requiredDuringSchedulingIgnoredDuringExecution``): a
   term excludes a domain when a peer VM of the namespace (never the VM itself) selected by its
   ``labelSelector`` is scheduled on a domain whose label ``topologyKey`` has the same value; a
   domain without that label is not constrained by the term. Terms of already scheduled peers
   that select this VM count too (symmetry, as kube-scheduler) -> ``AntiAffinityUnsatisfied``.

When nothing fits, the reason is that of the deepest filter some candidate reached (the most
specific one), with a message naming what was missing.

Stickiness: the current placement (``status.scheduled``) is kept while it stays valid, where valid
means filters 1, 3 and 4 still pass. Image readiness, capacity and anti-affinity are checked only
when placing (the VM already uses the capacity; a transient image lookup failure must not move a
running VM; anti-affinity is IgnoredDuringExecution).

Ranking: fewest violated preferred anti-affinity terms, then most free memory, then storage (both
after the pending peers of rule 5), then CPU MHz, then fewest peers on the Provider, then fewest
peers in the failure domain (spread over vCenters, then over domains, when capacity ties — e.g.
when the reported capacity already includes the peers), then Provider name, then failure-domain
name (deterministic).

Peers: the other VMs of the namespace (never the VM itself). Rule 5 and the ranking read their
sums (``PeerTotals``): per (Provider, failure domain) the memory and storage of the peers placed
there that the domain's reported capacity may not include yet (rule 5), and the number of
placed peers per Provider and per domain. The counts include provisioned peers: they are what spreads VMs when the reported capacity already
includes the peers (above; docs/concepts.md: "fewest VMs on the Provider"). The VirtualMachine
reconciler keeps these sums over every placed VM of the namespace from informer events
(``banlieue.reconcilers.virtualmachine.placement_totals``, kube-scheduler's cache with assumed placements) and
passes them as ``SchedulingInput.totals``, so a placement costs O(failure domains), not O(peers);
``peers`` then holds only what rule 6 reads (the VMs with anti-affinity terms, or every VM of
the namespace when the VM has terms of its own). Without ``totals`` they are summed from
``peers``.

``schedule`` never raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from banlieue.api.conditions import READY, get_condition
from banlieue.api.meta import ConditionStatus, LabelSelector
from banlieue.api.provider import PROVIDER_REACHABLE, Provider, ProviderConditionReason, ProviderFailureDomain
from banlieue.api.virtualmachine import (
    AntiAffinityMode,
    AntiAffinityTerm,
    ResolvedNetwork,
    ResolvedStorage,
    VirtualMachine,
    VirtualMachineReason,
)
from banlieue.api.vmclass import VMClass
from banlieue.api.vmimage import VMImage

FIRMWARE_FEATURES = frozenset({"bios", "efi", "efi-secure"})
"""Feature names that describe firmware support (banlieue.backends.vsphere.inventory)."""
MAX_LISTED = 5
"""How many offenders a message names before it says "and N more"."""


@dataclass(frozen=True)
class PeerPlacement:
    """Where another VM of the namespace is (or is assumed to be) scheduled."""

    name: str
    labels: dict[str, str]
    provider_name: str
    failure_domain: str
    anti_affinity: tuple[AntiAffinityTerm, ...] = ()
    pending_memory_mib: int = 0
    """Memory of a peer the domain's reported free capacity may not include yet (rule 5: not
    provisioned, or provisioned at or after the report); read only when
    ``SchedulingInput.totals`` is None."""
    pending_storage_gib: int = 0
    """Storage of such a peer; as ``pending_memory_mib``."""
    memory_mib: int = 0
    """Configured memory of the peer (its class), reserved in its domain whatever its state
    (rule 5, reservation); read only when ``SchedulingInput.totals`` is None."""
    storage_gib: tuple[tuple[str, int], ...] = ()
    """Its disks' GiB per storage class name; as ``memory_mib``."""


@dataclass(frozen=True)
class Candidate:
    """One failure domain of one Provider."""

    provider: Provider
    domain: ProviderFailureDomain

    @property
    def provider_name(self) -> str:
        return self.provider.metadata.name or ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider_name, self.domain.name)


@dataclass(frozen=True)
class Placement:
    """A chosen placement: Provider, its class, failure domain, and how the class resolved there."""

    provider_name: str
    provider_class: str
    failure_domain: str
    template: str | None
    resolved_storage: tuple[ResolvedStorage, ...] = ()
    resolved_networks: tuple[ResolvedNetwork, ...] = ()


@dataclass(frozen=True)
class SchedulingDecision:
    """The scheduler's answer.

    ``placement`` is set when something fits (``kept`` says it is the current placement);
    otherwise ``reason``/``message`` say why not. ``current_invalid`` is set (reason, message)
    when the VM had a placement that is no longer valid (drift), whatever was decided.
    """

    placement: Placement | None = None
    kept: bool = False
    reason: str | None = None
    message: str = ""
    current_invalid: tuple[str, str] | None = None


@dataclass(frozen=True)
class SchedulingInput:
    """Everything the scheduler reads. ``providers``: the Providers of the VM's namespace (all of
    them; peers may sit on ones the selector excludes). ``peers``: the other VMs' placements.
    ``current``: (providerName, failureDomain) of ``status.scheduled``, or None. ``totals``: the
    peers' sums for capacity and ranking when the caller keeps them (module docstring, "Peers");
    None: ``PeerTotals.of`` sums ``peers``, which must then hold every peer that counts."""

    vm: VirtualMachine
    vm_class: VMClass
    image: VMImage
    providers: tuple[Provider, ...]
    peers: tuple[PeerPlacement, ...] = ()
    current: tuple[str, str] | None = None
    provider_classes: frozenset[str] = frozenset({"vsphere"})
    totals: PeerTotals | None = None


def _names(items: Iterable[str]) -> str:
    items = sorted(set(items))
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _selector_text(selector: LabelSelector | None) -> str:
    """A selector in kubectl's label-selector syntax (``<none>``: absent or empty, matches all)."""
    return "<none>" if selector is None else selector.format()


def provider_class_of(provider: Provider) -> str:
    """The provider class name (``vsphere``)."""
    return provider.spec.provider_class_ref.name


def image_template(image: VMImage, provider_class: str) -> str | None:
    """The image source ``ref`` for a provider class, or None."""
    for source in image.spec.sources or ():
        if source.provider_class == provider_class:
            return source.ref
    return None


def image_ready_on(image: VMImage, provider: Provider) -> tuple[bool, str]:
    """Whether the Provider's ``status.images[]`` row for this image is ready and the
    Provider's vCenter answers (``ProviderReachable`` not False); why not otherwise."""
    conditions = provider.status.conditions if provider.status else None
    reachable = get_condition(conditions, PROVIDER_REACHABLE)
    if reachable is not None and reachable.status is ConditionStatus.FALSE:
        return False, f"vCenter not reachable: {reachable.message}".rstrip(": ")
    ready = get_condition(conditions, READY)
    if ready is not None and ready.status is ConditionStatus.FALSE and ready.reason == ProviderConditionReason.DUPLICATE_VCENTER:
        return False, f"{ready.reason}: {ready.message}"
    for row in (provider.status.images if provider.status else None) or ():
        if row.name == image.metadata.name:
            if row.ready:
                return True, ""
            return False, f"{row.reason or 'NotReady'}: {row.message or ''}".rstrip(": ")
    return False, "not resolved yet"


def _class_storage(vm_class: VMClass) -> set[str]:
    return {d.storage_class for d in vm_class.spec.hardware.disks or ()}


def _class_networks(vm_class: VMClass) -> set[str]:
    return {i.network_class for i in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ()}


def domain_missing(vm_class: VMClass, provider: Provider, domain: ProviderFailureDomain) -> list[str]:
    """What the failure domain lacks for the class: ``storage class x`` / ``network class y`` /
    ``feature z`` entries (empty when it offers everything)."""
    attrs = domain.attributes
    storage = set(attrs.available_storage_classes or ()) if attrs else set()
    networks = set(attrs.available_network_classes or ()) if attrs else set()
    features = set(attrs.features or ()) if attrs else set()
    caps = provider.spec.capabilities
    features |= set(caps.features or ()) if caps else set()
    missing = [f"storage class {s}" for s in sorted(_class_storage(vm_class) - storage)]
    missing += [f"network class {n}" for n in sorted(_class_networks(vm_class) - networks)]
    missing += [f"feature {f}" for f in sorted(set(vm_class.spec.features or ()) - features)]
    return missing


def firmware_supported(vm_class: VMClass, domain: ProviderFailureDomain) -> bool:
    """See module docstring, rule 4."""
    features = set((domain.attributes.features if domain.attributes else None) or ())
    reported = features & FIRMWARE_FEATURES
    return not reported or str(vm_class.spec.firmware) in reported


@dataclass(frozen=True)
class Free:
    """Free capacity of a candidate after the pending peers placed on it: memory MiB, storage
    GiB, CPU MHz (None = not reported)."""

    memory_mib: int | None
    storage_gib: int | None
    cpu_mhz: int | None


@dataclass(frozen=True)
class Reserved:
    """What the VMs placed in one failure domain reserve: configured memory MiB and disk GiB per
    storage class name (rule 5, reservation)."""

    memory_mib: int = 0
    storage_gib: Mapping[str, int] = field(default_factory=dict)

    def plus(self, memory_mib: int, storage_gib: Mapping[str, int], n: int = 1) -> Reserved:
        """This reservation with ``n`` more VMs of ``memory_mib`` and ``storage_gib`` each."""
        storage = dict(self.storage_gib)
        for name, gib in storage_gib.items():
            storage[name] = storage.get(name, 0) + n * gib
        return Reserved(self.memory_mib + n * memory_mib, storage)


@dataclass(frozen=True)
class PeerTotals:
    """The peers (the VM itself excluded) summed per Provider and failure domain, in one pass:
    ``pending``: (provider, domain) -> (memory MiB, storage GiB) of the peers placed there that
    its reported capacity may not include yet (rule 5);
    ``on_provider`` / ``in_domain``: peer counts. Without it every candidate would walk every
    peer, O(peers x candidates) per placement and quadratic over a burst (docs/performance.md)."""

    pending: dict[tuple[str, str], tuple[int, int]]
    on_provider: dict[str, int]
    in_domain: dict[tuple[str, str], int]
    reserved: dict[tuple[str, str], Reserved] = field(default_factory=dict)
    """(provider, domain) -> what every peer placed there reserves (rule 5, reservation)."""

    @staticmethod
    def of(inp: SchedulingInput) -> PeerTotals:
        """Sum ``inp.peers`` (the reference the incremental sums of ``virtualmachine.placement_totals`` are
        tested against)."""
        me = inp.vm.metadata.name
        pending: dict[tuple[str, str], tuple[int, int]] = {}
        on_provider: dict[str, int] = {}
        in_domain: dict[tuple[str, str], int] = {}
        reserved: dict[tuple[str, str], Reserved] = {}
        for p in inp.peers:
            if p.name == me:
                continue
            key = (p.provider_name, p.failure_domain)
            mem, storage = pending.get(key, (0, 0))
            pending[key] = (mem + p.pending_memory_mib, storage + p.pending_storage_gib)
            on_provider[p.provider_name] = on_provider.get(p.provider_name, 0) + 1
            in_domain[key] = in_domain.get(key, 0) + 1
            reserved[key] = reserved.get(key, Reserved()).plus(p.memory_mib, dict(p.storage_gib))
        return PeerTotals(pending, on_provider, in_domain, reserved)


def capacity_report_times(providers: Iterable[Provider]) -> dict[tuple[str, str], datetime]:
    """(provider, failure domain) -> ``attributes.capacity.updateTime``, for the domains that
    report one (rule 5: the peers provisioned at or after it still count as pending)."""
    out: dict[tuple[str, str], datetime] = {}
    for p in providers:
        for d in _domains(p):
            cap = d.attributes.capacity if d.attributes else None
            if cap is not None and cap.update_time is not None:
                out[(p.metadata.name or "", d.name)] = cap.update_time
    return out


def peer_totals(inp: SchedulingInput) -> PeerTotals:
    """``inp.totals`` when the caller keeps them, else ``PeerTotals.of(inp)``."""
    return inp.totals if inp.totals is not None else PeerTotals.of(inp)


def free_capacity(inp: SchedulingInput, cand: Candidate, totals: PeerTotals | None = None) -> Free:
    """The domain's reported free capacity minus what the peers placed there that the report may
    not include yet will take (rule 5; kube-scheduler's "assumed" pods, kept until the node's
    state confirms them: a burst of VMs must not all count the same free memory before the
    Provider's next inventory). ``totals``: ``peer_totals(inp)``, when the caller has it."""
    cap = cand.domain.attributes.capacity if cand.domain.attributes else None
    if cap is None:
        return Free(None, None, None)
    pending_mem, pending_storage = (totals or peer_totals(inp)).pending.get(cand.key, (0, 0))
    mem = None if cap.memory_mib is None else cap.memory_mib - pending_mem
    storage = None if cap.storage_gib is None else cap.storage_gib - pending_storage
    return Free(mem, storage, cap.cpu_mhz)


def class_storage_gib(vm_class: VMClass) -> int:
    """Storage a VM of the class needs: the sum of its disks, GiB."""
    return sum(d.size_gib for d in vm_class.spec.hardware.disks or ())


def capacity_shortfall(vm_class: VMClass, free: Free) -> list[str]:
    """Capacity the domain lacks (``memory 4096 MiB needed, 1024 free``); empty when it fits."""
    out: list[str] = []
    need_mem = vm_class.spec.hardware.memory_mib
    if free.memory_mib is not None and free.memory_mib < need_mem:
        out.append(f"memory {need_mem} MiB needed, {max(free.memory_mib, 0)} free")
    need_storage = class_storage_gib(vm_class)
    if free.storage_gib is not None and free.storage_gib < need_storage:
        out.append(f"storage {need_storage} GiB needed, {max(free.storage_gib, 0)} free")
    return out


def class_storage_by_class(vm_class: VMClass) -> dict[str, int]:
    """The class's disks' GiB per storage class name."""
    out: dict[str, int] = {}
    for d in vm_class.spec.hardware.disks or ():
        out[d.storage_class] = out.get(d.storage_class, 0) + d.size_gib
    return out


def datastore_reservations(provider: Provider, totals: PeerTotals) -> dict[str, int]:
    """Datastore (``capacity.storageClasses[].datastore``) -> GiB the peers placed on
    ``provider`` reserve there, over every failure domain that stores onto it (a datastore shared
    by three clusters is one datastore: counted once, not three times)."""
    name = provider.metadata.name or ""
    out: dict[str, int] = {}
    for d in _domains(provider):
        cap = d.attributes.capacity if d.attributes else None
        held = totals.reserved.get((name, d.name))
        if cap is None or held is None:
            continue
        for entry in cap.storage_classes or ():
            gib = held.storage_gib.get(entry.name, 0)
            if gib:
                out[entry.datastore] = out.get(entry.datastore, 0) + gib
    return out


def reservation_shortfall(vm_class: VMClass, cand: Candidate, totals: PeerTotals,
                          datastores: Mapping[str, int]) -> list[str]:
    """What the domain cannot reserve for a VM of ``vm_class`` (rule 5, reservation): its total
    memory minus the configured memory of the VMs placed there, and per datastore its size minus
    the disks placed on it from any domain (``datastores``: ``datastore_reservations``). A total
    the Provider does not report is not checked. Empty when it fits."""
    cap = cand.domain.attributes.capacity if cand.domain.attributes else None
    if cap is None:
        return []
    out: list[str] = []
    held = totals.reserved.get(cand.key, Reserved())
    need_mem = vm_class.spec.hardware.memory_mib
    if cap.memory_total_mib is not None and cap.memory_total_mib - held.memory_mib < need_mem:
        left = max(cap.memory_total_mib - held.memory_mib, 0)
        out.append(f"memory {need_mem} MiB needed, {left} of {cap.memory_total_mib} MiB not reserved by the VMs placed here")
    by_class = {entry.name: entry for entry in cap.storage_classes or ()}
    need: dict[str, int] = {}
    size: dict[str, int] = {}
    for sc, gib in class_storage_by_class(vm_class).items():
        entry = by_class.get(sc)
        if entry is not None:
            need[entry.datastore] = need.get(entry.datastore, 0) + gib
            size[entry.datastore] = entry.total_gib
    for ds, gib in sorted(need.items()):
        left = size[ds] - datastores.get(ds, 0)
        if left < gib:
            out.append(f"storage {gib} GiB needed on {ds}, {max(left, 0)} of {size[ds]} GiB not reserved by the VMs placed there")
    return out


def _term_selects(term: AntiAffinityTerm, labels: dict[str, str]) -> bool:
    # A term without a labelSelector selects nothing (metav1: nil selector matches nothing).
    return term.label_selector is not None and term.label_selector.matches(labels)


def anti_affinity_violations(
    inp: SchedulingInput, cand: Candidate, mode: AntiAffinityMode, domain_labels: dict[tuple[str, str], dict[str, str]]
) -> list[str]:
    """Peers that violate ``mode`` terms if the VM were placed on ``cand`` (messages)."""
    here = cand.domain.labels or {}
    me = inp.vm.metadata.name
    my_labels = inp.vm.metadata.labels or {}
    own_terms = [t for t in (inp.vm.spec.placement.anti_affinity if inp.vm.spec.placement else None) or () if t.mode is mode]
    out: list[str] = []
    if not own_terms and not any(peer.anti_affinity for peer in inp.peers):
        return out  # no term on either side: nothing to check per peer
    for peer in inp.peers:
        if peer.name == me:
            continue
        there = domain_labels.get((peer.provider_name, peer.failure_domain))
        if there is None:
            continue
        for term in own_terms:
            value = here.get(term.topology_key)
            if value is not None and _term_selects(term, peer.labels) and there.get(term.topology_key) == value:
                out.append(f"{peer.name} ({term.topology_key}={value})")
        for term in peer.anti_affinity:
            if term.mode is not mode:
                continue
            value = there.get(term.topology_key)
            if value is not None and _term_selects(term, my_labels) and here.get(term.topology_key) == value:
                out.append(f"{peer.name} ({term.topology_key}={value}, its own term)")
    return out


def _resolve(vm_class: VMClass, provider: Provider) -> tuple[tuple[ResolvedStorage, ...], tuple[ResolvedNetwork, ...]]:
    caps = provider.spec.capabilities
    storage_map = {s.name: s.target for s in (caps.storage_classes if caps else None) or ()}
    network_map = {n.name: n.target for n in (caps.network_classes if caps else None) or ()}
    storage: list[ResolvedStorage] = []
    for disk in vm_class.spec.hardware.disks or ():
        st = storage_map.get(disk.storage_class)
        storage.append(
            ResolvedStorage(
                name=disk.name,
                storage_class=disk.storage_class,
                datastore=st.datastore if st else None,
                datastore_cluster=st.datastore_cluster if st else None,
            )
        )
    networks: list[ResolvedNetwork] = []
    for nic in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ():
        nt = network_map.get(nic.network_class)
        networks.append(
            ResolvedNetwork(
                name=nic.name,
                network_class=nic.network_class,
                port_group=nt.port_group if nt else None,
                distributed_port_group=nt.distributed_port_group if nt else None,
            )
        )
    return tuple(storage), tuple(networks)


def placement_for(inp: SchedulingInput, cand: Candidate) -> Placement:
    """The ``Placement`` record of a candidate (template and resolved classes)."""
    pclass = provider_class_of(cand.provider)
    storage, networks = _resolve(inp.vm_class, cand.provider)
    return Placement(
        provider_name=cand.provider_name,
        provider_class=pclass,
        failure_domain=cand.domain.name,
        template=image_template(inp.image, pclass),
        resolved_storage=storage,
        resolved_networks=networks,
    )


def _placement_selectors(inp: SchedulingInput) -> tuple[LabelSelector | None, LabelSelector | None]:
    placement = inp.vm.spec.placement
    if placement is None:
        return None, None
    return placement.provider_selector, placement.failure_domain_selector


def _provider_eligible(inp: SchedulingInput, provider: Provider) -> bool:
    selector, _ = _placement_selectors(inp)
    pclass = provider_class_of(provider)
    if pclass not in inp.provider_classes or image_template(inp.image, pclass) is None:
        return False
    return selector is None or selector.matches(provider.metadata.labels)


def current_problem(inp: SchedulingInput) -> tuple[str, str] | None:
    """Why the current placement is no longer valid (reason, message), or None when it is valid
    or there is none. Validity = filters 1, 3 and 4 (module docstring)."""
    if inp.current is None:
        return None
    pname, dname = inp.current
    provider = next((p for p in inp.providers if p.metadata.name == pname), None)
    if provider is None or not _provider_eligible(inp, provider):
        return (
            VirtualMachineReason.NO_PROVIDER_MATCHED,
            f"Provider {pname} no longer exists or no longer matches placement.providerSelector",
        )
    domain = next((d for d in (provider.status.failure_domains if provider.status else None) or () if d.name == dname), None)
    if domain is None:
        return (
            VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED,
            f"failure domain {dname} is no longer reported by Provider {pname}",
        )
    _, fd_selector = _placement_selectors(inp)
    if fd_selector is not None and not fd_selector.matches(domain.labels):
        return (
            VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED,
            f"failure domain {dname} no longer matches placement.failureDomainSelector {_selector_text(fd_selector)}",
        )
    missing = domain_missing(inp.vm_class, provider, domain)
    if missing:
        return (
            VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED,
            f"failure domain {dname} of Provider {pname} no longer offers {_names(missing)}",
        )
    if not firmware_supported(inp.vm_class, domain):
        return (
            VirtualMachineReason.FIRMWARE_UNSUPPORTED,
            f"failure domain {dname} of Provider {pname} no longer supports firmware {inp.vm_class.spec.firmware}",
        )
    return None


def _find_current(inp: SchedulingInput) -> tuple[Provider, ProviderFailureDomain] | None:
    if inp.current is None:
        return None
    provider = next((p for p in inp.providers if p.metadata.name == inp.current[0]), None)
    if provider is None:
        return None
    domain = next((d for d in _domains(provider) if d.name == inp.current[1]), None)
    return None if domain is None else (provider, domain)


def _rank_key(
    cand: Candidate, preferred: int, free: Free, spread: tuple[int, int]
) -> tuple[int, int, int, int, int, int, str, str]:
    mem, storage, cpu = free.memory_mib or 0, free.storage_gib or 0, free.cpu_mhz or 0
    on_provider, in_domain = spread
    return (preferred, -mem, -storage, -cpu, on_provider, in_domain, cand.provider_name, cand.domain.name)


def _spread(totals: PeerTotals, cand: Candidate) -> tuple[int, int]:
    """(peers on the candidate's Provider, peers in its failure domain), the VM itself excluded."""
    return totals.on_provider.get(cand.provider_name, 0), totals.in_domain.get(cand.key, 0)


def _domains(provider: Provider) -> Sequence[ProviderFailureDomain]:
    return (provider.status.failure_domains if provider.status else None) or ()


def schedule(inp: SchedulingInput) -> SchedulingDecision:
    """Place the VM (module docstring). Never raises."""
    problem = current_problem(inp)
    providers = sorted(inp.providers, key=lambda p: p.metadata.name or "")
    domain_labels = {(p.metadata.name or "", d.name): dict(d.labels or {}) for p in providers for d in _domains(p)}
    found = _find_current(inp)
    if problem is None and found is not None:
        return SchedulingDecision(placement=placement_for(inp, Candidate(*found)), kept=True)

    namespace = inp.vm.metadata.namespace or ""
    provider_selector, fd_selector = _placement_selectors(inp)
    # A Provider being deleted keeps the VMs it has (stickiness above) but takes no new ones: a new
    # placement would hold its finalizer (banlieue.io/provider) for as long as the VM lives.
    eligible = [p for p in providers if _provider_eligible(inp, p)]
    matched = [p for p in eligible if p.metadata.deletion_timestamp is None]
    if not matched and eligible:
        names = _names(p.metadata.name or "" for p in eligible)
        said = f"Provider {names} is being deleted and takes" if len(eligible) == 1 else f"Providers {names} are being deleted and take"
        msg = (f"{said} no new VM, and no other Provider in namespace "
               f"{namespace} matches placement.providerSelector {_selector_text(provider_selector)}: create or select another Provider")
        return _fail(VirtualMachineReason.NO_PROVIDER_MATCHED, msg, problem)
    if not matched:
        classes = _names(s.provider_class for s in inp.image.spec.sources or ()) or "none"
        msg = (
            f"no Provider in namespace {namespace} matches placement.providerSelector {_selector_text(provider_selector)} "
            f"with a class this controller supports ({_names(inp.provider_classes)}) and the VMImage "
            f"{inp.image.metadata.name} has a source for ({classes}); "
            f"Providers seen: {_names(p.metadata.name or '' for p in providers) or 'none'}"
        )
        return _fail(VirtualMachineReason.NO_PROVIDER_MATCHED, msg, problem)

    ready: list[Provider] = []
    not_ready: list[str] = []
    for p in matched:
        ok, why = image_ready_on(inp.image, p)
        if ok:
            ready.append(p)
        else:
            not_ready.append(f"{p.metadata.name} ({why})")
    if not ready:
        msg = f"VMImage {inp.image.metadata.name} is not ready on any matching Provider: {_names(not_ready)}"
        return _fail(VirtualMachineReason.IMAGE_NOT_READY, msg, problem)

    stage = [Candidate(p, d) for p in ready for d in _domains(p)]
    if not stage:
        msg = f"Providers {_names(p.metadata.name or '' for p in ready)} report no failure domains yet"
        return _fail(VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED, msg, problem)
    selected = [c for c in stage if fd_selector is None or fd_selector.matches(c.domain.labels)]
    if not selected:
        msg = (
            f"no failure domain matches placement.failureDomainSelector {_selector_text(fd_selector)}; "
            f"failure domains seen: {_names(c.domain.name for c in stage)}"
        )
        return _fail(VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED, msg, problem)
    offering = [c for c in selected if not domain_missing(inp.vm_class, c.provider, c.domain)]
    if not offering:
        lacks = [f"{c.domain.name} lacks {', '.join(domain_missing(inp.vm_class, c.provider, c.domain))}" for c in selected]
        msg = f"no failure domain offers what VMClass {inp.vm_class.metadata.name} needs: {_names(lacks)}"
        return _fail(VirtualMachineReason.NO_FAILURE_DOMAIN_MATCHED, msg, problem)
    firmware = [c for c in offering if firmware_supported(inp.vm_class, c.domain)]
    if not firmware:
        msg = (
            f"no failure domain supports firmware {inp.vm_class.spec.firmware} of VMClass {inp.vm_class.metadata.name}; "
            f"checked: {_names(c.domain.name for c in offering)}"
        )
        return _fail(VirtualMachineReason.FIRMWARE_UNSUPPORTED, msg, problem)
    totals = peer_totals(inp)
    free = {c.key: free_capacity(inp, c, totals) for c in firmware}
    datastores = {p.metadata.name or "": datastore_reservations(p, totals) for p in ready}

    def shortfall(c: Candidate) -> list[str]:
        # The reservation first (what banlieue placed), vSphere's free figures second (a guard
        # against what banlieue did not place).
        reserved = reservation_shortfall(inp.vm_class, c, totals, datastores.get(c.provider_name, {}))
        return reserved + capacity_shortfall(inp.vm_class, free[c.key])

    fitting = [c for c in firmware if not shortfall(c)]
    if not fitting:
        short = [f"{c.domain.name}: {', '.join(shortfall(c))}" for c in firmware]
        msg = f"no failure domain has the free capacity VMClass {inp.vm_class.metadata.name} needs: {_names(short)}"
        return _fail(VirtualMachineReason.INSUFFICIENT_CAPACITY, msg, problem)
    allowed: list[tuple[Candidate, int]] = []
    blocked: list[str] = []
    for c in fitting:
        violations = anti_affinity_violations(inp, c, AntiAffinityMode.REQUIRED, domain_labels)
        if violations:
            blocked.append(f"{c.domain.name} (near {', '.join(sorted(set(violations)))})")
        else:
            preferred = len(anti_affinity_violations(inp, c, AntiAffinityMode.PREFERRED, domain_labels))
            allowed.append((c, preferred))
    if not allowed:
        msg = f"required anti-affinity excludes every fitting failure domain: {_names(blocked)}"
        return _fail(VirtualMachineReason.ANTI_AFFINITY_UNSATISFIED, msg, problem)
    best, _ = min(allowed, key=lambda cp: _rank_key(cp[0], cp[1], free[cp[0].key], _spread(totals, cp[0])))
    return SchedulingDecision(placement=placement_for(inp, best), current_invalid=problem)


def _fail(reason: str, message: str, problem: tuple[str, str] | None) -> SchedulingDecision:
    return SchedulingDecision(reason=reason, message=message, current_invalid=problem)
