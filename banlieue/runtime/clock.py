"""Clocks: where the runtime reads time and sleeps, so timing can be tested exactly.

client-go threads a ``clock.Clock`` through the workqueue and the rate limiters for the same
reason. Times are monotonic seconds (float); they are only ever compared and subtracted, never
shown as wall-clock time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic time source. ``now()`` in seconds; ``sleep(seconds)`` suspends the caller."""

    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend for ``seconds`` (<= 0 yields once). Cancellable."""
        ...


class RealClock:
    """``time.monotonic`` and ``asyncio.sleep``: the clock used outside tests."""

    __slots__ = ()

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


REAL_CLOCK = RealClock()
"""The shared real clock (stateless)."""


class FakeClock:
    """A clock that moves only when told to: ``await clock.advance(seconds)``.

    ``sleep(d)`` parks the caller until the fake time reaches ``now + d``; ``advance`` moves the
    time forward, wakes the due sleepers in deadline order, and lets the event loop run so the
    woken tasks make progress before ``advance`` returns. Backoff tests are then exact and take
    no wall time.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are currently parked in ``sleep`` (cancelled ones excluded)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline(self) -> float | None:
        """The earliest pending sleep deadline, or None when nobody sleeps."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def step(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and resolve due sleepers, without yielding."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def advance(self, seconds: float = 0.0, *, settle: int = 20) -> None:
        """Move time forward by ``seconds`` in deadline order, yielding to the loop at each
        deadline so tasks woken early can schedule new sleeps inside the window (as real time
        would), then ``settle`` more loop iterations."""
        target = self._now + seconds
        await _spin(settle)
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > target:
                break
            self.step(max(deadline - self._now, 0.0))
            await _spin(settle)
        self.step(target - self._now)
        await _spin(settle)


async def _spin(iterations: int) -> None:
    for _ in range(iterations):
        await asyncio.sleep(0)
