"""DelayingQueue and RateLimitingQueue: add_after with the heap, dedup earlier-wins, retries."""

from __future__ import annotations

from prometheus_client import REGISTRY

from banlieue.runtime.clock import FakeClock
from banlieue.runtime.delaying_queue import DelayingQueue
from banlieue.runtime.rate_limiters import ItemExponentialFailureRateLimiter
from banlieue.runtime.rate_limiting_queue import RateLimitingQueue


def _retries(name: str) -> float:
    value = REGISTRY.get_sample_value("workqueue_retries_total", {"name": name, "controller": name})
    return 0.0 if value is None else value


async def test_add_after_delays_until_ready() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 5.0)
    await clock.advance(0)
    assert len(q) == 0 and q.waiting == 1
    await clock.advance(4.999)
    assert len(q) == 0
    await clock.advance(0.001)
    assert len(q) == 1 and q.waiting == 0
    assert await q.get() == "a"
    await q.aclose()


async def test_ready_items_come_out_in_ready_order() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("late", 3.0)
    q.add_after("early", 1.0)
    q.add_after("middle", 2.0)
    await clock.advance(3.0)
    assert [await q.get() for _ in range(3)] == ["early", "middle", "late"]
    await q.aclose()


async def test_non_positive_delay_adds_now() -> None:
    q: DelayingQueue[str] = DelayingQueue(clock=FakeClock())
    q.add_after("a", 0)
    q.add_after("b", -1)
    assert len(q) == 2
    await q.aclose()


async def test_dedup_keeps_the_earlier_ready_at() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("a", 10.0)
    q.add_after("a", 2.0)  # moves earlier
    q.add_after("a", 30.0)  # never moves later
    assert q.waiting == 1
    await clock.advance(2.0)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    await clock.advance(30.0)
    assert len(q) == 0  # the superseded entries did not add it again
    await q.aclose()


async def test_earlier_item_wakes_a_long_sleep() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add_after("slow", 9.0)
    await clock.advance(0)
    q.add_after("fast", 1.0)
    await clock.advance(1.0)
    assert len(q) == 1
    assert await q.get() == "fast"
    await q.aclose()


async def test_ready_item_is_deduplicated_with_the_queue() -> None:
    clock = FakeClock()
    q: DelayingQueue[str] = DelayingQueue(clock=clock)
    q.add("a")
    q.add_after("a", 1.0)
    await clock.advance(1.0)
    assert len(q) == 1
    await q.aclose()


async def test_retries_counted_on_every_add_after_and_ignored_after_shutdown() -> None:
    clock = FakeClock()
    name = "test-delaying-retries"
    q: DelayingQueue[str] = DelayingQueue(name, clock=clock)
    before = _retries(name)
    q.add_after("a", 0)
    q.add_after("b", 1.0)
    q.add_after("b", 1.0)
    assert _retries(name) - before == 3
    q.shutdown()
    q.add_after("c", 0)
    assert _retries(name) - before == 3
    assert len(q) == 1  # only "a"; waiting items are dropped
    await q.aclose()
    assert not q._tasks


async def test_rate_limited_queue_backs_off_and_forgets() -> None:
    clock = FakeClock()
    q: RateLimitingQueue[str] = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 100.0), clock=clock)
    q.add_rate_limited("a")  # 1 s
    assert q.num_requeues("a") == 1
    await clock.advance(0.999)
    assert len(q) == 0
    await clock.advance(0.001)
    assert len(q) == 1
    item = await q.get()
    q.add_rate_limited(item)  # 2 s: re-added while processing, queued after done
    q.done(item)
    await clock.advance(1.999)
    assert len(q) == 0
    await clock.advance(0.001)
    assert len(q) == 1 and q.num_requeues("a") == 2
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert len(q) == 1  # forget does not remove the item
    await q.aclose()
