"""WorkQueue: client-go queue.go semantics (dirty/processing, FIFO, dedup, shutdown, drain)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from banlieue.runtime.clock import FakeClock
from banlieue.runtime.queue import QueueShutDown, WorkQueue


async def test_fifo_order_and_len() -> None:
    q: WorkQueue[str] = WorkQueue()
    for item in ["a", "b", "c"]:
        q.add(item)
    assert len(q) == 3
    got = [await q.get() for _ in range(3)]
    assert got == ["a", "b", "c"]
    assert len(q) == 0


async def test_duplicates_collapse_before_processing() -> None:
    q: WorkQueue[str] = WorkQueue()
    for item in ["a", "b", "a", "a", "b"]:
        q.add(item)
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0


async def test_add_during_processing_requeues_once_after_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    item = await q.get()
    q.add("a")
    q.add("a")
    # Not queued while processing: a second worker must not get it.
    assert len(q) == 0
    q.done(item)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_requeued_item_goes_to_the_tail() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    a = await q.get()
    q.add("a")
    q.add("b")
    q.done(a)
    assert [await q.get(), await q.get()] == ["b", "a"]


async def test_never_two_workers_on_one_key() -> None:
    q: WorkQueue[int] = WorkQueue()
    in_flight: set[int] = set()
    processed: list[int] = []

    async def worker() -> None:
        while True:
            try:
                item = await q.get()
            except QueueShutDown:
                return
            assert item not in in_flight, "two workers on one key"
            in_flight.add(item)
            # Re-add while processing, then yield so other workers run meanwhile.
            if len(processed) < 200:
                q.add(item)
            await asyncio.sleep(0)
            processed.append(item)
            in_flight.discard(item)
            q.done(item)

    for key in range(3):
        q.add(key)
    workers = [asyncio.create_task(worker()) for _ in range(5)]
    while len(processed) < 200:
        await asyncio.sleep(0)
    q.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), 5)
    assert set(processed) == {0, 1, 2}


async def test_get_blocks_until_add_and_waiters_are_served_in_order() -> None:
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not first.done() and not second.done()
    q.add("x")
    await asyncio.sleep(0)
    assert first.done() and first.result() == "x"
    assert not second.done()
    q.add("y")
    assert await asyncio.wait_for(second, 1) == "y"


async def test_cancelled_waiter_does_not_lose_an_item() -> None:
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("x")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs: the wake-up must pass to `second`.
    assert await asyncio.wait_for(second, 1) == "x"
    assert first.cancelled()


async def test_shutdown_hands_out_queued_items_then_reports_shutdown() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    q.shutdown()
    assert q.shutting_down
    q.add("c")  # ignored
    assert await q.get() == "a"
    assert await q.get() == "b"
    with pytest.raises(QueueShutDown):
        await q.get()


async def test_shutdown_wakes_blocked_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await asyncio.sleep(0)
    q.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1)
    assert all(isinstance(r, QueueShutDown) for r in results)


async def test_shutdown_with_drain_waits_for_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    item = await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not drain.done()
    assert q.shutting_down
    q.done(item)
    await asyncio.wait_for(drain, 1)


async def test_shutdown_after_drain_forces_it_to_return() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain())
    await asyncio.sleep(0)
    assert not drain.done()
    q.shutdown()
    await asyncio.wait_for(drain, 1)


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    q: WorkQueue[str] = WorkQueue()
    await asyncio.wait_for(q.shutdown_with_drain(), 1)
    assert q.shutting_down


def _sample(metric: str, name: str, **extra: str) -> float:
    value = REGISTRY.get_sample_value(metric, {"name": name, "controller": name, **extra})
    return 0.0 if value is None else value


async def test_named_queue_metrics() -> None:
    clock = FakeClock()
    name = "test-queue-metrics"
    q: WorkQueue[str] = WorkQueue(name, clock=clock)
    q.add("a")
    q.add("a")  # collapsed: not counted
    q.add("b")
    assert _sample("workqueue_adds_total", name) == 2
    assert _sample("workqueue_depth", name, priority="") == 2
    clock.step(2.0)
    item = await q.get()
    assert _sample("workqueue_depth", name, priority="") == 1
    assert _sample("workqueue_queue_duration_seconds_count", name) == 1
    assert _sample("workqueue_queue_duration_seconds_sum", name) == pytest.approx(2.0)
    # The unfinished-work gauges are refreshed every 0.5 s by a background task.
    await clock.advance(3.0)
    assert _sample("workqueue_unfinished_work_seconds", name) == pytest.approx(3.0)
    assert _sample("workqueue_longest_running_processor_seconds", name) == pytest.approx(3.0)
    q.done(item)
    assert _sample("workqueue_work_duration_seconds_count", name) == 1
    assert _sample("workqueue_work_duration_seconds_sum", name) == pytest.approx(3.0)
    await q.aclose()
    assert not q._tasks  # the refresher task was cancelled and awaited


async def test_unnamed_queue_has_no_background_task() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    await q.get()
    assert not q._tasks


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "get", "done"]), st.integers(0, 4)), max_size=60))
def test_queue_matches_the_client_go_model(ops: list[tuple[str, int]]) -> None:
    """Random add/get/done sequences against a direct model of client-go's Add/Get/Done."""

    async def scenario() -> None:
        q: WorkQueue[int] = WorkQueue()
        queue: list[int] = []
        dirty: set[int] = set()
        processing: set[int] = set()
        for op, key in ops:
            if op == "add":
                q.add(key)
                if key not in dirty:
                    dirty.add(key)
                    if key not in processing:
                        queue.append(key)
            elif op == "get" and queue:
                expected = queue.pop(0)
                assert await q.get() == expected
                processing.add(expected)
                dirty.discard(expected)
            elif op == "done" and key in processing:
                q.done(key)
                processing.discard(key)
                if key in dirty:
                    queue.append(key)
            assert list(q._queue) == queue and len(q) == len(queue)
            assert q._dirty == dirty and q._processing == processing
            # client-go invariant: every queued item is dirty and not processing, no duplicates.
            assert len(set(queue)) == len(queue)
            assert all(k in dirty and k not in processing for k in queue)

    asyncio.run(scenario())
