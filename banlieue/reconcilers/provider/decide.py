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
- Backend errors while connecting: ``TLSVerifyFailed`` -> ``TLSVerifyFailed``; ``AuthFailed``
  -> *decision* ``SecretInvalid`` (the vCenter refused the credentials held in the Secret: the
  fix is in the Secret, which is watched, so fixing it recovers at once); anything else
  (``Transient``: refused, reset, timed out) -> ``ConnectFailed``.
- Backend errors during the inventory walk: ``AuthFailed`` -> ``SecretInvalid``,
  ``TLSVerifyFailed`` -> ``TLSVerifyFailed``, ``Transient`` -> ``ConnectFailed`` (the vCenter
  went away mid-walk), others -> ``InventoryFailed``.
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
- Requeue (*decision*): success and config errors after ``REFRESH_SECONDS`` (capacity and
  inventory changes are not notified; Secret/ConfigMap changes are watched); connect/inventory
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
    FailureDomainCapacity,
    FailureDomainRaw,
    Provider,
    ProviderConditionReason,
    ProviderFailureDomain,
    ProviderFailureDomainAttributes,
    ProviderStatus,
    StorageClassCapacity,
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

Stage = Literal["config", "connect", "inventory"]


@dataclass(frozen=True)
class Failure:
    """What went wrong while gathering: ``stage`` (config: Secret/CA; connect: login;
    inventory: the walk), ``reason`` (ConnectionConfigError.reason, or ``taxonomy(err)`` of a
    BackendError, e.g. ``AuthFailed``, ``Transient``), ``message`` (never a credential)."""

    stage: Stage
    reason: str
    message: str


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
    if failure.reason == AuthFailed.__name__:
        return R.SECRET_INVALID
    if failure.reason == TLSVerifyFailed.__name__:
        return R.TLS_VERIFY_FAILED
    if failure.stage == "connect" or failure.reason in (Transient.__name__, R.CONNECT_FAILED):
        return R.CONNECT_FAILED
    return R.INVENTORY_FAILED


def _failure_message(provider: Provider, failure: Failure, reason: str) -> str:
    endpoint = provider.spec.connection.endpoint
    secret = f"{provider.metadata.namespace}/{provider.spec.connection.credentials_ref.name}"
    detail = _cut(failure.message)
    if failure.stage == "config":
        return detail
    if reason == R.SECRET_INVALID:
        return f"vCenter {endpoint} refused the credentials in Secret {secret}: {detail}"
    if reason == R.TLS_VERIFY_FAILED:
        return (
            f"TLS certificate of {endpoint} did not verify: set spec.connection.caBundle to the CA that "
            f"signed it (or insecureSkipTLSVerify for development): {detail}"
        )
    if reason == R.CONNECT_FAILED:
        # The backend's Transient says "cannot reach vCenter: <error>" (faults.map_exception):
        # said once here, with the endpoint.
        detail = detail.removeprefix("cannot reach vCenter: ")
        return f"cannot reach vCenter {endpoint}: {detail}; retrying with back-off"
    return f"inventory walk of {endpoint} failed: {detail}"


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
    old, cur = get_condition(current, READY), get_condition(new, READY)
    if cur is None or (old is not None and old.status == cur.status and old.reason == cur.reason):
        return ()
    kind: Literal["Normal", "Warning"] = "Normal" if cur.status is ConditionStatus.TRUE or cur.reason == R.PAUSED else "Warning"
    return (EventSpec(kind, cur.reason, cur.message),)


def _plan(snap: Snapshot, status: ProviderStatus, requeue: bool = False, requeue_after: float | None = None) -> Plan:
    current = snap.provider.status or ProviderStatus()
    write = status.to_wire() != current.to_wire()
    events = _events(current.conditions, status.conditions or [])
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
        return _plan(snap, ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen))

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
        return _plan(snap, ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen))

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
        status = ProviderStatus(failure_domains=fds, conditions=conds, observed_generation=gen)
        if failure.stage == "config":
            return _plan(snap, status, requeue_after=REFRESH_SECONDS)
        return _plan(snap, status, requeue=True)

    domains = failure_domains_of(p, snap.inventory, snap.now)
    version = snap.api_version or snap.inventory.api_version
    reach_msg = f"connected to {p.spec.connection.endpoint} (vSphere API {version})"
    if not domains:
        msg = "the vCenter has no datacenter with a compute cluster (ClusterComputeResource): nothing to place VMs on"
        conds = _conditions(current.conditions, gen, snap.now, (true, R.RECONCILED, reach_msg), (false, R.INVENTORY_FAILED, msg))
        return _plan(snap, ProviderStatus(failure_domains=[], conditions=conds, observed_generation=gen), requeue_after=REFRESH_SECONDS)

    ready_msg = f"{len(domains)} failure domain(s)"
    missing = _unverified_classes(p, domains)
    if missing:
        ready_msg += f"; not available in any failure domain: {', '.join(missing)}"
    conds = _conditions(current.conditions, gen, snap.now, (true, R.RECONCILED, reach_msg), (true, R.RECONCILED, ready_msg))
    status = ProviderStatus(failure_domains=domains, conditions=conds, observed_generation=gen)
    return _plan(snap, status, requeue_after=REFRESH_SECONDS)


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
