"""Lease fencing through the Manager (5c4bd6a): a leader-only controller does not reconcile once
its elector's last successful renewal is older than the renew deadline, although the elector
still believes it leads (a process resumed after SIGSTOP whose renew loop has not run yet); its
requests are put back and run once the Lease is renewed.

The real LeaderElector renews a real Lease on the API-server double. LeaderElector reads
``time.monotonic`` itself (no Clock parameter), so the test replaces the ``time`` module *as seen
by banlieue.runtime.leaderelection* with one whose monotonic time it can jump: the event loop and
everything else keep the real clock. The controller's retry delay runs on a FakeClock. The renew
loop sleeps ``retry_period`` (8 s) after acquiring, far longer than the test, so the only
renewal inside the test is the one it makes (``try_acquire_or_renew``, the loop's single step).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from runtime_helpers import new_client

from banlieue.runtime import leaderelection
from banlieue.runtime.client import Client
from banlieue.runtime.clock import FakeClock
from banlieue.runtime.controller import Controller
from banlieue.runtime.kinds import LEASE
from banlieue.runtime.manager import Manager
from banlieue.runtime.reconcile import Request
from banlieue.testing.recording import RecordingReconciler

RENEW_DEADLINE = 10.0


class JumpingTime:
    """``time`` for leaderelection: real ``time()``, ``monotonic()`` plus a jump the test sets."""

    def __init__(self) -> None:
        self.jump = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.jump

    def time(self) -> float:
        return time.time()


async def _until(condition: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture
def jumping_time(monkeypatch: pytest.MonkeyPatch) -> JumpingTime:
    fake = JumpingTime()
    monkeypatch.setattr(leaderelection, "time", SimpleNamespace(monotonic=fake.monotonic, time=fake.time))
    return fake


@pytest.fixture
async def manager(apiserver: Any, namespace: str) -> AsyncIterator[Manager]:
    mgr = Manager(
        new_client(apiserver), namespace=namespace, leader_election=True, leader_election_id="fence-test",
        lease_duration=15.0, renew_deadline=RENEW_DEADLINE, retry_period=8.0, metrics_bind_address="0",
        health_probe_bind_address="0", handle_signals=False,
    )
    yield mgr


async def test_stale_renewal_fences_reconciles_until_renewed(
    manager: Manager, client: Client, namespace: str, jumping_time: JumpingTime,
) -> None:
    clock, recorder = FakeClock(), RecordingReconciler()
    controller = Controller("fence-test", recorder, clock=clock)  # need_leader_election=True
    manager.add(controller)
    elector = manager.elector
    assert elector is not None
    task = asyncio.create_task(manager.start())
    try:
        await _until(elector.is_leader)
        first = Request(namespace, "while-valid")
        controller.queue.add(first)
        await _until(lambda: recorder.calls == [first])
        assert elector.lease_valid()
        renew_time = (await client.get(LEASE, "fence-test", namespace))["spec"]["renewTime"]

        # The process "was paused": the last renewal is now older than the renew deadline, but
        # the renew loop has not run, so the elector still says it leads.
        jumping_time.jump = RENEW_DEADLINE + 0.5
        assert elector.is_leader() and not elector.lease_valid()
        stale = Request(namespace, "while-stale")
        controller.queue.add(stale)
        await _until(lambda: clock.sleepers >= 1 and len(controller.queue) == 0)
        for _ in range(3):  # taken, fenced, put back after 1 s (Manager's retry_after), again
            await clock.advance(1.0)
            await asyncio.sleep(0.05)
        assert recorder.calls == [first], "reconciled on a Lease whose last renewal is stale"
        assert (await client.get(LEASE, "fence-test", namespace))["spec"]["renewTime"] == renew_time

        # One renewal (the renew loop's step) makes the lease valid again; the put-back request runs.
        assert await elector.try_acquire_or_renew()
        assert elector.lease_valid()
        assert (await client.get(LEASE, "fence-test", namespace))["spec"]["renewTime"] != renew_time
        await clock.advance(1.0)
        await _until(lambda: recorder.calls == [first, stale])
        await clock.advance(3.0)
        await asyncio.sleep(0.05)
        assert recorder.calls == [first, stale]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
