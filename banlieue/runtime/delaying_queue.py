"""The delaying queue: client-go ``util/workqueue/delaying_queue.go`` on asyncio.

Adds one idea to ``WorkQueue``: ``add_after(item, seconds)``. Waiting items sit in a min-heap
ordered by readyAt, watched by a single waiting-loop task that sleeps until the earliest readyAt
(at most ``MAX_WAIT`` seconds, client-go's heartbeat) and is woken early when an earlier item
arrives. Ready items are passed to ``add()``, so the usual dirty/processing dedup applies.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Hashable
from typing import TypeVar

from banlieue.runtime.clock import Clock
from banlieue.runtime.queue import WorkQueue

T = TypeVar("T", bound=Hashable)

MAX_WAIT = 10.0
"""Seconds: the waiting loop wakes at least this often (client-go ``maxWait`` = 10 s)."""


class DelayingQueue(WorkQueue[T]):
    """client-go ``TypedDelayingInterface[T]``: a ``WorkQueue`` with ``add_after``.

    Waiting items are not counted by ``len()`` and are dropped by ``shutdown()``.
    """

    def __init__(self, name: str | None = None, *, clock: Clock | None = None) -> None:
        super().__init__(name, clock=clock)
        # Heap entries are (ready_at, sequence, item): the sequence keeps insertion order among
        # equal readyAt values, so items themselves are never compared.
        self._heap: list[tuple[float, int, T]] = []
        # item -> (ready_at, sequence) of its live entry. A superseded entry stays in the heap and
        # is skipped when popped (lazy deletion instead of client-go's heap.Fix).
        self._waiting: dict[T, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._loop_task: asyncio.Task[None] | None = None
        self._sleeper: asyncio.Task[None] | None = None
        self._sleep_until = math.inf

    def add_after(self, item: T, seconds: float) -> None:
        """Add ``item`` after ``seconds`` (float, seconds).

        client-go AddAfter: ignored when shutting down; the ``workqueue_retries_total`` counter
        is incremented on every call (even for ``seconds <= 0``); ``seconds <= 0`` means
        ``add(item)`` now. If the item is already waiting, its readyAt only ever moves
        *earlier*. Must be called from inside the running event loop.
        """
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retries.inc()
        if seconds <= 0:
            self.add(item)
            return
        ready_at = self._clock.now() + seconds
        current = self._waiting.get(item)
        if current is not None and current[0] <= ready_at:
            return
        seq = next(self._seq)
        self._waiting[item] = (ready_at, seq)
        heapq.heappush(self._heap, (ready_at, seq, item))
        if self._loop_task is None:
            self._loop_task = self._spawn(self._waiting_loop(), "waiting-loop")
        elif ready_at < self._sleep_until and self._sleeper is not None:
            self._sleeper.cancel()  # wake the loop: the new item is due before its timer

    @property
    def waiting(self) -> int:
        """Number of items waiting for their readyAt (not yet in the queue)."""
        return len(self._waiting)

    async def _waiting_loop(self) -> None:
        """client-go waitingLoop: move ready items to the queue, sleep until the next one."""
        heap, waiting, clock = self._heap, self._waiting, self._clock
        try:
            while True:
                now = clock.now()
                while heap and heap[0][0] <= now:
                    ready_at, seq, item = heapq.heappop(heap)
                    if waiting.get(item) == (ready_at, seq):
                        del waiting[item]
                        self.add(item)
                delay = MAX_WAIT
                if heap:
                    delay = min(delay, heap[0][0] - now)
                self._sleep_until = now + delay
                self._sleeper = asyncio.get_running_loop().create_task(clock.sleep(delay))
                # asyncio.wait returns when the sleeper ends, including when add_after cancels it.
                await asyncio.wait((self._sleeper,))
        finally:
            if self._sleeper is not None:
                self._sleeper.cancel()
            self._sleep_until = math.inf
