"""A vCenter that is busy, not silent: a call that waits its turn in the vCenter's thread pool.

The backend runs each vCenter's requests in a pool of a few threads (``--vsphere-max-workers``);
behind a wave of reads (a cold start with 10,000 VMs queues one per VM) a new call waits its
turn for seconds while the vCenter answers every request sent. A deadline that measured that
wait reported a reachable vCenter unreachable: at the 10,000-VM cold start (``bench/e2e.py
--only memory``, 2026-12-07) each Provider's ``Ready`` and the VMImage's row flapped to
``ConnectFailed`` and back, 3 times, and every flap re-enqueued the 20,000 VMs and
VSphereMachines placed there. Here a deadline counts silence: time during which the vCenter
answered none of the backend's requests (``AnswerReporter``). An endpoint that accepts TCP and
never answers (issue 23 case 4) answers nothing, so its calls still end at the deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

from banlieue.backends.base import BackendError, Connection

T = TypeVar("T")


@runtime_checkable
class AnswerReporter(Protocol):
    """What a backend offers to tell how long ago a vCenter answered one of its requests."""

    def seconds_since_answer(self, conn: Connection) -> float | None:
        """Seconds since the last answer, or None when none came yet."""
        ...


def answering(backend: object, conn: Connection, within: float) -> bool:
    """Whether ``conn``'s vCenter answered one of the backend's requests in the last ``within``
    seconds. A call of ours that is still unanswered then waits its turn in the vCenter's thread
    pool behind requests it answers: the vCenter is busy, not silent, and a deadline that only
    measured the wait would report a reachable vCenter unreachable (at the 10,000-VM cold start,
    the Provider's first call queued behind 10,000 VM reads for over 10 s, and its ``Ready``
    flapped 3 times, each flap re-enqueuing every VM). False when the backend cannot tell, the
    endpoint cannot be built, or nothing was answered yet (an endpoint that accepts TCP and never
    answers, issue 23 case 4)."""
    if not isinstance(backend, AnswerReporter):
        return False
    try:
        age = backend.seconds_since_answer(conn)
    except BackendError:
        return False
    return age is not None and age < within


async def answered_in_time(backend: object, conn: Connection, call: Coroutine[Any, Any, T], quiet_seconds: float,
                           limit_seconds: float) -> T:
    """``await call`` with a deadline that counts silence, not queueing: TimeoutError (the call
    cancelled) once ``quiet_seconds`` have passed and ``conn``'s vCenter answered none of the
    backend's requests in the last ``quiet_seconds`` (``answering``), or ``limit_seconds`` have
    passed in all. While the vCenter answers others the call is looked at again every second."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(call)
    started = loop.time()
    wait = quiet_seconds
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                return task.result()
            if loop.time() - started >= limit_seconds or not answering(backend, conn, quiet_seconds):
                raise TimeoutError
            wait = min(1.0, quiet_seconds)
    finally:
        if not task.done():
            task.cancel()
