"""A wake channel: requests a reconciler's own state enqueues, as a controller source.

``ControllerBuilder.watches_channel`` takes an async iterator of requests. ``WakeChannel`` is
one whose requests come from plain calls (``wake``) made on the event loop's thread, e.g. when
a vCenter slot is released (``vspheremachine.vcenter_slots``) or a background power-on ends
(``vspheremachine.power_ons``). It only runs while the controller iterates it: before that and
after the controller stopped, ``wake`` returns False and the caller falls back to what it does
without one (a timed requeue, a waited-for call). controller-runtime's ``source.Channel`` plays
this part for Go controllers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from banlieue.runtime import Request

__all__ = ["WakeChannel"]


class WakeChannel:
    """Requests to reconcile, yielded by ``requests()`` while the controller runs it.
    ``on_stop`` is called once the controller stops iterating (nobody is left to wake)."""

    def __init__(self, on_stop: Callable[[], None] = lambda: None) -> None:
        self._put: Callable[[Request], None] | None = None
        self._on_stop = on_stop

    @property
    def running(self) -> bool:
        """Whether the controller iterates the channel (``wake`` reaches it)."""
        return self._put is not None

    def wake(self, request: Request) -> bool:
        """Enqueue ``request``; False (nothing done) while the channel does not run."""
        if self._put is None:
            return False
        self._put(request)
        return True

    async def requests(self) -> AsyncIterator[Request]:
        """The channel (``ControllerBuilder.watches_channel``): yields each woken request."""
        queue: asyncio.Queue[Request] = asyncio.Queue()
        self._put = queue.put_nowait
        try:
            while True:
                yield await queue.get()
        finally:
            self._put = None
            self._on_stop()
