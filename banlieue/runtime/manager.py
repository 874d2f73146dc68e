"""The Manager: shared informers, cache, probes/metrics, leader election and runnables.

controller-runtime ``pkg/manager`` (runtime-facts §3.6): start order HTTP servers -> caches
(wait for sync, at most 2 min) -> runnables that need no leader election -> leader election ->
leader-election runnables (controllers). Stop order: runnables (leader ones drained within
``graceful_shutdown_timeout``, 30 s; skipped when leadership was lost), caches, lease release,
HTTP servers, client. SIGTERM/SIGINT cancel ``start()``, which then shuts down as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import socket
import uuid
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import structlog

from banlieue.runtime.cache import Cache
from banlieue.runtime.client import Client
from banlieue.runtime.health import HealthServer, parse_bind_address
from banlieue.runtime.informer import Informer
from banlieue.runtime.informer_factory import InformerFactory, LabelSelectorFor
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.leaderelection import LeaderElector
from banlieue.runtime.metrics_auth import MetricsAuth, server_ssl_context
from banlieue.runtime.recorder import EventRecorder

log = structlog.get_logger("banlieue.runtime.manager")


@runtime_checkable
class Runnable(Protocol):
    """Something the manager runs: ``start()`` runs until cancelled (or returns when done).

    ``need_leader_election``: True for controllers (run only while leading). A runnable may
    also offer ``async def stop()``: stop taking new work and let ``start()`` return once
    in-flight work is done (the graceful drain); without it the task is cancelled.
    """

    need_leader_election: bool

    async def start(self) -> None: ...


class LeaderElectionLost(RuntimeError):
    """Raised from ``Manager.start`` when the lease was lost (cr: "leader election lost")."""


class CacheSyncTimeout(RuntimeError):
    """Raised from ``Manager.start`` when the caches did not sync within ``cache_sync_timeout``."""


class Manager:
    """Owns the shared informers (one per kind), the ``cache`` and the ``client``.

    ``namespace`` scopes every informer (None = all namespaces); ``label_selector_for`` maps a
    kind to an API label selector string for its informer. ``informer_options`` are passed to
    every ``Informer`` (e.g. ``watch_silence_timeout``). Bind addresses: see ``health``.

    ``informers``: an ``InformerFactory`` shared with other Managers of the process (one
    LIST/WATCH and store per kind for all of them); its scope then applies, so passing
    ``label_selector_for`` or ``informer_options`` too, or a ``namespace`` other than the
    factory's, raises ValueError. Without it the Manager makes its own factory on ``client``.
    """

    def __init__(
        self,
        client: Client,
        *,
        namespace: str | None = None,
        label_selector_for: LabelSelectorFor | None = None,
        leader_election: bool = False,
        leader_election_id: str = "banlieue-controller-leader",
        leader_election_namespace: str | None = None,
        leader_election_identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        metrics_bind_address: str = ":8080",
        health_probe_bind_address: str = ":8081",
        metrics_secure: bool = False,
        metrics_cert_dir: str | None = None,
        graceful_shutdown_timeout: float = 30.0,
        cache_sync_timeout: float = 120.0,
        handle_signals: bool = True,
        informer_options: Mapping[str, Any] | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.handle_signals = handle_signals
        if informers is None:
            informers = InformerFactory(client, namespace=namespace, label_selector_for=label_selector_for,
                                        informer_options=informer_options)
        elif label_selector_for is not None or informer_options or namespace != informers.namespace:
            raise ValueError("a shared InformerFactory sets the informers' namespace, selectors and options")
        self.informers = informers
        self._acquired = False
        self._runnables: list[Runnable] = []
        self._running = False
        self.cache = Cache(self.get_informer, informers.informers)
        secure = metrics_secure and parse_bind_address(metrics_bind_address) is not None
        self.health = HealthServer(
            metrics_bind_address=metrics_bind_address, health_probe_bind_address=health_probe_bind_address,
            metrics_auth=MetricsAuth(client) if secure else None,
            metrics_ssl=server_ssl_context(metrics_cert_dir) if secure else None,
        )
        self.health.add_healthz_check("ping", lambda: True)
        self.health.add_readyz_check("informers-synced", lambda: self._synced)
        self._synced = False
        self.elector: LeaderElector | None = None
        if leader_election:
            self.elector = LeaderElector(
                client, lease_name=leader_election_id, namespace=leader_election_namespace or namespace or "default",
                identity=leader_election_identity or f"{socket.gethostname()}_{uuid.uuid4()}",
                lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period,
                release_on_cancel=True,
            )
        self.elected = asyncio.Event()
        """Set once leader runnables may run (at sync when leader election is off)."""

    # --- informers, runnables -------------------------------------------------------------
    def get_informer(self, kind: ResourceKind) -> Informer:
        """The shared informer of ``kind``, created (and, if the manager runs, started) on demand."""
        return self.informers.get(kind)

    def add(self, runnable: Runnable) -> None:
        """Register a runnable (controllers: ``need_leader_election = True``). Call before start."""
        if self._running:
            raise RuntimeError("Manager.add after start is not supported")
        self._runnables.append(runnable)

    def get_event_recorder(self, component: str) -> EventRecorder:
        """An EventRecorder for ``component``, run by this manager."""
        recorder = EventRecorder(self.client, component)
        self.add(recorder)
        return recorder

    # --- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Run until cancelled (or SIGTERM). Raises CacheSyncTimeout, LeaderElectionLost, or a
        runnable's exception (after shutting everything down)."""
        current = asyncio.current_task()
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if self.handle_signals and current is not None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, current.cancel)
                    installed.append(sig)
        others: list[asyncio.Task[None]] = []
        leaders: list[tuple[Runnable, asyncio.Task[None]]] = []
        elector_task: asyncio.Task[None] | None = None
        lost = False
        try:
            await self.health.start()
            self._running = True
            self.informers.acquire()
            self._acquired = True
            if not await self.cache.wait_for_cache_sync(self.cache_sync_timeout):
                raise CacheSyncTimeout(f"caches not synced within {self.cache_sync_timeout} s")
            self._synced = True
            others = [asyncio.create_task(r.start()) for r in self._runnables if not r.need_leader_election]
            if self.elector is not None:
                elector_task = asyncio.create_task(self.elector.run(), name="leader election")
                leading = asyncio.create_task(self.elector.leading.wait())
                await asyncio.wait({leading, elector_task}, return_when=asyncio.FIRST_COMPLETED)
                leading.cancel()
                if elector_task.done():
                    lost = True
                    raise LeaderElectionLost("leader election lost")
            self.elected.set()
            if self.elector is not None:
                # Fencing by the leader's own clock: no reconcile once the last renewal is older
                # than the renew deadline (a process resumed after SIGSTOP would act on stale
                # queues before its renew loop noticed that another replica took the Lease).
                for runnable in self._runnables:
                    set_check = getattr(runnable, "set_leader_check", None)
                    fenced = runnable.need_leader_election or getattr(runnable, "fenced_by_lease", False)
                    if fenced and set_check is not None:
                        set_check(self.elector.lease_valid)
            leaders = [(r, asyncio.create_task(r.start())) for r in self._runnables if r.need_leader_election]
            watched: set[asyncio.Task[None]] = {*others, *(t for _, t in leaders)}
            if elector_task is not None:
                watched.add(elector_task)
            while watched:
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    watched.discard(task)
                    if task is elector_task:
                        lost = True
                        raise LeaderElectionLost("leader election lost")
                    error = None if task.cancelled() else task.exception()
                    if error is not None:
                        raise error
            await asyncio.Event().wait()  # every runnable returned: idle until cancelled
        finally:
            await asyncio.shield(self._shutdown(leaders, others, elector_task, graceful=not lost))
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def _shutdown(
        self, leaders: list[tuple[Runnable, asyncio.Task[None]]], others: list[asyncio.Task[None]],
        elector_task: asyncio.Task[None] | None, *, graceful: bool,
    ) -> None:
        self.elected.clear()
        pending = [t for _, t in leaders if not t.done()]
        if graceful and pending and self.graceful_shutdown_timeout != 0:
            timeout = None if self.graceful_shutdown_timeout < 0 else self.graceful_shutdown_timeout
            stops = [
                asyncio.create_task(_stop(runnable, timeout)) for runnable, task in leaders if not task.done()
            ]
            _, still = await asyncio.wait(pending, timeout=timeout)
            await _cancel(stops)
            if still:
                log.warning("graceful shutdown timed out, cancelling", pending=len(still))
        await _cancel([t for _, t in leaders] + others)
        if self._acquired:
            self._acquired = False
            await self.informers.release()
        if elector_task is not None:
            await _cancel([elector_task])  # releases the lease (release_on_cancel)
        self._running = False
        await self.health.stop()
        await self.client.close()


async def _stop(runnable: Runnable, timeout: float | None) -> None:
    """Ask ``runnable`` to drain (``stop(drain_timeout=...)`` or ``stop()``) if it can."""
    stop = getattr(runnable, "stop", None)
    if stop is None:
        return
    try:
        params = inspect.signature(stop).parameters
        await (stop(drain_timeout=timeout if timeout is not None else 1e9) if "drain_timeout" in params else stop())
    except Exception:
        log.exception("runnable stop failed")


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
