"""Per-vCenter cap on the controller workers held by backend calls (docs/operations.md,
"Per-vCenter worker cap").

All vCenters share one controller's workers (``max_concurrent_reconciles``). A reconcile that
talks to a slow vCenter holds its worker for the whole clone (with its configuration; the
power-on is followed in the background, ``power_ons``), so enough of them starve every other
vCenter. ``VCenterSlots`` bounds how many workers one vCenter may hold at once: a reconcile
takes a slot before its first backend call, gives it back after its last one (the API writes
that follow need none), and, when none is free, gives its worker back instead of waiting (the
worker serves other vCenters). The cap is half the workers: 16 with the default 32, so at most
16 clones run at once on one vCenter. Two vCenters that both hold their half leave none to a
third: the cap protects the others from one slow vCenter, not from two.

The key is the vCenter, not the spelling of its endpoint (``slot_key``: the backend's
``endpoint_label``, ``host:port``): Providers that name the same vCenter as ``vc``, ``vc:443``
or ``https://vc/sdk``, in any namespace, share its slots.

Waiting without spinning. With the wake channel running (``requests()``, watched by the
controller), a request that finds its vCenter full joins that vCenter's FIFO waiting list and
its reconcile ends without a requeue; each ``release`` enqueues the next waiter. A woken request
holds a wake token until its next reconcile tries a slot; a reconcile that ends without trying
(the object is gone, or needs no vCenter any more) passes the token to the next waiter
(``settle``), so no release is lost and waiting costs nothing. Before, every deferred reconcile
requeued after 1 s: at 10,000 VSphereMachines on a cold start that was 1.5 million reconciles
in 8 minutes, starving the event loop (docs/performance.md). Without the channel (a reconciler
built without its controller) the caller falls back to a timed requeue.

Machines whose VM exists go first. A reconcile of a machine whose VM exists (a status to write
once the guest reports its address, a power change) is short; in a 0 -> 1,000 wave it waited in
the one FIFO behind every machine still to be cloned, so machines cloned and powered on were
shown provisioned only once the last clone had started (1,000 machines, 5 s clones: 400 of 1,000
provisioned when the 1,000th clone was sent). ``try_acquire(..., first=True)`` puts such a
request in a second line, served before the first.

Single event loop, no awaits inside: ``try_acquire`` / ``release`` / ``settle`` need no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator

from banlieue.api.infrastructure import VSphereMachine
from banlieue.backends.base import BackendError, Connection
from banlieue.reconcilers.vspheremachine.reconnect import ReconnectNotifier
from banlieue.reconcilers.wake import WakeChannel
from banlieue.runtime import Request

__all__ = ["VCenterSlots", "cap_for_workers", "slot_key"]


def slot_key(backend: object, conn: Connection) -> str:
    """The slot key of ``conn``'s vCenter: the backend's ``endpoint_label`` (``host:port``, the
    label of its sessions and metrics) when it offers one, else the endpoint as written; also the
    endpoint as written when it does not parse (admission refuses those)."""
    if isinstance(backend, ReconnectNotifier):
        try:
            return backend.endpoint_label(conn)
        except BackendError:
            pass
    return conn.endpoint


def vm_exists(machine: VSphereMachine) -> bool:
    """Whether the machine's VM exists as far as the stored object tells: ``spec.providerID``
    (written right after the clone) or ``status.instanceUUID``. Such a machine is served first by
    the slots (``try_acquire(first=True)``). The providerID counts because the status write after
    a clone may be deferred (a progress-only change, ADR 0011): in a 0 -> 1,000 wave, 300
    machines cloned and powered on, with a providerID but a status still saying Cloning, waited
    behind every clone to come (issue 22)."""
    return bool(machine.spec.provider_id) or bool(machine.status and machine.status.instance_uuid)


def cap_for_workers(workers: int) -> int:
    """Slots per vCenter for a controller with ``workers`` workers: ``max(1, workers // 2)``,
    so one vCenter never holds more than half the workers (and always at least one)."""
    return max(1, workers // 2)


class VCenterSlots:
    """Counting slots per vCenter key (``slot_key`` of the Connection), ``cap`` per key, with a
    FIFO waiting list per key (module docstring).

    ``try_acquire(key, request=None) -> bool`` never waits; every True must be paired with one
    ``release(key)`` (in a ``finally``), and every reconcile that passed its request ends with
    ``settle(request)``. Raises ValueError for ``cap < 1`` and RuntimeError on a release
    without a matching acquire.
    """

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self._held: dict[str, int] = {}
        self._waiting: dict[str, OrderedDict[Request, None]] = {}  # key -> requests, oldest first
        self._waiting_first: dict[str, OrderedDict[Request, None]] = {}  # key -> ``first`` requests, served before
        self._woken: dict[Request, str] = {}  # request -> key of the wake token it holds
        self._channel = WakeChannel(on_stop=self._stopped)

    @property
    def waking(self) -> bool:
        """True while the wake channel runs: a refused request waits in line, no timer needed."""
        return self._channel.running

    def held(self, key: str) -> int:
        """Slots currently held for ``key``."""
        return self._held.get(key, 0)

    def waiting(self, key: str) -> int:
        """Requests waiting for a slot of ``key``."""
        return len(self._waiting.get(key, ())) + len(self._waiting_first.get(key, ()))

    def try_acquire(self, key: str, request: Request | None = None, *, first: bool = False) -> bool:
        """Take a slot for ``key`` if fewer than ``cap`` are held; False (nothing taken) if not,
        and then ``request`` (if given, while the wake channel runs) waits in line for ``key``:
        with ``first`` (its VM exists: a short reconcile) in the line served first."""
        woken = request is not None and self._woken.pop(request, None) is not None  # its token is used
        held = self._held.get(key, 0)
        if held >= self.cap:
            if request is not None and self._channel.running:
                other = (self._waiting if first else self._waiting_first).get(key)
                if other is not None and request in other:
                    self._unqueue(key, request)  # its VM appeared (or went) while it waited: it changes line
                queue = (self._waiting_first if first else self._waiting).setdefault(key, OrderedDict())
                queue[request] = None
                if woken:
                    queue.move_to_end(request, last=False)  # it was first in line: it stays first
            return False
        self._held[key] = held + 1
        if request is not None:
            self._unqueue(key, request)
        return True

    def release(self, key: str) -> None:
        """Give back one slot taken by ``try_acquire(key)``; wakes the next waiter of ``key``."""
        held = self._held.get(key, 0)
        if held <= 0:
            raise RuntimeError(f"release of {key!r} without a held slot")
        if held == 1:
            del self._held[key]  # no entry per vCenter ever seen: the table stays small
        else:
            self._held[key] = held - 1
        self._wake_next(key)

    def settle(self, request: Request) -> None:
        """End of a reconcile of ``request``: a wake token it did not use goes to the next waiter."""
        key = self._woken.pop(request, None)
        if key is not None:
            self._wake_next(key)

    def _unqueue(self, key: str, request: Request) -> None:
        for lines in (self._waiting_first, self._waiting):
            queue = lines.get(key)
            if queue is not None:
                queue.pop(request, None)
                if not queue:
                    del lines[key]

    def _wake_next(self, key: str) -> None:
        queue = self._waiting_first.get(key) or self._waiting.get(key)
        if not queue or not self._channel.running:
            return
        request = next(iter(queue))
        self._unqueue(key, request)
        self._woken[request] = key
        self._channel.wake(request)

    def requests(self) -> AsyncIterator[Request]:
        """The wake channel (``ControllerBuilder.watches_channel``): yields each woken request.
        While it runs, refused requests wait in line instead of needing a timed requeue."""
        return self._channel.requests()

    def _stopped(self) -> None:
        # The controller stops with its channels: nobody is left to wake.
        self._waiting.clear()
        self._waiting_first.clear()
        self._woken.clear()
