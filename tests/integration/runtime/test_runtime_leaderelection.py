"""Two LeaderElectors on one Lease: mutual exclusion, takeover after a crash (within
lease_duration + retry_period, with jitter), fast takeover after a release. Short durations
(2 s / 1.5 s / 0.3 s); the semantics are those of the 15/10/2 s defaults."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from prometheus_client import REGISTRY

from banlieue.runtime.client import Client
from banlieue.runtime.kinds import LEASE
from banlieue.runtime.leaderelection import JITTER_FACTOR, LeaderElector

DURATIONS = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.3}


def elector(client: Client, namespace: str, identity: str, **kw: Any) -> LeaderElector:
    return LeaderElector(client, lease_name="le-test", namespace=namespace, identity=identity, **DURATIONS, **kw)


async def _first_leader(a: LeaderElector, b: LeaderElector, timeout: float = 5.0) -> tuple[LeaderElector, LeaderElector]:
    async with asyncio.timeout(timeout):
        while not (a.is_leader() or b.is_leader()):
            await asyncio.sleep(0.01)
    return (a, b) if a.is_leader() else (b, a)


async def _watch_exclusive(a: LeaderElector, b: LeaderElector, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert not (a.is_leader() and b.is_leader()), "two leaders at once"
        await asyncio.sleep(0.01)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_one_leader_and_takeover_after_crash(client: Client, other_client: Client, namespace: str) -> None:
    a = elector(client, namespace, "a", release_on_cancel=False)
    b = elector(other_client, namespace, "b", release_on_cancel=False)
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    try:
        leader, backup = await _first_leader(a, b)
        await _watch_exclusive(a, b, 2.5)  # renewals keep the same leader
        assert leader.is_leader() and not backup.is_leader()
        assert REGISTRY.get_sample_value("leader_election_master_status", {"name": "le-test"}) is not None
        lease = await client.get(LEASE, "le-test", namespace)
        assert lease["spec"]["holderIdentity"] == leader.identity
        crashed = time.monotonic()
        await _stop(tasks[leader])  # killed: no release
        async with asyncio.timeout(6):
            while not backup.is_leader():
                await asyncio.sleep(0.01)
        took = time.monotonic() - crashed
        # A stale lease is honoured until lease_duration after it was last seen to change.
        bound = DURATIONS["lease_duration"] + DURATIONS["retry_period"] * (1 + JITTER_FACTOR) + 0.5
        assert DURATIONS["lease_duration"] - DURATIONS["retry_period"] * 2 <= took <= bound
        lease = await client.get(LEASE, "le-test", namespace)
        assert lease["spec"]["holderIdentity"] == backup.identity
        assert lease["spec"]["leaseTransitions"] >= 1  # the Lease's field (a real server drops others)
    finally:
        for task in tasks.values():
            await _stop(task)


async def test_release_hands_over_quickly(client: Client, other_client: Client, namespace: str) -> None:
    a = elector(client, namespace, "a")
    b = elector(other_client, namespace, "b")
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    try:
        leader, backup = await _first_leader(a, b)
        released = time.monotonic()
        await _stop(tasks[leader])  # release_on_cancel: holderIdentity "" and 1 s duration
        lease = await client.get(LEASE, "le-test", namespace)
        assert lease["spec"]["holderIdentity"] in ("", backup.identity)
        async with asyncio.timeout(3):
            while not backup.is_leader():
                await asyncio.sleep(0.01)
        assert time.monotonic() - released < DURATIONS["retry_period"] * (1 + JITTER_FACTOR) + 0.5
    finally:
        for task in tasks.values():
            await _stop(task)


async def test_losing_the_lease_stops_leading(client: Client, other_client: Client, namespace: str) -> None:
    stopped = asyncio.Event()
    a = elector(client, namespace, "a", on_stopped_leading=stopped.set)
    task = asyncio.create_task(a.run())
    try:
        async with asyncio.timeout(5):
            await a.leading.wait()
        # someone else takes the lease by force: a's RV-guarded renewals now conflict
        lease = await other_client.get(LEASE, "le-test", namespace)
        lease["spec"]["holderIdentity"] = "usurper"
        lease["spec"]["leaseDurationSeconds"] = 60
        await other_client.update(LEASE, lease)
        async with asyncio.timeout(DURATIONS["renew_deadline"] + 2):
            await task  # run() returns when leadership is lost
        assert stopped.is_set() and not a.is_leader()
    finally:
        await _stop(task)
