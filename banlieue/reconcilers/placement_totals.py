"""What the VirtualMachines of each namespace hold per (Provider, failure domain), kept up to date
from the VirtualMachine informer's events instead of walked at every placement.

kube-scheduler's scheduler cache (pkg/scheduler/backend/cache): each node's requested resources
are updated from pod add/update/delete events, and a pod the scheduler has just bound is
*assumed* (counted at once) until the informer shows it. Here, per namespace and per
(provider, failure domain): the placed VMs (``status.scheduled.providerName`` and
``failureDomain`` both set) counted per Provider and per domain, and among them the pending ones
(placed, ``status.initialization.provisioned`` not true: their resources are not in the
Provider's reported free capacity yet) counted per VMClass name. Memory and storage are derived
from the class counts when asked (``peer_totals``), so a VMClass edit or a class missing from the
cache reads exactly as a walk over the peers at that moment would.

Each VM's *contribution* is derived from its last observed state and its assumed placement, and
the sums change only by the difference between its contribution before and after an event (never
added blindly): a relist that delivers an object again, a resync (``on_update(obj, obj)``) or a
repeated ``assume`` change nothing; a delete (or a ``DeletedFinalStateUnknown`` tombstone)
subtracts; a VM that becomes provisioned stops counting as pending; a VM that changes class,
Provider or domain moves its contribution.

An assumed placement counts instead of the observed one while they differ and is dropped once
the informer shows it (so it is never counted twice), when the VM is deleted, or by
``drop_assumed``. A VM is counted only while the informer has it: assuming a VM the cache does
not hold counts nothing until it appears. Only the placement is assumed: a VM this process has
just written as provisioned counts as pending until the informer shows the write (conservative:
free capacity reads lower for that instant, never higher).

Single event loop, no locking (the informer calls the handlers inline, as the cache it feeds).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from banlieue.reconcilers.scheduler import PeerTotals
from banlieue.runtime.cache import meta_namespace_key
from banlieue.runtime.event import DeletedFinalStateUnknown, Object

Where = tuple[str, str]
"""(provider name, failure domain name)."""
ClassSize = Callable[[str], tuple[int, int]]
"""VMClass name -> (memory MiB, storage GiB) a VM of that class takes; (0, 0) when unknown."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the totals read from one VirtualMachine as the informer last showed it.
    ``where``: None when not placed; ``pending_class``: ``spec.classRef.name`` ("" when absent)
    while not provisioned, None once provisioned."""

    namespace: str
    where: Where | None
    pending_class: str | None

    @staticmethod
    def of(obj: Object) -> Observed:
        """Read ``obj``; never raises (an informer handler that raised would miss the event)."""
        provider, domain = nested(obj, "status", "scheduled", "providerName"), nested(obj, "status", "scheduled", "failureDomain")
        where = (sys.intern(provider), sys.intern(domain)) if isinstance(provider, str) and isinstance(domain, str) else None
        class_name = nested(obj, "spec", "classRef", "name")
        pending = None if nested(obj, "status", "initialization", "provisioned") else sys.intern(
            class_name if isinstance(class_name, str) else "")
        return Observed(str(nested(obj, "metadata", "namespace") or ""), where, pending)


def nested(obj: Object, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a level is missing or not a mapping."""
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one VM adds to its namespace's sums: its (effective) placement, and its class name
    when it is pending (None: provisioned)."""

    where: Where
    pending_class: str | None


@dataclass
class _Sums:
    """One namespace's sums. Zero entries are removed (so the maps stay O(failure domains))."""

    on_provider: dict[str, int] = field(default_factory=dict)
    in_domain: dict[Where, int] = field(default_factory=dict)
    pending: dict[Where, dict[str, int]] = field(default_factory=dict)
    """(provider, domain) -> class name -> number of pending VMs."""

    def add(self, c: Contribution, sign: int) -> None:
        _bump(self.on_provider, c.where[0], sign)
        _bump(self.in_domain, c.where, sign)
        if c.pending_class is not None:
            classes = self.pending.setdefault(c.where, {})
            _bump(classes, c.pending_class, sign)
            if not classes:
                del self.pending[c.where]

    def __bool__(self) -> bool:
        return bool(self.on_provider)


def _bump(counts: dict[Any, int], key: Any, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)


class PlacementTotals:
    """Per-namespace placement sums of the VirtualMachines (module docstring), fed as a
    ``ResourceEventHandler`` of the VirtualMachine informer plus ``assume``/``drop_assumed``.

    VMs are keyed ``<namespace>/<name>`` (the cache's keys)."""

    def __init__(self) -> None:
        self._observed: dict[str, Observed] = {}
        self._assumed: dict[str, Where] = {}
        self._sums: dict[str, _Sums] = {}

    # --- ResourceEventHandler ---------------------------------------------------------------
    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        self.observe(meta_namespace_key(obj), obj)

    def on_update(self, old: Object, new: Object) -> None:
        self.observe(meta_namespace_key(new), new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.forget(obj.key if isinstance(obj, DeletedFinalStateUnknown) else meta_namespace_key(obj))

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
        return None if where is None else Contribution(where, observed.pending_class)

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

    def contribution(self, key: str) -> Contribution | None:
        """What ``key`` counts for now (None: not counted)."""
        return self._contribution(key)

    def peer_totals(self, namespace: str, exclude: str, class_size: ClassSize) -> PeerTotals:
        """The namespace's sums as the scheduler reads them, the VM at key ``exclude`` (the one
        being placed) left out. Cost: O(Providers + failure domains x classes pending there)."""
        sums = self._sums.get(namespace) or _Sums()
        on_provider = dict(sums.on_provider)
        in_domain = dict(sums.in_domain)
        sizes: dict[str, tuple[int, int]] = {}

        def size(name: str) -> tuple[int, int]:
            if name not in sizes:
                sizes[name] = class_size(name)
            return sizes[name]

        pending: dict[Where, tuple[int, int]] = {}
        for where, classes in sums.pending.items():
            mem = storage = 0
            for name, n in classes.items():
                m, s = size(name)
                mem, storage = mem + n * m, storage + n * s
            pending[where] = (mem, storage)
        observed = self._observed.get(exclude)
        mine = self._contribution(exclude) if observed is not None and observed.namespace == namespace else None
        if mine is not None:
            _bump(on_provider, mine.where[0], -1)
            _bump(in_domain, mine.where, -1)
            if mine.pending_class is not None:
                m, s = size(mine.pending_class)
                mem, storage = pending[mine.where]
                pending[mine.where] = (mem - m, storage - s)
        return PeerTotals(pending, on_provider, in_domain)
