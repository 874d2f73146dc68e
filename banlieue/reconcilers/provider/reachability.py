"""Which Providers to re-check when their vCenter stops or starts answering (provider role).

A Provider's ``ProviderReachable`` condition is otherwise refreshed every ``REFRESH_SECONDS``
(300 s): a vCenter that died kept its Provider ``Ready`` for minutes while new VMs were still
placed on it (the VMImage's per-Provider row, which the scheduler reads, follows the Provider's
``Ready``). The backend hears the transitions first (``VSphereBackend.add_unreachable_listener``
and ``add_reconnect_listener``: the change watch polls every vCenter and retries within 5 s, and
every reconciler call counts), so each transition enqueues the vSphere Providers on that
endpoint; their reconcile probes the vCenter (``check_connection``) and writes what it finds.
A vCenter that hangs rather than refuses is noticed by the backend's reachability probe
(``backends/vsphere/health``: ``CurrentTime`` every 5 s with a 5 s timeout, on its own
connection): the backend then reports since when it is silent (``SilenceReporter``) and the
Provider's reconcile writes ``ProviderReachable=False`` with that time instead of sending requests
that would wait for the request timeout (120 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol, runtime_checkable

from banlieue.backends.base import BackendError, Connection
from banlieue.reconcilers.connection import ConnectionConfigError, connection_for
from banlieue.reconcilers.kinds import PROVIDER
from banlieue.reconcilers.parsed import parse_provider
from banlieue.runtime.cache import Cache
from banlieue.runtime.reconcile import Request


@runtime_checkable
class ReachabilityNotifier(Protocol):
    """What a backend offers to tell that a vCenter stopped or started answering."""

    def endpoint_label(self, conn: Connection) -> str: ...

    def add_reconnect_listener(self, callback: Callable[[str], None]) -> Callable[[], None]: ...

    def add_unreachable_listener(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


@runtime_checkable
class SilenceReporter(Protocol):
    """What a backend offers to tell since when a vCenter has not answered its probe."""

    def unreachable_since(self, conn: Connection) -> float | None:
        """Wall-clock seconds since the epoch, or None while the vCenter answers."""
        ...


def providers_on(label: str, cache: Cache, notifier: ReachabilityNotifier) -> list[Request]:
    """Requests for the cached vSphere Providers whose endpoint is ``label`` (``host:port``);
    Providers whose connection cannot be built (missing Secret, bad endpoint) are skipped: their
    own reconcile reports that."""
    out: list[Request] = []
    for raw in cache.list(PROVIDER):
        provider = parse_provider(raw)
        if provider is None:
            continue
        try:
            if notifier.endpoint_label(connection_for(provider, cache)) != label:
                continue
        except (ConnectionConfigError, BackendError):
            continue
        out.append(Request(provider.metadata.namespace or "", provider.metadata.name or ""))
    return out


async def reachability_requests(notifier: ReachabilityNotifier, cache: Cache) -> AsyncIterator[Request]:
    """A controller channel (``watches_channel``): the Providers to re-check after each
    reachability transition of their vCenter, until the controller stops."""
    loop = asyncio.get_running_loop()
    labels: asyncio.Queue[str] = asyncio.Queue()

    def heard(label: str) -> None:  # from a pool or watch thread: hand over, never block
        loop.call_soon_threadsafe(labels.put_nowait, label)

    removers = [notifier.add_unreachable_listener(heard), notifier.add_reconnect_listener(heard)]
    try:
        while True:
            label = await labels.get()
            for request in providers_on(label, cache, notifier):
                yield request
    finally:
        for remove in removers:
            remove()
