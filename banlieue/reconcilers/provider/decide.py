"""Provider reconciler, pure part: ``Snapshot`` -> ``decide`` -> ``Plan`` (SPEC §2 Provider).

Rules (the SPEC's, and the decisions where it is silent, marked *decision*):

- Only ``spec.providerClassRef.name == "vsphere"`` is served by this role; any other class gets
  ``Ready=False``/``ProviderReachable=Unknown``, reason ``UnsupportedProviderClass``, and nothing else.
- ``spec.paused``: nothing is read or written but the two conditions, reason ``Paused``.
  *decision*: their status is the last observed one (Unknown when never observed), so pausing
  a Provider never looks like an outage to the VirtualMachine scheduler (no migrations because
  of a pause); the message says the status is frozen. No periodic requeue.
- Connection config errors (from ``connection``): ``SecretMissing`` / ``SecretInvalid``;
  a CA bundle that is not valid PEM: ``TLSVerifyFailed`` (nothing is sent to vCenter).
- An endpoint outside ``--allowed-endpoint-cidrs`` (backend reason ``EndpointNotAllowed``, nothing
  dialled) -> ``EndpointNotAllowed``.
- Backend errors while connecting: ``AuthFailed`` -> *decision* ``SecretInvalid`` (the vCenter
  refused the credentials held in the Secret: the fix is in the Secret, which is not watched but
  re-read at each refusal (``reconcilers/refused``) and every ``--secret-resync-period``, so
  fixing it recovers at the next retry or re-read); anything else (``Transient``: refused, reset, timed out; and
  ``TLSVerifyFailed``, a certificate that does not verify) -> ``ConnectFailed`` with one message
  (``UNREACHABLE_MESSAGE``): whoever writes a Provider may point it anywhere, and a distinct
  reason for a TLS server told them something listens there (new-user finding); the log says which.
- Backend errors during the inventory walk: ``AuthFailed`` -> ``SecretInvalid``,
  ``TLSVerifyFailed`` and ``Transient`` -> ``ConnectFailed`` (the vCenter went away mid-walk),
  others -> ``InventoryFailed``.
- Failure domains are replaced only by a successful inventory walk. *decision*: every error
  (transient or not) keeps the last known list and changes only conditions: dropping them would
  make consumers re-place VMs that are still running; ``Ready=False`` already stops new
  placements.
- Two clusters with the same name in one datacenter (different host folders) cannot be told
  apart by (datacenter, cluster): *decision* the first reported one is used.
- A walk that finds no (datacenter, cluster) pair: ``ProviderReachable=True``,
  ``Ready=False`` reason ``InventoryFailed`` (nothing to place VMs on).
- Capacity jitter (*decision*): a new capacity number that differs from the current one by
  less than ``CAPACITY_TOLERANCE`` (relative) keeps the current number, so the 5-minute refresh
  writes only when capacity really moved (writes that change nothing are skipped).
  ``capacity.updateTime`` is the snapshot's ``now`` (taken before the inventory walk) when the
  figures are written, and kept while they are kept; a domain without one gets one (a single
  write after an upgrade). The scheduler counts VMs provisioned at or after it against the domain.
- A vCenter that does not answer the backend's reachability probe (``Snapshot.unreachable_since``):
  ``ConnectFailed``, and the conditions' ``lastTransitionTime`` is when it stopped answering.
- A first call that still waits its turn behind requests the vCenter answers meanwhile
  (``Snapshot.busy``; a 10,000-VM cold start queues 10,000 VM reads before it): nothing is
  written, the call is looked at again after ``recheck_after`` seconds. A busy vCenter is not an
  unreachable one, and each flap of ``Ready`` re-enqueued every VM placed there.
- The vCenter's identity (ADR 0013): ``status.vcenter`` records the ``about`` of the vCenter the
  endpoint reached (``Snapshot.vcenter``), kept on every path that does not reach one. When the
  endpoint reaches a vCenter of another instance UUID while VSphereMachines use the Provider
  (``Snapshot.users``), the change is refused: ``ProviderReachable`` and ``Ready`` False
  ``VCenterIdentityChanged`` naming the two UUIDs and the machines (at most
  ``USERS_IN_MESSAGE``), a Warning event, the recorded identity and the failure domains kept
  (the machines' Connections carry the recorded UUID, so the backend refuses their calls), a
  re-check after ``IDENTITY_RECHECK_SECONDS``. With no machine, the new identity is recorded
  (Normal event ``VCenterChanged``) and the new inventory used.
- Two Providers of one namespace on one vCenter (``Snapshot.same_vcenter``: the other Providers
  whose ``status.vcenter.instanceUUID`` is the observed one; those of other namespaces are other
  tenants sharing the vCenter, ignored and never mentioned): ``VCenterUnique`` False
  ``DuplicateVCenter`` on each, naming the others; *decision* the oldest of them
  (creationTimestamp, then namespace/name) stays ``Ready`` and alone takes new VMs, the others
  are ``Ready`` False ``DuplicateVCenter`` (the scheduler places nothing there: each Provider
  reserves capacity against its own failure domains, so two would count one cluster twice).
  Their own machines are still managed (same vCenter). Otherwise ``VCenterUnique`` True ``Unique``.
- Requeue (*decision*): success after ``REFRESH_SECONDS`` (capacity and inventory changes are
  not notified); config errors after ``CONFIG_RECHECK_SECONDS`` (referenced Secrets/ConfigMaps are
  re-read by name, not watched: a fix is seen at the re-check); connect/inventory
  errors through the rate limiter (client-go exponential back-off); paused and unsupported: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from banlieue.api.conditions import READY, get_condition, set_condition
from banlieue.api.meta import Condition, ConditionStatus
from banlieue.api.provider import (
    PROVIDER_REACHABLE,
    VCENTER_UNIQUE,
    FailureDomainCapacity,
    FailureDomainRaw,
    Provider,
    ProviderConditionReason,
    ProviderFailureDomain,
    ProviderFailureDomainAttributes,
    ProviderStatus,
    StorageClassCapacity,
    VCenterIdentity,
)
from banlieue.backends.base import (
    AuthFailed,
    Capabilities,
    FailureDomainInfo,
    Inventory,
    NetworkClass,
    StorageClass,
    TLSVerifyFailed,
    Transient,
    VCenterAbout,
)
from banlieue.reconcilers.kinds import PROVIDER_CLASS_VSPHERE
from banlieue.reconcilers.provider.slug import label_value, unique_slugs

R = ProviderConditionReason
UNSUPPORTED_PROVIDER_CLASS = R.UNSUPPORTED_PROVIDER_CLASS
REFRESH_SECONDS = 300.0
"""Periodic refresh of inventory and capacity (seconds)."""
CAPACITY_TOLERANCE = 0.01
"""Relative capacity change below which the current number is kept."""
MAX_MESSAGE = 1024
"""Backend messages are cut to this many characters in conditions."""
USERS_IN_MESSAGE = 5
"""How many machine names the ``VCenterIdentityChanged`` message lists."""
CONFIG_RECHECK_SECONDS = 30.0
"""Re-check of a Provider whose connection cannot be built (credentials Secret or CA bundle
missing or invalid): each reconcile re-reads the referenced objects, so a Secret created or fixed
is picked up within this long even though the periodic re-read of referenced objects
(``--secret-resync-period``) is minutes long (issue 22)."""
IDENTITY_RECHECK_SECONDS = 60.0
"""Re-check of a Provider whose endpoint reaches another vCenter (the machines' deletions and
endpoint edits also trigger one)."""

Stage = Literal["config", "connect", "inventory"]


@dataclass(frozen=True)
class Failure:
    """What went wrong while gathering: ``stage`` (config: Secret/CA; connect: login;
    inventory: the walk), ``reason`` (ConnectionConfigError.reason, or ``taxonomy(err)`` of a
    BackendError, e.g. ``AuthFailed``, ``Transient``), ``message`` (never a credential);
    ``detail``: the precise cause for the log (ConnectionConfigError.detail), None = ``message``."""

    stage: Stage
    reason: str
    message: str
    detail: str | None = None


@dataclass(frozen=True)
class Peer:
    """Another Provider that reaches the same vCenter: ``namespace``, ``name``, ``created``
    (its creationTimestamp; None sorts last)."""

    namespace: str
    name: str
    created: datetime | None


@dataclass(frozen=True)
class Snapshot:
    """The Provider and what was observed. ``inventory`` is set after a successful walk,
    ``failure`` otherwise (both None when nothing was attempted: paused or unsupported class).
    ``api_version`` is the vCenter's API version when login worked. ``now``: condition times, and
    ``capacity.updateTime`` of figures written from ``inventory`` (taken before the walk, so a VM
    provisioned before it is in the figures)."""

    provider: Provider
    now: datetime
    inventory: Inventory | None = None
    failure: Failure | None = None
    api_version: str | None = None
    unreachable_since: datetime | None = None
    """When the vCenter stopped answering (the backend's reachability probe), if it did: the
    ``lastTransitionTime`` of the conditions it turns False, instead of ``now``."""
    vcenter: VCenterAbout | None = None
    """Who answered on the endpoint (``backend.about``), when login worked."""
    users: tuple[str, ...] = ()
    """Sorted names of the VSphereMachines that use the Provider; gathered only when ``vcenter``
    differs from the recorded ``status.vcenter`` (empty otherwise)."""
    same_vcenter: tuple[Peer, ...] = ()
    """The other Providers whose ``status.vcenter.instanceUUID`` is ``vcenter``'s."""
    recheck_after: float | None = None
    """Seconds after which a connect failure (or a ``busy`` snapshot) is looked at again instead
    of the rate-limited retry: the first call still runs (``controller.CONTACT_WAIT_SECONDS``),
    and a retry could only look at it."""
    busy: bool = False
    """Nothing observed yet: the first call still waits its turn behind requests the vCenter
    answers meanwhile (``reachability.answering``), so the vCenter is busy, not unreachable."""


@dataclass(frozen=True)
class EventSpec:
    """An Event to record: type Normal/Warning, reason, message."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What to do: ``status`` is the full desired status; ``write_status`` False when it equals
    the current one. ``requeue`` = rate-limited retry; ``requeue_after`` seconds (None: none)."""

    status: ProviderStatus
    write_status: bool
    events: tuple[EventSpec, ...] = ()
    requeue: bool = False
    requeue_after: float | None = None


def capabilities_of(provider: Provider) -> Capabilities:
    """The backend ``Capabilities`` of ``provider.spec.capabilities`` (classes with an empty
    target are passed as-is; the backend reports them unavailable)."""
    caps = provider.spec.capabilities
    if caps is None:
        return Capabilities()
    return Capabilities(
        storage_classes=tuple(
            StorageClass(s.name, s.target.datastore, s.target.datastore_cluster) for s in caps.storage_classes or ()
        ),
        network_classes=tuple(
            NetworkClass(n.name, n.target.port_group, n.target.distributed_port_group) for n in caps.network_classes or ()
        ),
        features=tuple(caps.features or ()),
    )


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def _close(old: int | None, new: int) -> bool:
    if old is None:
        return False
    if old == new:
        return True
    return abs(new - old) < CAPACITY_TOLERANCE * max(abs(old), abs(new))


def _stable_capacity(old: FailureDomainCapacity | None, new: FailureDomainCapacity) -> FailureDomainCapacity:
    if old is None:
        return new
    parts = {}
    for attr in ("cpu_mhz", "memory_mib", "storage_gib"):
        o, n = getattr(old, attr), getattr(new, attr)
        parts[attr] = o if n is not None and _close(o, n) else n
    return FailureDomainCapacity.model_validate(parts)


def _stamped(old: FailureDomainCapacity | None, new: FailureDomainCapacity, now: datetime) -> FailureDomainCapacity:
    """``new`` with ``updateTime``: the old one when the figures are the old ones, else ``now``."""
    figures = ("cpu_mhz", "memory_mib", "storage_gib")
    if old is not None and old.update_time is not None and all(getattr(old, f) == getattr(new, f) for f in figures):
        return new.model_copy(update={"update_time": old.update_time})
    return new.model_copy(update={"update_time": now})


def failure_domains_of(provider: Provider, inventory: Inventory, now: datetime) -> list[ProviderFailureDomain]:
    """SPEC §2 failure domains of an inventory, sorted by name, with capacity kept stable
    against the current status (``CAPACITY_TOLERANCE``) and stamped with ``now`` when its
    figures change (``updateTime``; ``now`` is when the walk started). Negative numbers become 0."""
    by_pair: dict[tuple[str, str], FailureDomainInfo] = {}
    for info in inventory.failure_domains:
        # Two clusters of one name in different host folders of a datacenter cannot be told
        # apart by (datacenter, cluster): the first reported wins.
        by_pair.setdefault((info.datacenter, info.cluster), info)
    infos = [by_pair[k] for k in sorted(by_pair)]
    names = unique_slugs(provider.metadata.name or "", [(f.datacenter, f.cluster) for f in infos])
    current = {fd.name: fd for fd in (provider.status.failure_domains or [])} if provider.status else {}
    out: list[ProviderFailureDomain] = []
    for name, info in zip(names, infos, strict=True):
        capacity = FailureDomainCapacity(
            cpu_mhz=max(0, info.capacity.cpu_mhz),
            memory_mib=max(0, info.capacity.memory_mib),
            storage_gib=max(0, info.capacity.storage_gib),
        )
        old = current.get(name)
        old_capacity = old.attributes.capacity if old is not None and old.attributes is not None else None
        capacity = _stamped(old_capacity, _stable_capacity(old_capacity, capacity), now)
        # Totals: what the scheduler reserves against (written as measured: they move rarely).
        capacity = capacity.model_copy(update={
            "memory_total_mib": None if info.memory_total_mib is None else max(0, info.memory_total_mib),
            "storage_classes": [
                StorageClassCapacity(name=s.name, datastore=s.datastore, total_gib=max(0, s.total_gib),
                                     free_gib=max(0, s.free_gib), member=s.member)
                for s in sorted(info.storage, key=lambda s: s.name)
            ] or None,
        })
        out.append(
            ProviderFailureDomain(
                name=name,
                labels={"dc": label_value(info.datacenter), "cluster": label_value(info.cluster)},
                attributes=ProviderFailureDomainAttributes(
                    available_storage_classes=sorted(set(info.available_storage_classes)),
                    available_network_classes=sorted(set(info.available_network_classes)),
                    features=sorted(set(info.features)),
                    capacity=capacity,
                    raw=FailureDomainRaw(datacenter=info.datacenter, cluster=info.cluster),
                ),
            )
        )
    return sorted(out, key=lambda fd: fd.name)


def reason_of(failure: Failure) -> str:
    """The SPEC §2 condition reason of a gather failure (module docstring table)."""
    if failure.stage == "config":
        config_reasons = (R.SECRET_MISSING, R.SECRET_INVALID, R.TLS_VERIFY_FAILED, R.INSECURE_ENDPOINT)
        return failure.reason if failure.reason in config_reasons else R.SECRET_INVALID
    if failure.reason == R.ENDPOINT_NOT_ALLOWED:
        return R.ENDPOINT_NOT_ALLOWED
    if failure.reason == AuthFailed.__name__:
        return R.SECRET_INVALID
    if failure.reason == TLSVerifyFailed.__name__:
        # A certificate that does not verify tells that something speaks TLS on the endpoint:
        # said as an unreachable endpoint (same reason and message), the detail in the log.
        return R.CONNECT_FAILED
    if failure.stage == "connect" or failure.reason in (Transient.__name__, R.CONNECT_FAILED):
        return R.CONNECT_FAILED
    return R.INVENTORY_FAILED


UNREACHABLE_MESSAGE = (
    "cannot reach a vCenter at spec.connection.endpoint (no answer, refused, not a vCenter, or a TLS "
    "certificate that does not verify against spec.connection.caBundle); retrying with back-off; "
    "the manager's log has the detail"
)
"""The one ``ConnectFailed`` message (issue 23 case 5; new-user finding: a certificate that did
not verify had its own reason): what answered on an endpoint - a refusal, a server that is not a
vCenter, a TLS server whose certificate does not verify, silence - is told in the manager's log
(``provider connection failed``, with ``endpoint`` and ``error``), not to whoever reads the
Provider, who may be probing the network through it."""


def _failure_message(provider: Provider, failure: Failure, reason: str) -> str:
    if failure.stage == "config":
        return _cut(failure.message)
    if reason == R.SECRET_INVALID:
        return ("the vCenter at spec.connection.endpoint refused the credentials of the Secret named in "
                "spec.connection.credentialsRef; fix them in that Secret")
    if reason == R.CONNECT_FAILED:
        return UNREACHABLE_MESSAGE
    if reason == R.ENDPOINT_NOT_ALLOWED:
        return ("spec.connection.endpoint is outside the networks this manager may connect to "
                "(--allowed-endpoint-cidrs): no connection was attempted; use an endpoint the administrator allows")
    return f"inventory walk failed ({failure.reason}); the manager's log has the detail"


def _conditions(
    current: Sequence[Condition] | None,
    gen: int | None,
    now: datetime,
    reachable: tuple[ConditionStatus, str, str],
    ready: tuple[ConditionStatus, str, str],
) -> list[Condition]:
    conds = set_condition(current, PROVIDER_REACHABLE, reachable[0], reachable[1], reachable[2], gen, now)
    return set_condition(conds, READY, ready[0], ready[1], ready[2], gen, now)


def _events(current: Sequence[Condition] | None, new: Sequence[Condition]) -> tuple[EventSpec, ...]:
    out: list[EventSpec] = []
    old, cur = get_condition(current, READY), get_condition(new, READY)
    if cur is not None and (old is None or old.status != cur.status or old.reason != cur.reason):
        kind: Literal["Normal", "Warning"] = "Normal" if cur.status is ConditionStatus.TRUE or cur.reason == R.PAUSED else "Warning"
        out.append(EventSpec(kind, cur.reason, cur.message))
    # A duplicate vCenter is worth a Warning on the Provider that keeps placing too.
    old_u, cur_u = get_condition(current, VCENTER_UNIQUE), get_condition(new, VCENTER_UNIQUE)
    if (cur_u is not None and cur_u.status is ConditionStatus.FALSE and (old_u is None or old_u.status != cur_u.status)
            and not any(e.reason == cur_u.reason for e in out)):
        out.append(EventSpec("Warning", cur_u.reason, cur_u.message))
    return tuple(out)


def _plan(snap: Snapshot, status: ProviderStatus, requeue: bool = False, requeue_after: float | None = None,
          extra: tuple[EventSpec, ...] = ()) -> Plan:
    current = snap.provider.status or ProviderStatus()
    # status.images is the VMImage controller's (its own field manager): not this writer's.
    write = status.to_wire() != current.model_copy(update={"images": None}).to_wire()
    events = _events(current.conditions, status.conditions or []) + extra
    return Plan(status=status, write_status=write, events=events, requeue=requeue, requeue_after=requeue_after)


def decide(snap: Snapshot) -> Plan:
    """The Plan for ``snap`` (module docstring rules). Never raises."""
    p = snap.provider
    gen = p.metadata.generation
    current = p.status or ProviderStatus()
    fds = current.failure_domains
    cls = p.spec.provider_class_ref.name
    unknown, true, false = ConditionStatus.UNKNOWN, ConditionStatus.TRUE, ConditionStatus.FALSE

    if cls != PROVIDER_CLASS_VSPHERE:
        msg = f"provider class {cls!r} is not served by this controller (supported: {PROVIDER_CLASS_VSPHERE!r})"
        conds = _conditions(
            current.conditions, gen, snap.now, (unknown, UNSUPPORTED_PROVIDER_CLASS, msg), (false, UNSUPPORTED_PROVIDER_CLASS, msg)
        )
        return _plan(snap, ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen, vcenter=current.vcenter))

    if p.spec.paused:
        msg = "reconciliation paused (spec.paused): status and failure domains are the last observed"
        old_r = get_condition(current.conditions, PROVIDER_REACHABLE)
        old_ready = get_condition(current.conditions, READY)
        conds = _conditions(
            current.conditions,
            gen,
            snap.now,
            (old_r.status if old_r else unknown, R.PAUSED, msg),
            (old_ready.status if old_ready else unknown, R.PAUSED, msg),
        )
        return _plan(snap, ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen, vcenter=current.vcenter))

    if snap.busy:
        # Nothing new was observed: the last status stands (a write would turn a busy vCenter's
        # Provider unreachable and back, and every VM on it would be reconciled twice for it).
        return Plan(status=current, write_status=False, requeue=snap.recheck_after is None, requeue_after=snap.recheck_after)

    if snap.failure is not None or snap.inventory is None:
        failure = snap.failure or Failure("connect", "Unknown", "no inventory was observed")
        reason = reason_of(failure)
        msg = _failure_message(p, failure, reason)
        reachable = (false, reason, msg) if failure.stage != "inventory" or reason != R.INVENTORY_FAILED else (
            true, R.RECONCILED, f"connected to {p.spec.connection.endpoint}"
        )
        # A hung vCenter's conditions change when it stopped answering, not when this noticed.
        when = min(snap.unreachable_since, snap.now) if snap.unreachable_since is not None else snap.now
        conds = _conditions(current.conditions, gen, when, reachable, (false, reason, msg))
        status = ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen, vcenter=current.vcenter)
        if failure.stage == "config":
            return _plan(snap, status, requeue_after=CONFIG_RECHECK_SECONDS)
        if snap.recheck_after is not None:
            return _plan(snap, status, requeue_after=snap.recheck_after)
        return _plan(snap, status, requeue=True)

    recorded = current.vcenter
    observed = snap.vcenter
    if recorded is not None and observed is not None and observed.instance_uuid != recorded.instance_uuid and snap.users:
        msg = _identity_changed_message(p, recorded.instance_uuid, observed.instance_uuid, snap.users)
        conds = _conditions(current.conditions, gen, snap.now, (false, R.VCENTER_IDENTITY_CHANGED, msg),
                            (false, R.VCENTER_IDENTITY_CHANGED, msg))
        status = ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen, vcenter=recorded)
        return _plan(snap, status, requeue_after=IDENTITY_RECHECK_SECONDS)
    vcenter = recorded
    extra: tuple[EventSpec, ...] = ()
    if observed is not None:
        vcenter = VCenterIdentity(instance_uuid=observed.instance_uuid, version=observed.version or None,
                                  api_type=observed.api_type or None)
        if recorded is not None and recorded.instance_uuid != observed.instance_uuid:
            extra = (EventSpec("Normal", "VCenterChanged",
                               f"{p.spec.connection.endpoint} reaches vCenter {observed.instance_uuid} (was "
                               f"{recorded.instance_uuid}); no VSphereMachine used this Provider: recorded the new one"),)

    domains = failure_domains_of(p, snap.inventory, snap.now)
    version = snap.api_version or snap.inventory.api_version
    reach_msg = f"connected to {p.spec.connection.endpoint} (vSphere API {version})"
    conds = list(current.conditions or [])
    duplicate_of: str | None = None
    if vcenter is not None and observed is not None:
        conds, duplicate_of = _uniqueness(snap, conds, vcenter.instance_uuid, gen)
    if not domains:
        msg = "the vCenter has no datacenter with a compute cluster (ClusterComputeResource): nothing to place VMs on"
        conds = _conditions(conds, gen, snap.now, (true, R.RECONCILED, reach_msg), (false, R.INVENTORY_FAILED, msg))
        return _plan(snap, ProviderStatus(failure_domains=[], conditions=conds, observed_generation=gen, vcenter=vcenter),
                     requeue_after=REFRESH_SECONDS, extra=extra)

    ready: tuple[ConditionStatus, str, str]
    if duplicate_of is not None:
        ready = (false, R.DUPLICATE_VCENTER, duplicate_of)  # another, older Provider places there
    else:
        ready_msg = f"{len(domains)} failure domain(s)"
        missing = _unverified_classes(p, domains)
        if missing:
            ready_msg += f"; not available in any failure domain: {', '.join(missing)}"
        ready = (true, R.RECONCILED, ready_msg)
    conds = _conditions(conds, gen, snap.now, (true, R.RECONCILED, reach_msg), ready)
    status = ProviderStatus(failure_domains=domains, conditions=conds, observed_generation=gen, vcenter=vcenter)
    return _plan(snap, status, requeue_after=REFRESH_SECONDS, extra=extra)


def _identity_changed_message(p: Provider, recorded: str, observed: str, users: Sequence[str]) -> str:
    shown = ", ".join(users[:USERS_IN_MESSAGE]) + (", ..." if len(users) > USERS_IN_MESSAGE else "")
    return (
        f"spec.connection.endpoint {p.spec.connection.endpoint} reaches vCenter {observed}, but the VMs of "
        f"{len(users)} VSphereMachine(s) ({shown}) live in vCenter {recorded} (status.vcenter.instanceUUID): "
        "nothing is placed, changed or destroyed through this Provider until the endpoint reaches that "
        "vCenter again (revert spec.connection)"
    )


def _peer_key(namespace: str, name: str, created: datetime | None) -> tuple[int, datetime | None, str, str]:
    # None sorts last; datetimes compare among themselves only.
    return (1, None, namespace, name) if created is None else (0, created, namespace, name)


def _uniqueness(snap: Snapshot, conds: list[Condition], instance_uuid: str, gen: int | None) -> tuple[list[Condition], str | None]:
    """``VCenterUnique`` for ``snap.same_vcenter`` (module docstring), and the ``Ready`` message
    when this Provider is a duplicate that must not place (None when it may)."""
    p = snap.provider
    ns = p.metadata.namespace or ""
    # Another namespace's Provider on this vCenter is another tenant's (its own credentials, its
    # own VMs, a scheduler view that never includes this namespace's Providers): not a duplicate,
    # and nothing of it is told here (docs/security.md, ADR 0013 decision 4).
    peers = [peer for peer in snap.same_vcenter if peer.namespace == ns]
    if not peers:
        msg = f"no other Provider of namespace {ns} reaches vCenter {instance_uuid}"
        return set_condition(conds, VCENTER_UNIQUE, ConditionStatus.TRUE, R.UNIQUE, msg, gen, snap.now), None
    names = sorted(peer.name for peer in peers)
    oldest = min([*peers, Peer(ns, p.metadata.name or "", p.metadata.creation_timestamp)],
                 key=lambda peer: _peer_key(peer.namespace, peer.name, peer.created))
    first = oldest.name == p.metadata.name
    who = "this one" if first else f"Provider {oldest.name}"
    others = (f"Provider {names[0]} also reaches" if len(names) == 1
              else f"Providers {', '.join(names[:-1])} and {names[-1]} also reach")
    msg = (f"{others} vCenter {instance_uuid} (same instance UUID): only the oldest of them "
           f"({who}) takes new VMs, so the vCenter's capacity is not counted twice")
    conds = set_condition(conds, VCENTER_UNIQUE, ConditionStatus.FALSE, R.DUPLICATE_VCENTER, msg, gen, snap.now)
    return conds, None if first else msg


def _unverified_classes(p: Provider, domains: Sequence[ProviderFailureDomain]) -> list[str]:
    caps = p.spec.capabilities
    if caps is None:
        return []
    seen_s: set[str] = set()
    seen_n: set[str] = set()
    for fd in domains:
        if fd.attributes is not None:
            seen_s.update(fd.attributes.available_storage_classes or ())
            seen_n.update(fd.attributes.available_network_classes or ())
    out = [f"storageClass {s.name}" for s in caps.storage_classes or () if s.name not in seen_s]
    out += [f"networkClass {n.name}" for n in caps.network_classes or () if n.name not in seen_n]
    return out
