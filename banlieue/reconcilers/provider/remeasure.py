"""Re-measure a Provider's capacity soon after a machine on it is provisioned or deleted
(provider role; issue 21).

vSphere's free figures (the scheduler's second guard, docs/concepts.md "Capacity") were
re-measured only by the periodic refresh (300 s): after deletions, new VMs stayed
``InsufficientCapacity`` for minutes. Here every VSphereMachine event that changes what vCenter
holds — a machine becoming provisioned (``status.initialization.provisioned`` turns true) or
going away (deleted from the API, after its VM was destroyed) — schedules a re-check of the
Providers it uses ``DEBOUNCE_SECONDS`` later; further events for the same Provider within that
window ride along (debounced: a burst of 100 deletions costs one inventory walk, not 100).

In a wave the events never stop: a re-measure every ``DEBOUNCE_SECONDS`` (a ``CurrentTime`` and
a root inventory traversal each) was, at 1,000 machines provisioned over 26 minutes, 0.41
vCenter requests per machine (issue 22). So a Provider is re-measured at most once per
``WAVE_INTERVAL_SECONDS`` (30 s): the first event after a quiet spell still gets its re-measure
``DEBOUNCE_SECONDS`` later, the events after it wait until that much after the last one
(``due_at``), and the last event of a wave is measured at most 30 s after it.

Why 30 s is safe for placement (docs/concepts.md, "How capacity is counted"): check 1 (the
reservation) reads nothing measured but the totals, which machines do not change; check 2
subtracts from vSphere's free figures every VM placed there that is not provisioned yet or was
provisioned at or after the figures' ``capacity.updateTime``, so figures 30 s old under-state
the room, never over-state it. What waits longer is only a machine refused by check 2 after
deletions freed room vSphere has not been re-asked about: at most 30 s more than before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from banlieue.reconcilers.kinds import PROVIDER
from banlieue.reconcilers.parsed import parse_provider
from banlieue.reconcilers.provider.deletion import machine_uses_provider
from banlieue.runtime.cache import Cache
from banlieue.runtime.event import DeletedFinalStateUnknown, Object
from banlieue.runtime.reconcile import Request

DEBOUNCE_SECONDS = 5.0
"""How long after the first machine event a Provider is re-measured (events meanwhile join it)."""
WAVE_INTERVAL_SECONDS = 30.0
"""Shortest time between two re-measures of one Provider (seconds; module docstring)."""


def due_at(now: float, last: float | None, debounce: float, interval: float) -> float:
    """When a Provider whose machine changed at ``now`` is re-measured: ``debounce`` seconds
    later, and not before ``interval`` seconds after its last re-measure (``last``, None when
    there was none). Monotonic seconds of the event loop's clock."""
    due = now + debounce
    return due if last is None else max(due, last + interval)


def provisioned(obj: Mapping[str, Any] | None) -> bool:
    """Whether the VSphereMachine (wire dict) says ``status.initialization.provisioned: true``."""
    status = (obj or {}).get("status") or {}
    return bool((status.get("initialization") or {}).get("provisioned") is True)


class Remeasure:
    """A ``ResourceEventHandler`` of the VSphereMachine informer and a controller channel
    (``requests()``): the Providers to re-measure, ``debounce`` seconds after a first event and at
    most once per ``interval`` seconds (``due_at``). Handlers run on the event loop (informer
    task) and never block."""

    def __init__(self, cache: Cache, debounce: float = DEBOUNCE_SECONDS,
                 interval: float = WAVE_INTERVAL_SECONDS) -> None:
        self.cache = cache
        self.debounce = debounce
        self.interval = interval
        self._queue: asyncio.Queue[Request] = asyncio.Queue()
        self._due: dict[Request, asyncio.TimerHandle] = {}
        self._last: dict[Request, float] = {}  # the loop time each Provider was last handed out

    # --- ResourceEventHandler ---------------------------------------------------------------
    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        return  # a new machine holds nothing in vCenter yet; its provisioning is an update

    def on_update(self, old: Object, new: Object) -> None:
        if provisioned(new) and not provisioned(old):
            self._schedule(new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        raw = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        if isinstance(raw, Mapping):
            self._schedule(raw)

    # --- scheduling ---------------------------------------------------------------------------
    def _schedule(self, machine: Mapping[str, Any]) -> None:
        ns = (machine.get("metadata") or {}).get("namespace")
        for raw in self.cache.list(PROVIDER, ns):
            provider = parse_provider(raw)
            if provider is None or not machine_uses_provider(machine, provider):
                continue
            request = Request(provider.metadata.namespace or "", provider.metadata.name or "")
            if request in self._due:
                continue  # already due: this event joins it
            loop = asyncio.get_running_loop()
            when = due_at(loop.time(), self._last.get(request), self.debounce, self.interval)
            self._due[request] = loop.call_at(when, self._fire, request)

    def _fire(self, request: Request) -> None:
        self._due.pop(request, None)
        now = asyncio.get_running_loop().time()
        # Only a re-measure within the last ``interval`` matters (``due_at``): drop older ones
        # (Providers deleted since).
        self._last = {r: t for r, t in self._last.items() if t > now - self.interval}
        self._last[request] = now
        self._queue.put_nowait(request)

    async def requests(self) -> AsyncIterator[Request]:
        """The debounced re-measure requests, until the controller stops."""
        while True:
            yield await self._queue.get()
