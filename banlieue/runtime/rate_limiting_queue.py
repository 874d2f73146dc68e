"""The rate-limiting queue: client-go ``util/workqueue/rate_limiting_queue.go``.

Adds one idea to ``DelayingQueue``: a ``RateLimiter`` decides how long a failed item waits.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from banlieue.runtime.clock import Clock
from banlieue.runtime.delaying_queue import DelayingQueue
from banlieue.runtime.rate_limiters import RateLimiter

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """client-go ``TypedRateLimitingInterface[T]``.

    ``rate_limiter``: the ``RateLimiter`` consulted by ``add_rate_limited``; ``name`` and
    ``clock`` as for ``WorkQueue``/``DelayingQueue``. The controller's queue is
    ``RateLimitingQueue(default_controller_rate_limiter(), name=<controller name>)``.
    """

    def __init__(
        self, rate_limiter: RateLimiter[T], name: str | None = None, *, clock: Clock | None = None
    ) -> None:
        super().__init__(name, clock=clock)
        self.rate_limiter = rate_limiter

    def add_rate_limited(self, item: T) -> None:
        """``add_after(item, rate_limiter.when(item))``: the limiter records one more failure
        (as in client-go, also while shutting down, when ``add_after`` then ignores the item)."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Clear the limiter's history of ``item`` (stop tracking its failures). It does not
        remove the item from the queue, and ``done(item)`` must still be called."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many times ``item`` was requeued through the limiter since its last forget."""
        return self.rate_limiter.num_requeues(item)
