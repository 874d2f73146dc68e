"""``banlieue_virtual_machines{phase}``: VirtualMachines by phase, computed at scrape time.

A custom prometheus_client collector (the kube-state-metrics pattern: derive the gauge from the
informer cache when Prometheus scrapes, so no reconciler has to keep a counter in step with
adds, updates and deletes). It is registered on the default ``REGISTRY`` at import, so the name
is known to ``/metrics`` and to the dashboard/alert checks even before a cache is bound.

The role runner binds the controller role's VirtualMachine informer with :func:`bind_source`;
until a bound source has synced the collector yields no samples (a half-listed cache would
report false zeros). The phase is a pure function of the object, :func:`phase_of`.

:func:`informer_source` remembers each object's phase by key and resourceVersion, so a scrape
decodes only the VirtualMachines that changed since the previous one (decoding all 10,000 on
every scrape cost ~1 s of CPU and raised the RSS by up to ~140 MiB at a time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from banlieue.api.infrastructure import VSphereMachineReason
from banlieue.api.virtualmachine import VirtualMachineConditionType, VirtualMachineReason
from banlieue.runtime.cache import SyncedStore

METRIC_NAME = "banlieue_virtual_machines"

PENDING = "Pending"
PROVISIONING = "Provisioning"
READY = "Ready"
DELETING = "Deleting"
FAILED = "Failed"
PHASES: tuple[str, ...] = (PENDING, PROVISIONING, READY, DELETING, FAILED)
"""Every ``phase`` label value; each is reported (0 included) once a source has synced."""

FAILED_REASONS = frozenset({
    VirtualMachineReason.CLASS_NOT_FOUND,
    VirtualMachineReason.IMAGE_NOT_FOUND,
    VirtualMachineReason.INTERFACE_NOT_IN_CLASS,
    VirtualMachineReason.NETWORK_SETTINGS_INCONSISTENT,
    VirtualMachineReason.ADDRESS_CONFLICT,
    VirtualMachineReason.FIRMWARE_UNSUPPORTED,
    VSphereMachineReason.TEMPLATE_NOT_FOUND,
    VSphereMachineReason.INVALID_SPEC,
    VSphereMachineReason.CLONE_FAILED,
    VSphereMachineReason.MAC_ADDRESS_CONFLICT,
})
"""Condition reasons that need a user's action (SPEC §3-§4): the VM is counted as ``Failed``.
Waits that resolve on their own are not here: placement waits (``NoProviderMatched``,
``NoFailureDomainMatched``, ``InsufficientCapacity``, ``AntiAffinityUnsatisfied``: every VM
shows them while the Providers' inventories are first read) count as ``Pending``; ``Cloning``,
``WaitingForIPAddress``... as ``Provisioning``."""


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return {}
    return {str(c.get("type")): c for c in conditions if isinstance(c, Mapping)}


def phase_of(obj: Mapping[str, Any]) -> str:
    """The phase of one VirtualMachine (a wire dict); never raises.

    Rules, first match wins: ``metadata.deletionTimestamp`` set -> ``Deleting``; condition
    ``Ready`` True -> ``Ready``; any of ``Ready``/``Scheduled``/``InfrastructureReady`` False with
    a reason in :data:`FAILED_REASONS` -> ``Failed``; ``Scheduled`` True -> ``Provisioning``;
    otherwise (no status yet, not yet placed, waiting for capacity or an image) -> ``Pending``.
    """
    meta = obj.get("metadata") or {}
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        return DELETING
    conditions = _conditions(obj)
    ready = conditions.get(VirtualMachineConditionType.READY, {})
    if ready.get("status") == "True":
        return READY
    for kind in (VirtualMachineConditionType.READY, VirtualMachineConditionType.SCHEDULED,
                 VirtualMachineConditionType.INFRASTRUCTURE_READY):
        condition = conditions.get(kind, {})
        if condition.get("status") == "False" and condition.get("reason") in FAILED_REASONS:
            return FAILED
    if conditions.get(VirtualMachineConditionType.SCHEDULED, {}).get("status") == "True":
        return PROVISIONING
    return PENDING


@dataclass(frozen=True)
class PhaseCounts:
    """Already counted phases (``phase -> number of VirtualMachines``), what a source returns
    when it counted without handing out the objects (see :func:`informer_source`)."""

    counts: Mapping[str, int]


Source = Callable[[], Iterable[Mapping[str, Any]] | PhaseCounts | None]
"""Returns the VirtualMachines to count (or their :class:`PhaseCounts`), or None while the
source has not synced."""


class _PhaseMemo:
    """``key -> (resourceVersion, phase)`` of the objects of one informer store."""

    def __init__(self, informer: SyncedStore) -> None:
        self._informer = informer
        self._lock = threading.Lock()  # two scrapes at once must not interleave their updates
        self._memo: dict[str, tuple[str, str]] = {}

    def __call__(self) -> PhaseCounts | None:
        if not self._informer.has_synced():
            return None
        store = self._informer.store
        counts = dict.fromkeys(PHASES, 0)
        with self._lock:
            memo: dict[str, tuple[str, str]] = {}
            for key in store.list_keys():
                rv = store.resource_version(key)
                if rv is None:  # deleted since list_keys
                    continue
                known = self._memo.get(key)
                # An object without a resourceVersion (never from an API server) is
                # decoded on every scrape: an empty one would match any state.
                if known is not None and rv and known[0] == rv:
                    phase = known[1]
                else:
                    obj = store.get(key)
                    if obj is None:
                        continue
                    # resourceVersion of the decoded object: the store may have moved on
                    # between resource_version() and get().
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    phase = phase_of(obj)
                memo[key] = (rv, phase)
                counts[phase] += 1
            self._memo = memo  # keys no longer in the store are dropped
        return PhaseCounts(counts)

    def __len__(self) -> int:
        return len(self._memo)


def informer_source(informer: SyncedStore) -> Source:
    """A :data:`Source` over an informer's store that decodes, per scrape, only the objects
    whose resourceVersion changed since the previous scrape (kube-state-metrics derives its
    gauges from the informer store the same way; the resourceVersion changes on every write,
    Kubernetes API conventions). Memory: one ``(resourceVersion, phase)`` entry per object.
    Returns None until the informer has synced."""
    return _PhaseMemo(informer)


class VirtualMachinePhaseCollector(Collector):
    """Yields ``banlieue_virtual_machines{phase}`` from the most recently bound source.

    Several managers may live in one process (tests); the newest binding wins and unbinding
    falls back to the previous one, so two sources are never summed (which would double count).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # prometheus_client may scrape from its own thread
        self._sources: list[Source] = []

    def bind(self, source: Source) -> Callable[[], None]:
        """Count the objects ``source`` returns; returns the function that unbinds it."""
        with self._lock:
            self._sources.append(source)

        def unbind() -> None:
            with self._lock:
                if source in self._sources:
                    self._sources.remove(source)

        return unbind

    def describe(self) -> Iterable[GaugeMetricFamily]:
        """The metric's name and type without reading any source (registry duplicate check)."""
        return [self._family()]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(METRIC_NAME, "VirtualMachines by phase", labels=["phase"])

    def collect(self) -> Iterable[GaugeMetricFamily]:
        """One sample per phase from the current source; no samples when none has synced."""
        family = self._family()
        with self._lock:
            source = self._sources[-1] if self._sources else None
        objects = source() if source is not None else None
        if objects is None:
            return [family]
        counts = dict.fromkeys(PHASES, 0)
        if isinstance(objects, PhaseCounts):
            counts.update((phase, objects.counts.get(phase, 0)) for phase in PHASES)
        else:
            for obj in objects:
                counts[phase_of(obj)] += 1
        for phase, count in counts.items():
            family.add_metric([phase], count)
        return [family]


COLLECTOR = VirtualMachinePhaseCollector()
REGISTRY.register(COLLECTOR)


def bind_source(source: Source) -> Callable[[], None]:
    """Bind ``source`` to the process-wide collector; returns the unbind function."""
    return COLLECTOR.bind(source)
