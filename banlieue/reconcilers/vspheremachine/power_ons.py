"""Power-ons followed in the background, outside the vCenter slot (issue 22).

A machine's reconcile used to wait for its PowerOnVM_Task: the change watch reporting the VM
powered on ends it (no task polls), but the reconcile held its worker and its vCenter slot
(``vcenter_slots``) until then, which is up to a poll gap of the watch plus the collector's tick.
With the watch hurried to keep that short, long polls were about one per second of a wave (one
per machine at 5 s clones, 5 slots); without hurrying it, every clone waited longer for a slot.

``PowerOns`` sends the power-on from the reconcile and follows it in an asyncio task of its own:
the reconcile writes ``PoweringOn`` (a progress-only status, usually coalesced: ADR 0011) and
gives back its worker and slot. Until the power-on ends the machine's reconciles return at once
(``running``): the VM's kept read is held while its power task runs, so each would cost a read
of the VM (1.33 per machine in a 100-machine wave, issue 22). Its end, success or failure,
enqueues the machine through the wake channel (``requests``). A power-on that fails (or whose
outcome is unknown) is kept and handed to that reconcile (``take``): the failure is reported as
a waited-for one would have been. One power-on per machine at a time.

In memory only: a process that restarts while a power-on runs finds the VM powered off or on, and
``Backend.set_power_state`` waits for a power task already running on the VM before it sends
another (ADR 0012). Single event loop: no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog

from banlieue.backends.base import BackendError, VMInfo
from banlieue.reconcilers.wake import WakeChannel
from banlieue.runtime import Request

__all__ = ["PowerOns"]

log = structlog.get_logger("banlieue.reconcilers.vspheremachine.power_ons")


class PowerOns:
    """Background power-ons by machine UID (module docstring)."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Task[None]] = {}
        self._failed: dict[str, BackendError] = {}
        self._channel = WakeChannel(on_stop=self._stopped)

    @property
    def waking(self) -> bool:
        """Whether the wake channel runs (``requests``): without it a power-on is waited for."""
        return self._channel.running

    def running(self, uid: str) -> bool:
        """Whether a power-on of machine ``uid`` is still followed."""
        return uid in self._running

    def take(self, uid: str) -> BackendError | None:
        """The failure of machine ``uid``'s last background power-on, once (None: none kept)."""
        return self._failed.pop(uid, None)

    def forget(self, uid: str) -> None:
        """The machine is gone: drop a kept failure (a running power-on ends on its own)."""
        self._failed.pop(uid, None)

    def start(self, request: Request, uid: str, power_on: Callable[[], Awaitable[VMInfo]],
              on_done: Callable[[VMInfo], None]) -> None:
        """Follow ``power_on()`` (``Backend.set_power_state(..., hurry=False)``) for machine
        ``uid``: ``on_done(info)`` when it succeeds; a BackendError it raises is kept for
        ``take``. Either way ``request`` is woken. Raises RuntimeError when one already runs for
        ``uid`` or the wake channel does not run."""
        if uid in self._running:
            raise RuntimeError(f"a power-on of {uid} is already followed")
        if not self._channel.running:
            raise RuntimeError("power-ons are followed in the background only while the wake channel runs")
        self._failed.pop(uid, None)

        async def follow() -> None:
            try:
                info = await power_on()
            except BackendError as err:
                self._failed[uid] = err
            except Exception:  # never lost silently: the next reconcile powers on again
                log.exception("background power-on failed unexpectedly", machine=str(request))
            else:
                on_done(info)
            finally:
                self._running.pop(uid, None)
            self._channel.wake(request)

        self._running[uid] = asyncio.ensure_future(follow())

    def requests(self) -> AsyncIterator[Request]:
        """The wake channel (``ControllerBuilder.watches_channel``): yields the machines whose
        background power-on ended. Its stop cancels the power-ons still followed (the controller
        stops; a power task sent goes on in vCenter and is waited for by the next process, ADR
        0012)."""
        return self._channel.requests()

    def _stopped(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
