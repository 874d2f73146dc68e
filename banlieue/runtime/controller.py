"""The controller: a rate-limited work queue of ``Request``s and N workers calling a Reconciler.

controller-runtime ``pkg/internal/controller/controller.go`` on asyncio. ``start()`` waits until
every registered source has synced (``cache_sync_timeout``, default 120 s), starts the channel
sources and ``max_concurrent_reconciles`` workers, and runs until cancelled (then
``queue.shutdown()``, workers cancelled and awaited) or until ``stop()`` drained it.

The result of each reconcile is handled exactly as in controller-runtime (see
``banlieue.runtime.reconcile`` for the table). An exception never kills a worker. Each attempt
gets a fresh ``reconcileID`` (uuid4), bound with ``controller``, ``namespace`` and ``name`` in
``structlog.contextvars``, so every log line written during the reconcile carries them.

A Go reconciler can return a Result *and* an error (cr then ignores the Result with a warning);
in Python a reconcile either returns or raises, so that case cannot arise.

Panics: Go separates errors from panics; Python has only exceptions. banlieue counts as a
"panic" an exception that signals a programming error rather than a failed operation
(``PANIC_TYPES``: AssertionError, AttributeError, LookupError, NameError, TypeError,
ZeroDivisionError, RecursionError). With ``recover_panic=True`` (the default) it increments
``controller_runtime_reconcile_panics_total`` and then follows the error path; with False it is
re-raised, ends the worker and makes ``start()`` fail.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from banlieue.runtime import metrics as m
from banlieue.runtime.clock import REAL_CLOCK, Clock
from banlieue.runtime.log import get_logger
from banlieue.runtime.queue import QueueShutDown
from banlieue.runtime.rate_limiters import RateLimiter, default_controller_rate_limiter
from banlieue.runtime.rate_limiting_queue import RateLimitingQueue
from banlieue.runtime.reconcile import Reconciler, Request, Result, RetryError, is_terminal

CACHE_SYNC_TIMEOUT = 120.0
"""Seconds a controller waits for its sources to sync before ``start()`` fails (cr 2 min)."""
SYNC_POLL_INTERVAL = 0.1
"""Seconds between has_synced polls (client-go WaitForCacheSync polls every 100 ms)."""

PANIC_TYPES: tuple[type[Exception], ...] = (
    AssertionError,
    AttributeError,
    LookupError,
    NameError,
    TypeError,
    ZeroDivisionError,
    RecursionError,
)
"""Exception types treated as a Go panic (a bug in the reconciler), see the module docstring."""

SourceRunner = Callable[[], Coroutine[Any, Any, None]]
"""A channel source: an async function feeding the queue until cancelled."""


class CacheSyncTimeoutError(TimeoutError):
    """A source did not sync within ``cache_sync_timeout``; the controller did not start."""


class Controller:
    """One controller: ``name`` keys its metrics and logs (must be unique per process).

    ``reconciler``: the ``Reconciler``. ``max_concurrent_reconciles``: number of workers (>= 1).
    ``rate_limiter``: for failed and ``requeue=True`` requests (default
    ``default_controller_rate_limiter()``). ``clock``: time for backoff, delays and metrics.
    ``recover_panic``: see the module docstring. ``cache_sync_timeout``: seconds.
    ``need_leader_election``: the manager starts the controller only on the leader (True).
    ``reconciliation_timeout``: seconds (wall time) after which one reconcile is cancelled and
    counted in ``controller_runtime_reconcile_timeouts_total``, then treated as an error (cr
    ``ReconciliationTimeout``; default None: no limit).

    ``queue`` is the controller's ``RateLimitingQueue[Request]`` (named after the controller, so
    it emits the ``workqueue_*`` metrics); handlers feed it.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter[Request] | None = None,
        clock: Clock | None = None,
        recover_panic: bool = True,
        cache_sync_timeout: float = CACHE_SYNC_TIMEOUT,
        need_leader_election: bool = True,
        reconciliation_timeout: float | None = None,
    ) -> None:
        if not name:
            raise ValueError("a controller needs a name")
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be >= 1")
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.recover_panic = recover_panic
        self.cache_sync_timeout = cache_sync_timeout
        self.need_leader_election = need_leader_election
        self.reconciliation_timeout = reconciliation_timeout
        self._clock: Clock = clock if clock is not None else REAL_CLOCK
        limiter: RateLimiter[Request] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=self._clock)
        )
        self.queue: RateLimitingQueue[Request] = RateLimitingQueue(limiter, name, clock=self._clock)
        self._sync_checks: list[tuple[str, Callable[[], bool]]] = []
        self._sources: list[tuple[str, SourceRunner]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._started = False
        self._finished = asyncio.Event()
        self._log = get_logger("runtime.controller", controller=name)
        self._total: dict[str, Any] = {}  # result -> counter child, created (at 0) by start()
        self._errors = m.RECONCILE_ERRORS.labels(name)
        self._terminal_errors = m.TERMINAL_RECONCILE_ERRORS.labels(name)
        self._panics = m.RECONCILE_PANICS.labels(name)
        self._timeouts = m.RECONCILE_TIMEOUTS.labels(name)
        self._time = m.RECONCILE_TIME.labels(name)
        self._active_workers = m.ACTIVE_WORKERS.labels(name)
        self._leader_check: Callable[[], bool] | None = None
        self._leader_retry_after = 1.0

    # --- wiring (before start) ----------------------------------------------------------------

    def set_leader_check(self, check: Callable[[], bool], retry_after: float = 1.0) -> None:
        """Reconcile only while ``check()`` is True (the Manager passes ``LeaderElector.lease_valid``).

        A request taken while it is False is not reconciled but put back after ``retry_after``
        seconds: a leader resumed after a pause must not act on what its queue and caches hold
        before it knows it still leads (client-go leader election has no fencing of its own).
        """
        self._leader_check = check
        self._leader_retry_after = retry_after

    def add_sync_check(self, has_synced: Callable[[], bool], description: str = "source") -> None:
        """Register a source's ``has_synced``: ``start()`` waits until all return True."""
        self._sync_checks.append((description, has_synced))

    def add_source(self, run: SourceRunner, description: str = "channel") -> None:
        """Register a channel source: ``run()`` is started after sync, beside the workers, and
        cancelled when the controller stops. An exception in it is logged; the controller goes
        on without that source."""
        self._sources.append((description, run))

    # --- Runnable -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Wait for sync, then run the workers until cancelled or drained by ``stop()``.

        Raises ``CacheSyncTimeoutError`` when a source does not sync in time, ``RuntimeError`` on a
        second start, and re-raises a panic when ``recover_panic`` is False.
        """
        if self._started:
            raise RuntimeError(f"controller {self.name} was already started")
        self._started = True
        # cr: all four result series exist (at 0) from Start.
        self._total = {result: m.RECONCILE_TOTAL.labels(self.name, result) for result in m.RECONCILE_RESULTS}
        m.MAX_CONCURRENT_RECONCILES.labels(self.name).set(self.max_concurrent_reconciles)
        self._active_workers.set(0)
        sources: list[asyncio.Task[None]] = []
        try:
            self._log.info("Starting Controller")
            if not await self._wait_for_sync():
                return
            loop = asyncio.get_running_loop()
            for description, run in self._sources:
                self._log.info("Starting EventSource", source=description)
                sources.append(loop.create_task(self._run_source(description, run)))
            self._log.info("Starting workers", worker_count=self.max_concurrent_reconciles)
            self._workers = [
                loop.create_task(self._worker(), name=f"controller:{self.name}:worker-{i}")
                for i in range(self.max_concurrent_reconciles)
            ]
            # Workers end when the queue is shut down and empty, or when stop() cancels them after
            # its drain timeout; only a worker's exception (an unrecovered panic) fails start().
            done, _ = await asyncio.wait(self._workers, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                error = None if task.cancelled() else task.exception()
                if error is not None:
                    raise error
        finally:
            self._log.info("Shutdown signal received, waiting for all workers to finish")
            self.queue.shutdown()
            tasks = [*self._workers, *sources]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.queue.aclose()
            self._active_workers.set(0)
            self._finished.set()
            self._log.info("All workers finished")

    async def stop(self, drain_timeout: float = 30.0) -> None:
        """Graceful stop: refuse new adds, let the workers finish the queued and in-flight
        requests (``shutdown_with_drain``) for up to ``drain_timeout`` seconds (wall time), then
        cancel what is left. Returns once ``start()`` has finished."""
        if not self._started:
            self.queue.shutdown()
            return
        try:
            async with asyncio.timeout(drain_timeout):
                await self.queue.shutdown_with_drain()
                await self._finished.wait()
        except TimeoutError:
            self._log.warning("drain timed out, cancelling in-flight reconciles", timeout=drain_timeout)
            self.queue.shutdown()
            for task in self._workers:
                task.cancel()
            await self._finished.wait()

    # --- internals ------------------------------------------------------------------------------

    async def _wait_for_sync(self) -> bool:
        """True once every sync check passes; False if shut down meanwhile."""
        deadline = self._clock.now() + self.cache_sync_timeout
        while True:
            pending = [description for description, has_synced in self._sync_checks if not has_synced()]
            if not pending:
                return True
            if self.queue.shutting_down:
                return False
            if self._clock.now() >= deadline:
                raise CacheSyncTimeoutError(
                    f"controller {self.name}: timed out waiting for cache to be synced for {', '.join(pending)}"
                )
            await self._clock.sleep(SYNC_POLL_INTERVAL)

    async def _run_source(self, description: str, run: SourceRunner) -> None:
        try:
            await run()
        except Exception:
            self._log.exception("event source failed", source=description)

    async def _worker(self) -> None:
        """Process requests until the queue is shut down and empty. ``done`` is always called."""
        queue = self.queue
        while True:
            try:
                request = await queue.get()
            except QueueShutDown:
                return
            if self._leader_check is not None and not self._leader_check():
                queue.done(request)
                queue.add_after(request, self._leader_retry_after)
                continue
            self._active_workers.inc()
            try:
                await self._reconcile_handler(request)
            finally:
                queue.done(request)
                self._active_workers.dec()

    async def _call_reconciler(self, request: Request) -> Result:
        if self.reconciliation_timeout is None:
            return await self.reconciler.reconcile(request)
        scope = asyncio.timeout(self.reconciliation_timeout)
        try:
            async with scope:
                return await self.reconciler.reconcile(request)
        except TimeoutError:
            if scope.expired():  # our deadline, not a TimeoutError raised by the reconciler
                self._timeouts.inc()
            raise

    async def _reconcile_handler(self, request: Request) -> None:
        """One attempt: reconcile, then act on the outcome (cr reconcileHandler)."""
        queue = self.queue
        with structlog.contextvars.bound_contextvars(
            controller=self.name,
            namespace=request.namespace,
            name=request.name,
            reconcileID=str(uuid.uuid4()),
        ):
            started = self._clock.now()
            try:
                result = await self._call_reconciler(request)
                if not isinstance(result, Result):
                    raise TypeError(f"reconcile returned {type(result).__name__}, not Result")
            except Exception as exc:
                self._time.observe(self._clock.now() - started)
                if is_terminal(exc):
                    self._terminal_errors.inc()
                else:
                    if isinstance(exc, PANIC_TYPES):
                        self._panics.inc()
                        if not self.recover_panic:
                            raise
                        self._log.error("Observed a panic", panic=repr(exc))
                    queue.add_rate_limited(request)
                self._errors.inc()
                self._total["error"].inc()
                self._log.error("Reconciler error", error=str(exc), exc_info=None if isinstance(exc, RetryError) else exc)
                return
            self._time.observe(self._clock.now() - started)
            if result.requeue_after is not None and result.requeue_after > 0:
                queue.forget(request)
                queue.add_after(request, result.requeue_after)
                self._total["requeue_after"].inc()
            elif result.requeue:
                queue.add_rate_limited(request)
                self._total["requeue"].inc()
            else:
                queue.forget(request)
                self._total["success"].inc()
