"""Controller: cr reconcile result table, metrics, workers, sync gate, stop/drain, reconcileID."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY
from structlog.testing import LogCapture

from banlieue.runtime.clock import FakeClock
from banlieue.runtime.controller import CacheSyncTimeoutError, Controller
from banlieue.runtime.log import get_logger
from banlieue.runtime.reconcile import Func, Request, Result, TerminalError

from .fakes import sample, until

_names = itertools.count()
REQ = Request("ns", "a")
Step = Result | BaseException | Callable[[], Any]


def unique(prefix: str) -> str:
    """Metrics are process-global: every test uses its own controller name."""
    return f"{prefix}-{next(_names)}"


class ScriptedReconciler:
    """Returns/raises the scripted outcomes in order, then Result() forever."""

    def __init__(self, *steps: Result | BaseException) -> None:
        self.steps = list(steps)
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        step = self.steps.pop(0) if self.steps else Result()
        if isinstance(step, BaseException):
            raise step
        return step


def raw(metric: str, **labels: str) -> float | None:
    """The sample value, or None when the series does not exist."""
    return REGISTRY.get_sample_value(metric, labels)


def total(controller: str, result: str) -> float:
    return sample("controller_runtime_reconcile_total", controller=controller, result=result)


@pytest.fixture
async def run() -> AsyncIterator[Callable[[Controller], asyncio.Task[None]]]:
    """Start controllers as tasks; cancel and await them at the end of the test."""
    tasks: list[asyncio.Task[None]] = []

    def start(controller: Controller) -> asyncio.Task[None]:
        task = asyncio.create_task(controller.start())
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_all_result_series_preset_to_zero_at_start(run: Any) -> None:
    name = unique("preset")
    c = Controller(name, ScriptedReconciler(), max_concurrent_reconciles=3, clock=FakeClock())
    assert raw("controller_runtime_reconcile_total", controller=name, result="requeue") is None
    run(c)
    await until(lambda: len(c._workers) == 3)
    for result in ("success", "error", "requeue", "requeue_after"):
        assert raw("controller_runtime_reconcile_total", controller=name, result=result) == 0.0
    assert raw("controller_runtime_max_concurrent_reconciles", controller=name) == 3
    assert raw("controller_runtime_active_workers", controller=name) == 0


async def test_success_forgets(run: Any) -> None:
    name, clock = unique("success"), FakeClock()
    rec = ScriptedReconciler(Result())
    c = Controller(name, rec, clock=clock)
    c.queue.rate_limiter.when(REQ)  # an earlier failure the success must forget
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "success") == 1)
    assert c.queue.num_requeues(REQ) == 0
    assert len(c.queue) == 0 and c.queue.waiting == 0
    assert sample("controller_runtime_reconcile_time_seconds_count", controller=name) == 1
    assert sample("workqueue_adds_total", name=name, controller=name) == 1


async def test_error_requeues_rate_limited_with_backoff(run: Any) -> None:
    name, clock = unique("error"), FakeClock()
    rec = ScriptedReconciler(RuntimeError("boom"), RuntimeError("boom"), Result())
    c = Controller(name, rec, clock=clock)
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "error") == 1)
    assert c.queue.num_requeues(REQ) == 1 and c.queue.waiting == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 0
    await clock.advance(0.004)
    assert len(rec.calls) == 1  # backoff 5 ms not yet over
    await clock.advance(0.001)
    await until(lambda: total(name, "error") == 2)
    assert c.queue.num_requeues(REQ) == 2
    await clock.advance(0.009)
    assert len(rec.calls) == 2  # second backoff is 10 ms
    await clock.advance(0.001)
    await until(lambda: total(name, "success") == 1)
    assert c.queue.num_requeues(REQ) == 0
    assert sample("workqueue_retries_total", name=name, controller=name) == 2


async def test_terminal_error_no_requeue_no_forget(run: Any) -> None:
    name, clock = unique("terminal"), FakeClock()
    rec = ScriptedReconciler(TerminalError("bad spec"))
    c = Controller(name, rec, clock=clock)
    c.queue.rate_limiter.when(REQ)  # backoff state that must survive
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "error") == 1)
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert c.queue.num_requeues(REQ) == 1  # not forgotten
    await clock.advance(2000.0)
    assert len(rec.calls) == 1 and len(c.queue) == 0 and c.queue.waiting == 0


async def test_terminal_error_found_in_cause_chain(run: Any) -> None:
    name, clock = unique("terminal-cause"), FakeClock()

    class Wrapped(RuntimeError):
        pass

    err = Wrapped("outer")
    err.__cause__ = TerminalError("inner")
    c = Controller(name, ScriptedReconciler(err), clock=clock)
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "error") == 1)
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert c.queue.waiting == 0


async def test_requeue_after_forgets_then_adds_after(run: Any) -> None:
    name, clock = unique("requeue-after"), FakeClock()
    rec = ScriptedReconciler(Result(requeue_after=30.0, requeue=True), Result())
    c = Controller(name, rec, clock=clock)
    c.queue.rate_limiter.when(REQ)
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "requeue_after") == 1)
    assert total(name, "requeue") == 0  # requeue_after wins over requeue
    assert c.queue.num_requeues(REQ) == 0 and c.queue.waiting == 1
    await clock.advance(29.9)
    assert len(rec.calls) == 1
    await clock.advance(0.1)
    await until(lambda: total(name, "success") == 1)
    assert len(rec.calls) == 2


async def test_requeue_true_is_rate_limited(run: Any) -> None:
    name, clock = unique("requeue"), FakeClock()
    rec = ScriptedReconciler(Result(requeue=True), Result())
    c = Controller(name, rec, clock=clock)
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "requeue") == 1)
    assert c.queue.num_requeues(REQ) == 1  # counts as a failure for backoff
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 0
    await clock.advance(0.005)
    await until(lambda: total(name, "success") == 1)


async def test_panic_is_recovered_counted_and_requeued(run: Any) -> None:
    name, clock = unique("panic"), FakeClock()
    rec = ScriptedReconciler(AttributeError("'NoneType' object has no attribute 'spec'"), Result())
    c = Controller(name, rec, clock=clock)
    run(c)
    c.queue.add(REQ)
    await until(lambda: total(name, "error") == 1)
    assert sample("controller_runtime_reconcile_panics_total", controller=name) == 1
    assert c.queue.waiting == 1
    await clock.advance(0.005)
    await until(lambda: total(name, "success") == 1)


async def test_panic_without_recover_fails_start(run: Any) -> None:
    name = unique("panic-raise")
    c = Controller(name, ScriptedReconciler(KeyError("x")), clock=FakeClock(), recover_panic=False)
    task = run(c)
    c.queue.add(REQ)
    with pytest.raises(KeyError):
        await asyncio.wait_for(task, 1)
    assert sample("controller_runtime_reconcile_panics_total", controller=name) == 1
    assert c.queue.shutting_down


async def test_exceptions_do_not_kill_the_worker(run: Any) -> None:
    name, clock = unique("survive"), FakeClock()
    rec = ScriptedReconciler(RuntimeError("1"), ValueError("2"), OSError("3"), Result())
    c = Controller(name, rec, clock=clock)  # one worker
    run(c)
    for key in ("a", "b", "c", "d"):
        c.queue.add(Request("ns", key))
    await until(lambda: len(rec.calls) == 4)
    assert total(name, "error") == 3 and total(name, "success") == 1
    assert [r.name for r in rec.calls] == ["a", "b", "c", "d"]


async def test_workers_run_concurrently_but_never_on_one_key(run: Any) -> None:
    name = unique("concurrency")
    release = asyncio.Event()
    in_flight: set[Request] = set()
    overlaps: list[Request] = []
    calls: list[Request] = []

    class Blocking:
        async def reconcile(self, request: Request) -> Result:
            if request in in_flight:
                overlaps.append(request)
            in_flight.add(request)
            calls.append(request)
            await release.wait()
            in_flight.discard(request)
            return Result()

    c = Controller(name, Blocking(), max_concurrent_reconciles=3, clock=FakeClock())
    run(c)
    a, b = Request("ns", "a"), Request("ns", "b")
    c.queue.add(a)
    c.queue.add(b)
    await until(lambda: len(in_flight) == 2)
    assert sample("controller_runtime_active_workers", controller=name) == 2
    c.queue.add(a)  # while a is processing: queued again only after done
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(calls) == 2
    release.set()
    await until(lambda: len(calls) == 3 and not in_flight)
    assert overlaps == []
    await until(lambda: sample("controller_runtime_active_workers", controller=name) == 0)


async def test_reconcile_id_per_attempt_in_every_log_line(run: Any) -> None:
    name, clock = unique("logs"), FakeClock()
    log = get_logger("test.reconciler")

    class Logging:
        attempts = 0

        async def reconcile(self, request: Request) -> Result:
            self.attempts += 1
            log.info("inside", attempt=self.attempts)
            log.warning("still inside")
            if self.attempts == 1:
                raise RuntimeError("first attempt fails")
            return Result()

    cap = LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, cap])
    try:
        c = Controller(name, Logging(), clock=clock)
        run(c)
        c.queue.add(REQ)
        await until(lambda: total(name, "error") == 1)
        await clock.advance(0.005)
        await until(lambda: total(name, "success") == 1)
    finally:
        structlog.reset_defaults()
    inside = [e for e in cap.entries if e["event"] in ("inside", "still inside", "Reconciler error")]
    assert len(inside) == 5
    for entry in inside:
        assert entry["controller"] == name
        assert entry["namespace"] == "ns" and entry["name"] == "a"
        assert entry["reconcileID"]
    by_attempt = {e["attempt"]: e["reconcileID"] for e in inside if e["event"] == "inside"}
    assert by_attempt[1] != by_attempt[2]
    first_ids = {e["reconcileID"] for e in inside[:3]}
    assert first_ids == {by_attempt[1]}  # the error line carries the failing attempt's ID
    # Outside a reconcile nothing is bound.
    assert "reconcileID" not in structlog.contextvars.get_contextvars()


async def test_start_waits_for_sync_then_times_out(run: Any) -> None:
    name, clock = unique("sync"), FakeClock()
    synced = False
    rec = ScriptedReconciler()
    c = Controller(name, rec, clock=clock, cache_sync_timeout=5.0)
    c.add_sync_check(lambda: synced, "kind source: things")
    task = run(c)
    c.queue.add(REQ)
    await clock.advance(1.0)
    assert rec.calls == [] and not c._workers
    synced = True
    await clock.advance(0.1)
    await until(lambda: rec.calls == [REQ])

    c2 = Controller(unique("sync-timeout"), ScriptedReconciler(), clock=clock, cache_sync_timeout=5.0)
    c2.add_sync_check(lambda: False, "kind source: never")
    task2 = run(c2)
    await clock.advance(5.2)
    with pytest.raises(CacheSyncTimeoutError, match="never"):
        await asyncio.wait_for(task2, 1)
    assert not task.done()


async def test_cancel_shuts_down_queue_and_workers(run: Any) -> None:
    name = unique("cancel")
    started = asyncio.Event()
    cancelled = asyncio.Event()

    class Hanging:
        async def reconcile(self, request: Request) -> Result:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return Result()

    c = Controller(name, Hanging(), clock=FakeClock())
    task = run(c)
    c.queue.add(REQ)
    await asyncio.wait_for(started.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set() and c.queue.shutting_down
    assert all(w.done() for w in c._workers)
    assert not c.queue._tasks


async def test_stop_drains_queued_and_in_flight_requests(run: Any) -> None:
    name = unique("drain")
    gate = asyncio.Event()
    done: list[str] = []

    class Slow:
        async def reconcile(self, request: Request) -> Result:
            await gate.wait()
            done.append(request.name)
            return Result()

    c = Controller(name, Slow(), clock=FakeClock())
    task = run(c)
    for key in ("a", "b", "c"):
        c.queue.add(Request("ns", key))
    await until(lambda: len(c.queue) == 2)  # "a" in flight
    stopping = asyncio.create_task(c.stop(drain_timeout=5.0))
    await asyncio.sleep(0)
    c.queue.add(Request("ns", "late"))  # refused: shutting down
    gate.set()
    await asyncio.wait_for(stopping, 5)
    assert done == ["a", "b", "c"]
    assert task.done() and task.exception() is None


async def test_stop_cancels_after_drain_timeout(run: Any) -> None:
    name = unique("drain-timeout")

    class Stuck:
        async def reconcile(self, request: Request) -> Result:
            await asyncio.Event().wait()
            return Result()

    c = Controller(name, Stuck(), clock=FakeClock())
    task = run(c)
    c.queue.add(REQ)
    await until(lambda: REQ in c.queue._processing)
    await asyncio.wait_for(c.stop(drain_timeout=0.05), 5)
    assert task.done() and not task.cancelled() and task.exception() is None


def test_invalid_options() -> None:
    with pytest.raises(ValueError):
        Controller("", ScriptedReconciler())
    with pytest.raises(ValueError):
        Controller("x", ScriptedReconciler(), max_concurrent_reconciles=0)


async def test_reconciliation_timeout_counts_and_requeues(run: Any) -> None:
    name = unique("timeout")

    class Slow:
        calls = 0

        async def reconcile(self, request: Request) -> Result:
            self.calls += 1
            if self.calls == 1:
                await asyncio.Event().wait()  # never finishes: cut by the timeout
            raise TimeoutError("the reconciler's own timeout is not ours")

    clock = FakeClock()
    c = Controller(name, Slow(), clock=clock, reconciliation_timeout=0.01)
    run(c)
    c.queue.add(REQ)
    await asyncio.wait_for(until_async(lambda: total(name, "error") == 1), 5)
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 1
    assert c.queue.waiting == 1  # error path: rate-limited requeue
    await clock.advance(0.005)
    await asyncio.wait_for(until_async(lambda: total(name, "error") == 2), 5)
    assert sample("controller_runtime_reconcile_timeouts_total", controller=name) == 1


async def until_async(condition: Callable[[], bool]) -> None:
    """Like ``until`` but sleeping in real time (for wall-clock timeouts)."""
    while not condition():
        await asyncio.sleep(0.001)


async def test_func_adapter_and_request_keys(run: Any) -> None:
    seen: list[Request] = []

    async def fn(request: Request) -> Result:
        seen.append(request)
        return Result()

    c = Controller(unique("func"), Func(fn), clock=FakeClock())
    run(c)
    c.queue.add(Request.from_key("ns/a"))
    c.queue.add(Request.from_key("cluster-scoped"))
    await until(lambda: len(seen) == 2)
    assert seen == [Request("ns", "a"), Request("", "cluster-scoped")]
    assert [str(r) for r in seen] == ["ns/a", "cluster-scoped"]


async def test_a_retry_error_is_logged_without_a_traceback_and_retried(run: Any) -> None:
    # RetryError: raised on purpose, its cause already on the object's conditions; the log line
    # keeps the message but not the traceback; an unexpected exception keeps its traceback.
    from banlieue.runtime import RetryError

    name, clock = unique("retry-log"), FakeClock()

    class Failing:
        attempts = 0

        async def reconcile(self, request: Request) -> Result:
            self.attempts += 1
            if self.attempts == 1:
                raise RetryError("vCenter vc1 not answering")
            if self.attempts == 2:
                raise KeyError("bug")
            return Result()

    cap = LogCapture()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, cap])
    try:
        c = Controller(name, Failing(), clock=clock)
        run(c)
        c.queue.add(REQ)
        await until(lambda: total(name, "error") == 1)
        await clock.advance(0.005)
        await until(lambda: total(name, "error") == 2)
        await clock.advance(0.01)
        await until(lambda: total(name, "success") == 1)
    finally:
        structlog.reset_defaults()
    errors = [e for e in cap.entries if e["event"] == "Reconciler error"]
    assert [e["error"] for e in errors] == ["vCenter vc1 not answering", "'bug'"]
    assert errors[0].get("exc_info") is None
    assert isinstance(errors[1].get("exc_info"), KeyError)
