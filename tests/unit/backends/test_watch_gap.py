"""The change watch's gap between long polls (issue 22): it doubles from ``POLL_GAP_SECONDS`` to
``POLL_GAP_MAX_SECONDS`` while polls keep bringing updates, and a caller waiting on the watch
(``VMIndex.hurry``: a power-on, a clone's name) gets the next poll within the shortest gap.

The loop runs against a stand-in ``VMWatch`` whose every poll comes back at once with updates (a
wave): the assertions bound the gaps from below (the loop never sends early) or far above what
the rule gives (no flake under load)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from banlieue.backends.vsphere import tasks, watch
from banlieue.backends.vsphere.find import VMIndex
from banlieue.backends.vsphere.watch import POLL_GAP_MAX_SECONDS, POLL_GAP_SECONDS, hurried_poll, next_gap


def test_next_gap_doubles_while_updates_come_and_resets_when_quiet() -> None:
    assert (POLL_GAP_SECONDS, POLL_GAP_MAX_SECONDS) == (1.0, 4.0)
    gaps = [1.0]
    for _ in range(4):
        gaps.append(next_gap(gaps[-1], True, 1.0, 4.0))
    assert gaps == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert next_gap(4.0, False, 1.0, 4.0) == 1.0  # an empty poll: quiet again
    assert next_gap(0.5, True, 1.0, 4.0) == 1.0  # never below the shortest gap


def test_hurried_poll_is_the_shortest_gap_after_the_last_send_never_later_than_due() -> None:
    assert hurried_poll(next_poll=14.0, sent=10.0, now=10.3, low=1.0) == 11.0
    assert hurried_poll(next_poll=14.0, sent=10.0, now=12.5, low=1.0) == 12.5  # past: at once
    assert hurried_poll(next_poll=10.5, sent=10.0, now=10.2, low=1.0) == 10.5  # due sooner anyway


def test_a_power_on_waiter_hurries_the_watch() -> None:
    index = VMIndex()
    hurries: list[int] = []
    unsubscribe = index.on_hurry(lambda: hurries.append(1))
    remove = index.on_powered_on("vm-1", lambda: None)
    assert hurries == [1]
    remove()
    unsubscribe()
    index.on_powered_on("vm-2", lambda: None)
    assert hurries == [1]


async def test_a_read_along_waiting_for_the_name_hurries_the_watch() -> None:
    hurries: list[int] = []
    along = tasks.ReadAlong(target=lambda: None, type_=object, paths=[], known=asyncio.Event(), grace=0.01,
                            hurry=lambda: hurries.append(1))
    await along.wait_known()
    assert hurries == [1]
    await along.wait_known()  # grace spent: no wait, no hurry
    assert hurries == [1]


class _Busy:
    """A ``VMWatch`` in a wave: every poll comes back at once with updates; records send times."""

    sent: list[float] = []

    def __init__(self, session: Any, max_wait: float, index: VMIndex) -> None:
        self.updated = False
        self.loop = asyncio.get_running_loop()

    def poll(self) -> list[Any]:
        type(self).sent.append(self.loop.time())
        self.updated = True
        return []

    def pending(self) -> dict[str, str]:
        return {}

    def cancel(self) -> None:
        return None


async def _polls(count: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(_Busy.sent) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{len(_Busy.sent)} polls, {count} expected"
        await asyncio.sleep(0.01)


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "VMWatch", _Busy)
    monkeypatch.setattr(_Busy, "sent", [])


async def test_the_gap_grows_while_updates_keep_coming(busy: None) -> None:
    session: Any = SimpleNamespace(endpoint=SimpleNamespace(label="vc", pool=None))
    stream = watch.watch_vms(session, VMIndex(), 60.0, poll_gap=0.02, poll_gap_max=0.16)
    consumer = asyncio.ensure_future(anext(stream))  # nothing is yielded: the loop just runs
    try:
        await _polls(6, timeout=30.0)
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await stream.aclose()  # type: ignore[attr-defined]
    gaps = [b - a for a, b in zip(_Busy.sent, _Busy.sent[1:], strict=False)]
    # 0.02, 0.04, 0.08, 0.16, 0.16 at least (the fixed-gap rule gave 0.02 each)
    for got, least in zip(gaps[:5], [0.02, 0.04, 0.08, 0.16, 0.16], strict=True):
        assert got >= least - 0.002, gaps


async def test_a_hurry_cuts_a_grown_gap_short(busy: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "next_gap", lambda gap, updated, low, high: 60.0)  # grown at once
    session: Any = SimpleNamespace(endpoint=SimpleNamespace(label="vc", pool=None))
    index = VMIndex()
    stream = watch.watch_vms(session, index, 60.0, poll_gap=0.05, poll_gap_max=60.0)
    consumer = asyncio.ensure_future(anext(stream))
    try:
        await _polls(2, timeout=30.0)  # 0.05 s after the first; the third is due 60 s later
        index.hurry()
        await _polls(3, timeout=20.0)  # hurried: 0.05 s after the second
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await stream.aclose()  # type: ignore[attr-defined]
    assert _Busy.sent[1] - _Busy.sent[0] >= 0.05 - 0.002  # the first gap is the shortest one
    assert _Busy.sent[2] - _Busy.sent[1] >= 0.05 - 0.002  # never sooner than the shortest gap


@pytest.mark.parametrize(("along", "most"), [(True, 3), (False, 7)])
async def test_a_clone_still_running_after_its_name_wait_is_polled_seldom(along: bool, most: int) -> None:
    """A task read with a ReadAlong (a clone) that still runs once the name wait is over is
    polled from ``ALONG_POLL_DELAY`` (1 s) doubling, not from 0.1 s: a task that ends 0.6 s
    after its first poll (scaled: ``ALONG_POLL_DELAY`` set to 0.2 s) costs 3 polls at most.
    Without a ReadAlong the 0.1 s start stays (about 4 polls over the same 0.6 s)."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + 0.6
    polls: list[float] = []

    async def run(fn: Any) -> dict[str, str]:
        polls.append(loop.time())
        return {"info.state": "success" if loop.time() >= ends else "running"}

    reads = tasks.ReadAlong(target=lambda: None, type_=object, paths=[]) if along else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tasks, "ALONG_POLL_DELAY", 0.2)
        await tasks.wait_task(run, SimpleNamespace(_moId="task-1"), "clone", 30.0, "ns/vc", along=reads)
    assert 2 <= len(polls) <= most
    if along:
        assert polls[1] - polls[0] >= 0.2
    else:
        assert len(polls) >= 4
