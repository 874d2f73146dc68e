"""The work queue: client-go ``util/workqueue/queue.go`` semantics on one asyncio event loop.

Guarantees (``cg:util/workqueue/doc.go``):

* Fair: items are processed in the order in which they are added (FIFO).
* Stingy: an item is never processed by two workers at once, and an item added several times
  before it is processed is processed once.
* An item may be added again while it is being processed; it is then processed again after
  ``done()``, exactly once however many times it was re-added.
* Shutdown: ``get()`` keeps handing out queued items after ``shutdown()``; it reports the
  shutdown (raises ``QueueShutDown``) only once the queue is empty.

State is the client-go triple: ``queue`` (FIFO of items waiting for a worker), ``dirty`` (items
that need processing) and ``processing`` (items handed out by ``get`` and not yet ``done``).
Every queued item is dirty and not processing. There is no lock: everything runs on one event
loop, and no method other than ``get``/``shutdown_with_drain`` suspends.

An unnamed queue emits no metrics (client-go ``TypedQueueConfig.Name``); a named queue updates
the ``workqueue_*`` series with ``name`` and ``controller`` both set to the name.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Coroutine, Hashable
from typing import Any, Generic, TypeVar

from banlieue.runtime import metrics as m
from banlieue.runtime.clock import REAL_CLOCK, Clock

T = TypeVar("T", bound=Hashable)

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go
``defaultUnfinishedWorkUpdatePeriod`` = 500 ms)."""


class QueueShutDown(Exception):
    """Raised by ``WorkQueue.get()`` when the queue is shutting down and has no item left.

    Stands for client-go's ``Get() (item, shutdown=true)``; named after Python 3.13's
    ``asyncio.QueueShutDown``. A worker receiving it exits.
    """


class _QueueMetrics(Generic[T]):
    """client-go ``defaultQueueMetrics``: timings keyed by item, series bound to one name."""

    __slots__ = (
        "add_times",
        "adds",
        "clock",
        "depth",
        "longest_running",
        "processing_start",
        "queue_duration",
        "retries",
        "unfinished_work",
        "work_duration",
    )

    def __init__(self, name: str, clock: Clock) -> None:
        self.clock = clock
        self.depth = m.WORKQUEUE_DEPTH.labels(name, name, "")
        self.adds = m.WORKQUEUE_ADDS.labels(name, name)
        self.queue_duration = m.WORKQUEUE_QUEUE_DURATION.labels(name, name)
        self.work_duration = m.WORKQUEUE_WORK_DURATION.labels(name, name)
        self.unfinished_work = m.WORKQUEUE_UNFINISHED_WORK.labels(name, name)
        self.longest_running = m.WORKQUEUE_LONGEST_RUNNING_PROCESSOR.labels(name, name)
        self.retries = m.WORKQUEUE_RETRIES.labels(name, name)
        self.add_times: dict[T, float] = {}
        self.processing_start: dict[T, float] = {}

    def add(self, item: T) -> None:
        self.adds.inc()
        self.depth.inc()
        if item not in self.add_times:
            self.add_times[item] = self.clock.now()

    def get(self, item: T) -> None:
        self.depth.dec()
        now = self.clock.now()
        self.processing_start[item] = now
        started = self.add_times.pop(item, None)
        if started is not None:
            self.queue_duration.observe(now - started)

    def done(self, item: T) -> None:
        started = self.processing_start.pop(item, None)
        if started is not None:
            self.work_duration.observe(self.clock.now() - started)

    def update_unfinished_work(self) -> None:
        now = self.clock.now()
        ages = [now - t for t in self.processing_start.values()]
        self.unfinished_work.set(sum(ages))
        self.longest_running.set(max(ages, default=0.0))


class WorkQueue(Generic[T]):
    """client-go ``workqueue.Typed[T]``: a fair, stingy FIFO of hashable keys.

    ``name``: enables the ``workqueue_*`` metrics under that name (None: no metrics, the fast
    path). ``clock``: time source for the metrics (and, in subclasses, for delays).
    Background tasks (the unfinished-work refresher) start lazily inside the running loop and are
    cancelled by ``shutdown()``; ``await aclose()`` also waits for them to finish.
    """

    def __init__(self, name: str | None = None, *, clock: Clock | None = None) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else REAL_CLOCK
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False
        self._drain = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._metrics: _QueueMetrics[T] | None = _QueueMetrics(name, self._clock) if name else None
        self._metrics_started = False

    # --- client-go Interface --------------------------------------------------------------

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing.

        Ignored once shutting down. If the item is already dirty (queued, or re-added while
        processing) nothing happens. If it is being processed it is not queued now: ``done()``
        queues it. Otherwise it goes to the tail and one waiting ``get()`` is woken.
        """
        if self._shutting_down or item in self._dirty:
            return
        if self._metrics is not None:
            self._metrics.add(item)
        self._dirty.add(item)
        if item in self._processing:
            return
        self._queue.append(item)
        if self._waiters:
            self._wake_one()

    async def get(self) -> T:
        """Wait for the head item, mark it processing and return it.

        The caller must call ``done(item)`` when finished with it. Blocks while the queue is
        empty and not shutting down. Raises ``QueueShutDown`` only when the queue is empty *and*
        shutting down, so workers drain queued items after ``shutdown()``. Cancellation while
        waiting loses no item.
        """
        queue = self._queue
        if not queue:
            await self._wait_for_item()
        item = queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        if self._metrics is not None:
            if not self._metrics_started:
                self._start_metrics_loop()
            self._metrics.get(item)
        return item

    def done(self, item: T) -> None:
        """Mark ``item`` as finished. If it was added again while processing, queue it now
        (at the tail); if nothing is processing any more, wake ``shutdown_with_drain``."""
        if self._metrics is not None:
            self._metrics.done(item)
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            if self._waiters:
                self._wake_one()
        elif not self._processing and self._drain_waiters:
            self._wake_drain_waiters()

    def __len__(self) -> int:
        """Number of queued items; dirty items that are still processing are not counted."""
        return len(self._queue)

    def shutdown(self) -> None:
        """Stop accepting adds, wake every ``get()`` and stop background tasks.

        Queued items are still handed out; ``get()`` raises ``QueueShutDown`` once empty. Also
        makes a pending ``shutdown_with_drain()`` stop waiting (client-go ShutDown after
        ShutDownWithDrain). Idempotent.
        """
        self._drain = False
        self._shut_down()
        self._wake_drain_waiters()

    async def shutdown_with_drain(self) -> None:
        """Like ``shutdown()``, then wait until no item is being processed (every handed-out
        item got its ``done()``). A later ``shutdown()`` makes it return early."""
        self._drain = True
        self._shut_down()
        while self._processing and self._drain:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            try:
                await fut
            finally:
                with contextlib.suppress(ValueError):
                    self._drain_waiters.remove(fut)
        await self.aclose()

    @property
    def shutting_down(self) -> bool:
        """True once ``shutdown()`` or ``shutdown_with_drain()`` was called."""
        return self._shutting_down

    async def aclose(self) -> None:
        """``shutdown()`` if not done yet, then wait for the queue's background tasks to end
        (client-go ShutDown waits for its goroutines)."""
        if not self._shutting_down:
            self.shutdown()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- internals --------------------------------------------------------------------------

    async def _wait_for_item(self) -> None:
        """Park until the queue has an item; raise QueueShutDown if shutting down and empty."""
        queue = self._queue
        woken = False
        while not queue:
            if self._shutting_down:
                raise QueueShutDown
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # A waiter woken for an item that another getter took first keeps its place at the
            # head, so waiting workers are served in arrival order.
            if woken:
                self._waiters.appendleft(fut)
            else:
                self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
                # If a wake-up was meant for us, hand it on: the item must not sit unclaimed.
                if queue and self._waiters:
                    self._wake_one()
                raise
            woken = True

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _shut_down(self) -> None:
        self._shutting_down = True
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        for task in self._tasks:
            task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Start a background task owned by the queue (cancelled on shutdown)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"workqueue:{self.name}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_metrics_loop(self) -> None:
        self._metrics_started = True
        if not self._shutting_down:
            self._spawn(self._update_unfinished_work_loop(), "unfinished-work")

    async def _update_unfinished_work_loop(self) -> None:
        metrics = self._metrics
        assert metrics is not None
        while True:
            await self._clock.sleep(UNFINISHED_WORK_UPDATE_PERIOD)
            metrics.update_unfinished_work()
