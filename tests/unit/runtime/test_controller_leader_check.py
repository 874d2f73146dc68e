"""Controller.set_leader_check (the fencing the Manager wires to ``LeaderElector.lease_valid``):
while the check is False a taken request is not reconciled but put back after ``retry_after``
(fake clock, no wall time); once True again it is reconciled."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator

import pytest

from banlieue.runtime.clock import FakeClock
from banlieue.runtime.controller import Controller
from banlieue.runtime.reconcile import Request
from banlieue.testing.recording import RecordingReconciler

from .fakes import until

_names = itertools.count()


class Check:
    """A leader check the test flips; counts how often the workers consult it."""

    def __init__(self, valid: bool) -> None:
        self.valid = valid
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.valid


def asked_at_least(check: Check, count: int) -> bool:
    return check.asked >= count


@pytest.fixture
async def started() -> AsyncIterator[tuple[Controller, RecordingReconciler, Check, FakeClock]]:
    clock, recorder, check = FakeClock(), RecordingReconciler(), Check(valid=True)
    controller = Controller(f"leader-check-{next(_names)}", recorder, max_concurrent_reconciles=2, clock=clock)
    controller.set_leader_check(check, retry_after=1.0)
    task = asyncio.create_task(controller.start())
    try:
        yield controller, recorder, check, clock
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_requests_wait_while_the_lease_is_not_valid_and_run_once_it_is(
    started: tuple[Controller, RecordingReconciler, Check, FakeClock],
) -> None:
    controller, recorder, check, clock = started
    first = Request("ns", "before")
    controller.queue.add(first)
    await until(lambda: recorder.calls == [first])

    check.valid = False  # e.g. the process was paused past the renew deadline
    stale = [Request("ns", "a"), Request("ns", "b")]
    for request in stale:
        controller.queue.add(request)
    await until(lambda: check.asked >= 3 and clock.sleepers >= 1)
    assert recorder.calls == [first]
    assert len(controller.queue) == 0, "requests must wait in the delaying queue, not spin"
    for _ in range(3):  # each retry_after the requests are taken, checked, and put back again
        target = check.asked + 2
        await clock.advance(1.0)
        await until(functools.partial(asked_at_least, check, target))
        assert recorder.calls == [first]

    check.valid = True  # renewed
    await clock.advance(1.0)
    await until(lambda: len(recorder.calls) == 3)
    assert set(recorder.calls[1:]) == set(stale)
    await clock.advance(5.0)
    assert len(recorder.calls) == 3, "a request put back while fenced runs once, not once per retry"


async def test_without_a_check_requests_run_at_once() -> None:
    clock, recorder = FakeClock(), RecordingReconciler()
    controller = Controller(f"leader-check-{next(_names)}", recorder, clock=clock)
    task = asyncio.create_task(controller.start())
    try:
        controller.queue.add(Request("ns", "x"))
        await until(lambda: len(recorder.calls) == 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
