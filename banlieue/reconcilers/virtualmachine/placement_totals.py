"""What the VirtualMachines of each namespace hold per (Provider, failure domain), kept up to date
from the VirtualMachine informer's events instead of walked at every placement.

kube-scheduler's scheduler cache (pkg/scheduler/backend/cache): each node's requested resources
are updated from pod add/update/delete events, and a pod the scheduler has just bound is
*assumed* (counted at once) until the informer shows it. Here, per namespace and per
(provider, failure domain): the placed VMs (``status.scheduled.providerName`` and
``failureDomain`` both set) counted per Provider and per domain, and among them the ones whose
resources may not be in the Provider's reported free capacity yet, per VMClass name:

- *pending*: ``status.initialization.provisioned`` not true, or provisioned without a known
  provisioning time (below); they always count;
- *recently provisioned*: provisioned at time T, kept as a sorted list of T per class; they count
  against a domain until the domain's capacity was reported at or after T
  (``attributes.capacity.updateTime`` <= T still counts: both have second precision, and a tie
  cannot tell the order). kube-scheduler keeps an assumed pod until the node's state confirms it;
  here the Provider's report is refreshed only every 300 s (and is written only when a figure
  moves), so a VM stops counting only once a report taken after it was provisioned is written.

T is the ``lastTransitionTime`` of the VM's ``InfrastructureReady`` condition while that
condition is True: the VirtualMachine reconciler sets it True in the same status write that first
mirrors ``initialization.provisioned`` (banlieue.reconcilers.virtualmachine.decide ``_mirror``,
held while the VSphereMachine is in a provisioning step), so T is never earlier than the VM's
resources were taken on vSphere. T and ``updateTime`` come from the clocks of the controller and
provider roles: skew between them shifts the comparison by as much. A later False -> True flip
moves T later: the VM counts again until the next capacity write (an over-count). Provisioned with
``InfrastructureReady`` not True (never True, so its time may predate provisioning): counted as
pending.

Every placed VM, whatever its state, is also counted per class in its domain (``placed``): what
it *reserves* there (its class's configured memory and disks per storage class), which the
scheduler holds against the domain's totals (rule 5, reservation; docs/concepts.md "Capacity").

Memory and storage are derived from the class counts when asked (``peer_totals``), so a VMClass
edit or a class missing from the cache reads exactly as a walk over the peers at that moment
would.

Each VM's *contribution* is derived from its last observed state and its assumed placement, and
the sums change only by the difference between its contribution before and after an event (never
added blindly): a relist that delivers an object again, a resync (``on_update(obj, obj)``) or a
repeated ``assume`` change nothing; a delete (or a ``DeletedFinalStateUnknown`` tombstone)
subtracts; a VM that becomes provisioned moves from pending to recently provisioned; a VM that
changes class, Provider or domain moves its contribution.

An assumed placement counts instead of the observed one while they differ and is dropped once
the informer shows it (so it is never counted twice), when the VM is deleted, or by
``drop_assumed``. A VM is counted only while the informer has it: assuming a VM the cache does
not hold counts nothing until it appears. Only the placement is assumed: a VM this process has
just written as provisioned counts as pending until the informer shows the write (conservative:
free capacity reads lower for that instant, never higher).

Single event loop, no locking (the informer calls the handlers inline, as the cache it feeds).
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from banlieue.api.virtualmachine import VirtualMachineConditionType
from banlieue.reconcilers.virtualmachine.scheduler import PeerTotals, Reserved
from banlieue.runtime.cache import KeyedStateHandler
from banlieue.runtime.event import Object, nested

Where = tuple[str, str]
"""(provider name, failure domain name)."""
ClassSize = Callable[[str], tuple[int, int]]
"""VMClass name -> (memory MiB, storage GiB) a VM of that class takes; (0, 0) when unknown."""


ClassShape = Callable[[str], tuple[int, Mapping[str, int]]]
"""VMClass name -> (memory MiB, disk GiB per storage class) a VM of that class reserves; (0, {})
when unknown."""
ReportTimes = Mapping[Where, datetime]
"""(provider, failure domain) -> ``attributes.capacity.updateTime`` of the Provider's report
(a domain missing: no time reported, every recently provisioned VM there counts)."""
INFRASTRUCTURE_READY = VirtualMachineConditionType.INFRASTRUCTURE_READY


@dataclass(frozen=True, slots=True)
class Observed:
    """What the totals read from one VirtualMachine as the informer last showed it.
    ``where``: None when not placed; ``class_name``: ``spec.classRef.name`` ("" when absent);
    ``provisioned_at``: T (POSIX seconds) when provisioned at a known time (module docstring),
    None while pending."""

    namespace: str
    where: Where | None
    class_name: str
    provisioned_at: float | None

    @staticmethod
    def of(obj: Object) -> Observed:
        """Read ``obj``; never raises (an informer handler that raised would miss the event)."""
        provider, domain = nested(obj, "status", "scheduled", "providerName"), nested(obj, "status", "scheduled", "failureDomain")
        where = (sys.intern(provider), sys.intern(domain)) if isinstance(provider, str) and isinstance(domain, str) else None
        class_name = nested(obj, "spec", "classRef", "name")
        at = provisioned_at(obj) if nested(obj, "status", "initialization", "provisioned") is True else None
        return Observed(str(nested(obj, "metadata", "namespace") or ""), where,
                        sys.intern(class_name if isinstance(class_name, str) else ""), at)


def provisioned_at(obj: Object) -> float | None:
    """``lastTransitionTime`` (POSIX seconds) of the True ``InfrastructureReady`` condition of
    ``obj``, None when there is none or it does not parse (module docstring: T)."""
    conditions = nested(obj, "status", "conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == INFRASTRUCTURE_READY and cond.get("status") == "True":
            return _seconds(cond.get("lastTransitionTime"))
    return None


def _seconds(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo is not None else None


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one VM adds to its namespace's sums: its (effective) placement, its class name, and
    its provisioning time T (None: pending)."""

    where: Where
    class_name: str
    provisioned_at: float | None = None


@dataclass
class _Sums:
    """One namespace's sums. Zero entries are removed (so the maps stay O(failure domains))."""

    on_provider: dict[str, int] = field(default_factory=dict)
    in_domain: dict[Where, int] = field(default_factory=dict)
    pending: dict[Where, dict[str, int]] = field(default_factory=dict)
    """(provider, domain) -> class name -> number of pending VMs."""
    provisioned: dict[Where, dict[str, list[float]]] = field(default_factory=dict)
    """(provider, domain) -> class name -> provisioning times T of its VMs, sorted."""
    placed: dict[Where, dict[str, int]] = field(default_factory=dict)
    """(provider, domain) -> class name -> number of VMs placed there (pending or not)."""

    def add(self, c: Contribution, sign: int) -> None:
        _bump(self.on_provider, c.where[0], sign)
        _bump(self.in_domain, c.where, sign)
        placed = self.placed.setdefault(c.where, {})
        _bump(placed, c.class_name, sign)
        if not placed:
            del self.placed[c.where]
        if c.provisioned_at is None:
            classes = self.pending.setdefault(c.where, {})
            _bump(classes, c.class_name, sign)
            if not classes:
                del self.pending[c.where]
            return
        times = self.provisioned.setdefault(c.where, {})
        series = times.setdefault(c.class_name, [])
        if sign > 0:
            bisect.insort(series, c.provisioned_at)
        else:
            # The contribution was added before (``_move`` subtracts only what it added).
            del series[bisect.bisect_left(series, c.provisioned_at)]
            if not series:
                del times[c.class_name]
                if not times:
                    del self.provisioned[c.where]

    def __bool__(self) -> bool:
        return bool(self.on_provider)


def _bump(counts: dict[Any, int], key: Any, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


class PlacementTotals(KeyedStateHandler):
    """Per-namespace placement sums of the VirtualMachines (module docstring), fed as a
    ``ResourceEventHandler`` of the VirtualMachine informer plus ``assume``/``drop_assumed``.

    VMs are keyed ``<namespace>/<name>`` (the cache's keys)."""

    def __init__(self) -> None:
        self._observed: dict[str, Observed] = {}
        self._assumed: dict[str, Where] = {}
        self._sums: dict[str, _Sums] = {}

    # --- writes -----------------------------------------------------------------------------
    def observe(self, key: str, obj: Object) -> None:
        """The informer shows ``obj`` at ``key`` (added, updated, relisted or resynced)."""
        observed = Observed.of(obj)
        before = self._contribution(key)
        self._observed[key] = observed
        if observed.where is not None and self._assumed.get(key) == observed.where:
            del self._assumed[key]  # the cache shows the assumed placement now
        self._move(key, observed.namespace, before)

    def forget(self, key: str) -> None:
        """The VM at ``key`` is gone (deleted, or vanished across a relist)."""
        before = self._contribution(key)
        self._assumed.pop(key, None)
        observed = self._observed.pop(key, None)
        if observed is not None:
            self._move(key, observed.namespace, before)

    def assume(self, key: str, where: Where) -> None:
        """This process placed the VM at ``key`` on ``where``: count it there until the informer
        shows it (kube-scheduler ``AssumePod``)."""
        before = self._contribution(key)
        observed = self._observed.get(key)
        if observed is not None and observed.where == where:
            self._assumed.pop(key, None)
        else:
            self._assumed[key] = where
        if observed is not None:
            self._move(key, observed.namespace, before)

    def drop_assumed(self, key: str) -> None:
        """Count the VM at ``key`` as the informer shows it again (kube-scheduler ``ForgetPod``)."""
        before = self._contribution(key)
        observed = self._observed.get(key)
        if self._assumed.pop(key, None) is not None and observed is not None:
            self._move(key, observed.namespace, before)

    def _contribution(self, key: str) -> Contribution | None:
        observed = self._observed.get(key)
        if observed is None:
            return None
        where = self._assumed.get(key) or observed.where
        return None if where is None else Contribution(where, observed.class_name, observed.provisioned_at)

    def _move(self, key: str, namespace: str, before: Contribution | None) -> None:
        """Replace ``before`` by the key's contribution now in ``namespace``'s sums (a key's
        namespace never changes: it is part of the key)."""
        after = self._contribution(key)
        if before == after:
            return
        if before is not None:
            sums = self._sums[namespace]
            sums.add(before, -1)
            if not sums:
                del self._sums[namespace]
        if after is not None:
            self._sums.setdefault(namespace, _Sums()).add(after, 1)

    # --- reads ------------------------------------------------------------------------------
    def assumed(self, key: str) -> Where | None:
        """The assumed placement of ``key`` not yet shown by the informer, or None."""
        return self._assumed.get(key)

    def peer_totals(self, namespace: str, exclude: str, class_size: ClassSize,
                    reported: ReportTimes | None = None, class_shape: ClassShape | None = None) -> PeerTotals:
        """The namespace's sums as the scheduler reads them, the VM at key ``exclude`` (the one
        being placed) left out: ``pending`` holds, per domain, the pending VMs and the VMs
        provisioned at or after the domain's capacity report time in ``reported`` (all of them
        where it has none); ``reserved`` (with ``class_shape``; empty without) what every VM
        placed there reserves. Cost: O(Providers + failure domains x classes there x log VMs)."""
        sums = self._sums.get(namespace) or _Sums()
        reported = reported or {}
        on_provider = dict(sums.on_provider)
        in_domain = dict(sums.in_domain)
        sizes: dict[str, tuple[int, int]] = {}

        def size(name: str) -> tuple[int, int]:
            if name not in sizes:
                sizes[name] = class_size(name)
            return sizes[name]

        def since(where: Where) -> float | None:
            at = reported.get(where)
            return None if at is None else at.timestamp()

        counts: dict[Where, dict[str, int]] = {where: dict(classes) for where, classes in sums.pending.items()}
        for where, times in sums.provisioned.items():
            t0 = since(where)
            classes = counts.setdefault(where, {})
            for name, series in times.items():
                n = len(series) if t0 is None else len(series) - bisect.bisect_left(series, t0)
                classes[name] = classes.get(name, 0) + n
        observed = self._observed.get(exclude)
        mine = self._contribution(exclude) if observed is not None and observed.namespace == namespace else None
        if mine is not None:
            _bump(on_provider, mine.where[0], -1)
            _bump(in_domain, mine.where, -1)
            t0 = since(mine.where)
            if mine.provisioned_at is None or t0 is None or mine.provisioned_at >= t0:
                counts[mine.where][mine.class_name] -= 1
        pending: dict[Where, tuple[int, int]] = {}
        for where, classes in counts.items():
            mem = storage = 0
            for name, n in classes.items():
                if n:
                    m, s = size(name)
                    mem, storage = mem + n * m, storage + n * s
            pending[where] = (mem, storage)
        reserved: dict[Where, Reserved] = {}
        if class_shape is not None:
            shapes: dict[str, tuple[int, Mapping[str, int]]] = {}
            for where, placed in sums.placed.items():
                held = Reserved()
                for name, n in placed.items():
                    if mine is not None and mine.where == where and mine.class_name == name:
                        n -= 1
                    if n > 0:
                        if name not in shapes:
                            shapes[name] = class_shape(name)
                        held = held.plus(*shapes[name], n=n)
                reserved[where] = held
        return PeerTotals(pending, on_provider, in_domain, reserved)
