"""Re-measure a Provider's capacity soon after a machine on it is provisioned or deleted
(provider role; issue 21).

vSphere's free figures (the scheduler's second guard, docs/concepts.md "Capacity") were
re-measured only by the periodic refresh (300 s): after deletions, new VMs stayed
``InsufficientCapacity`` for minutes. Here every VSphereMachine event that changes what vCenter
holds — a machine becoming provisioned (``status.initialization.provisioned`` turns true) or
going away (deleted from the API, after its VM was destroyed) — schedules a re-check of the
Providers it uses ``DEBOUNCE_SECONDS`` later; further events for the same Provider within that
window ride along (debounced: a burst of 100 deletions costs one inventory walk, not 100).
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


def provisioned(obj: Mapping[str, Any] | None) -> bool:
    """Whether the VSphereMachine (wire dict) says ``status.initialization.provisioned: true``."""
    status = (obj or {}).get("status") or {}
    return bool((status.get("initialization") or {}).get("provisioned") is True)


class Remeasure:
    """A ``ResourceEventHandler`` of the VSphereMachine informer and a controller channel
    (``requests()``): the Providers to re-measure, each at most once per ``debounce`` seconds.
    Handlers run on the event loop (informer task) and never block."""

    def __init__(self, cache: Cache, debounce: float = DEBOUNCE_SECONDS) -> None:
        self.cache = cache
        self.debounce = debounce
        self._queue: asyncio.Queue[Request] = asyncio.Queue()
        self._due: set[Request] = set()

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
            self._due.add(request)
            asyncio.get_running_loop().call_later(self.debounce, self._fire, request)

    def _fire(self, request: Request) -> None:
        self._due.discard(request)
        self._queue.put_nowait(request)

    async def requests(self) -> AsyncIterator[Request]:
        """The debounced re-measure requests, until the controller stops."""
        while True:
            yield await self._queue.get()
