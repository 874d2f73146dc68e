"""reconcilers.answers: a deadline that counts a vCenter's silence, not a call's wait in its pool."""

from __future__ import annotations

import asyncio
import time

import pytest

from banlieue.backends.base import BackendError, Connection
from banlieue.reconcilers.answers import answered_in_time, answering

CONN = Connection(endpoint="vc.example:443", username="u", password="p", provider="ns/vc1")


class Answers:
    """A backend whose vCenter last answered at ``answered_at`` (monotonic; None: never)."""

    def __init__(self, answered_at: float | None = None, raises: bool = False) -> None:
        self.answered_at = answered_at
        self.raises = raises

    def seconds_since_answer(self, conn: Connection) -> float | None:
        if self.raises:
            raise BackendError("invalid vCenter endpoint", reason="InvalidEndpoint")
        return None if self.answered_at is None else time.monotonic() - self.answered_at


def test_answering_is_an_answer_within_the_window() -> None:
    assert answering(Answers(time.monotonic()), CONN, 1.0)
    assert not answering(Answers(time.monotonic() - 2.0), CONN, 1.0)
    assert not answering(Answers(None), CONN, 1.0)  # never answered: issue 23 case 4
    assert not answering(Answers(time.monotonic(), raises=True), CONN, 1.0)
    assert not answering(object(), CONN, 1.0)  # a backend that cannot tell


async def test_a_silent_vcenter_times_out_at_the_quiet_window() -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await answered_in_time(Answers(None), CONN, asyncio.sleep(10), 0.3, 60.0)
    assert time.monotonic() - started < 1.0


async def test_a_busy_vcenter_gets_the_answer_past_the_quiet_window() -> None:
    busy = Answers(time.monotonic())

    async def keep_answering() -> None:
        while True:
            busy.answered_at = time.monotonic()
            await asyncio.sleep(0.05)

    answering_task = asyncio.create_task(keep_answering())
    try:
        async def late() -> str:
            await asyncio.sleep(0.8)
            return "answer"

        assert await answered_in_time(busy, CONN, late(), 0.2, 60.0) == "answer"
    finally:
        answering_task.cancel()


async def test_the_limit_ends_even_a_busy_wait_and_the_call_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def never() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    # The vCenter answers all along (its last answer is always "now"): only the limit ends it.
    class Always(Answers):
        def seconds_since_answer(self, conn: Connection) -> float | None:
            return 0.0

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await answered_in_time(Always(), CONN, never(), 0.1, 0.5)
    assert 0.4 < time.monotonic() - started < 2.0
    await asyncio.wait_for(cancelled.wait(), 1.0)
