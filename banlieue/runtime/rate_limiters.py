"""Rate limiters for the rate-limiting queue: client-go ``util/workqueue/default_rate_limiters.go``.

A limiter answers "how long should this item wait before it is retried" (``when``, seconds),
forgets an item's history (``forget``) and reports how often it was retried (``num_requeues``).
All delays are float seconds.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, TypeVar

from banlieue.runtime.clock import REAL_CLOCK, Clock

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    """client-go ``TypedRateLimiter[T]``."""

    def when(self, item: T_contra) -> float:
        """Seconds ``item`` should wait before it is retried; records the retry."""
        ...

    def forget(self, item: T_contra) -> None:
        """Drop the history of ``item`` (it succeeded). Does not remove it from any queue."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures (retries) the limiter has recorded for ``item``."""
        ...


class ItemExponentialFailureRateLimiter(RateLimiter[T]):
    """Per-item exponential backoff: ``base * 2**n`` seconds capped at ``max_delay``, where n is
    the item's failure count *before* this failure (so 5 ms, 10 ms, 20 ms, ... for base 5 ms).

    client-go ``NewTypedItemExponentialFailureRateLimiter(baseDelay, maxDelay)``.
    """

    def __init__(self, base_delay: float, max_delay: float) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        # Overflow guard (client-go checks for > MaxInt64): beyond 2**62 every sane cap is hit.
        if exp > 62:
            return self.max_delay
        return min(self.base_delay * (1 << exp), self.max_delay)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter(RateLimiter[T]):
    """One global token bucket: ``qps`` tokens per second, at most ``burst`` stored.

    client-go ``TypedBucketRateLimiter`` over ``golang.org/x/time/rate``: ``when`` is
    ``Reserve().Delay()``, so **every call consumes a token** and returns how long the caller must
    wait for it (tokens may go negative: later reservations queue behind earlier ones). The bucket
    starts full. ``forget`` does nothing; ``num_requeues`` is always 0.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock: Clock = clock if clock is not None else REAL_CLOCK
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, item: T) -> float:
        now = self._clock.now()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
            self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    def forget(self, item: T) -> None:
        return None

    def num_requeues(self, item: T) -> int:
        return 0


class ItemFastSlowRateLimiter(RateLimiter[T]):
    """``fast_delay`` for an item's first ``max_fast_attempts`` attempts, then ``slow_delay``.

    client-go ``NewTypedItemFastSlowRateLimiter(fastDelay, slowDelay, maxFastAttempts)``.
    """

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self.fast_delay = fast_delay
        self.slow_delay = slow_delay
        self.max_fast_attempts = max_fast_attempts
        self._attempts: dict[T, int] = {}

    def when(self, item: T) -> float:
        attempts = self._attempts.get(item, 0) + 1
        self._attempts[item] = attempts
        return self.fast_delay if attempts <= self.max_fast_attempts else self.slow_delay

    def forget(self, item: T) -> None:
        self._attempts.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._attempts.get(item, 0)


class MaxOfRateLimiter(RateLimiter[T]):
    """The worst of several limiters: ``when`` calls **every** limiter (so buckets are charged)
    and returns the largest delay; ``num_requeues`` is the max; ``forget`` goes to all.

    client-go ``NewTypedMaxOfRateLimiter(limiters...)``.
    """

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: T) -> float:
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: T) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


class WithMaxWaitRateLimiter(RateLimiter[T]):
    """Caps another limiter's delay at ``max_delay`` seconds.

    client-go ``NewTypedWithMaxWaitRateLimiter(limiter, maxDelay)``.
    """

    def __init__(self, limiter: RateLimiter[T], max_delay: float) -> None:
        self.limiter = limiter
        self.max_delay = max_delay

    def when(self, item: T) -> float:
        return min(self.limiter.when(item), self.max_delay)

    def forget(self, item: T) -> None:
        self.limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.limiter.num_requeues(item)


DEFAULT_BASE_DELAY = 0.005
"""Seconds: the controller default per-item base delay (5 ms)."""
DEFAULT_MAX_DELAY = 1000.0
"""Seconds: the controller default per-item cap (1000 s)."""
DEFAULT_QPS = 10.0
"""The controller default overall retry rate (10 per second)."""
DEFAULT_BURST = 100
"""The controller default overall burst (100)."""


def default_controller_rate_limiter(*, clock: Clock | None = None) -> MaxOfRateLimiter[T]:
    """client-go ``DefaultTypedControllerRateLimiter``: ``MaxOf(ItemExponential(5 ms, 1000 s),
    Bucket(10 qps, burst 100))``. The bucket limits overall retry speed, not per item."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY),
        BucketRateLimiter(DEFAULT_QPS, DEFAULT_BURST, clock=clock),
    )


def default_item_based_rate_limiter() -> ItemExponentialFailureRateLimiter[T]:
    """client-go ``DefaultTypedItemBasedRateLimiter``: ItemExponential(1 ms, 1000 s)."""
    return ItemExponentialFailureRateLimiter(0.001, DEFAULT_MAX_DELAY)
