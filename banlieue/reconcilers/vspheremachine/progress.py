"""Progress-only VSphereMachine status writes are coalesced (ADR 0011).

While a machine is provisioned its ``Ready`` condition steps through progress reasons
(``Cloning`` -> ``PoweringOn`` -> ``WaitingForIPAddress``) before ``Provisioned``. A status
write that only moves ``Ready`` False from one progress reason to another is deferred while
this role's last status write to the object is less than ``PROGRESS_WRITE_INTERVAL_SECONDS``
old: the reconcile requeues for the remaining time instead, and by then the machine is often
Ready (one write instead of two). Everything else is written at once: the first status,
``Cloning`` itself (ADR 0009: the clone start must be recorded before the clone), every Ready
transition, failures (Warning reasons), ``Paused``, ``Deleting``, and any change of another
condition.

"Last status write" is read from the stored status, so the rule survives restarts and leader
changes: the later of ``Ready.lastTransitionTime`` (the time ``Ready`` became False, i.e. our
first write of this False spell) and the clone start recorded in a ``Cloning`` message (the
time of the ``Cloning`` write). Both are lower bounds of the real last write, so the deferral
can only end early, never last longer than the interval. ``managedFields`` times would be
exact, but the informer cache strips ``managedFields`` (controller-runtime DefaultTransform) and
a GET per reconcile would cost more than the write it saves. Times are compared with this
replica's clock (as ADR 0009's clone window): a time in the future (clock skew) defers nothing.
"""

from __future__ import annotations

from datetime import datetime

from banlieue.api.conditions import READY, get_condition
from banlieue.api.infrastructure import VSphereMachineReason, VSphereMachineStatus
from banlieue.api.meta import ConditionStatus

PROGRESS_REASONS = frozenset(
    {VSphereMachineReason.CLONING, VSphereMachineReason.POWERING_ON, VSphereMachineReason.WAITING_FOR_IP_ADDRESS}
)
"""Ready False reasons that report progress, not a problem (SPEC §3)."""
PROGRESS_WRITE_INTERVAL_SECONDS = 10.0
"""Minimum age (seconds) of our last status write before a progress-only change is written. In
production a clone takes minutes and an IP 30-60 s after power-on, so ``WaitingForIPAddress``
is written as before (at the latest this long after the clone started, for a fast linked
clone); a machine whose whole clone-to-IP sequence is shorter goes from ``Cloning`` to
``Provisioned`` in one write. 10 s rather than 5 s leaves room for a busy vCenter (a loaded
benchmark: the clone, reconfigure and power-on tasks queue) without hiding a slow IP for long."""
REQUEUE_MARGIN_SECONDS = 0.1
"""Added to the remaining wait so the requeued reconcile finds the interval elapsed (the
workqueue's timer and the wall clock are different clocks)."""


def _conditions_but_ready(status: VSphereMachineStatus) -> list[tuple[str, str, str, str]]:
    # observedGeneration and lastTransitionTime left out: a generation bump by our own
    # spec.providerID write is not a change worth a write of its own.
    return sorted((c.type, c.status.value, c.reason, c.message) for c in status.conditions or () if c.type != READY)


def last_status_write(stored: VSphereMachineStatus, clone_started: datetime | None) -> datetime | None:
    """A restart-safe lower bound (timezone-aware) of when our last status write happened: the
    later of ``Ready.lastTransitionTime`` and ``clone_started`` (the ``Cloning ... since`` time);
    None without a Ready condition."""
    ready = get_condition(stored.conditions, READY)
    if ready is None:
        return None
    if clone_started is not None and clone_started > ready.last_transition_time:
        return clone_started
    return ready.last_transition_time


def progress_write_wait(stored: VSphereMachineStatus | None, desired: VSphereMachineStatus, now: datetime,
                        clone_started: datetime | None, interval: float = PROGRESS_WRITE_INTERVAL_SECONDS) -> float | None:
    """Seconds to wait before writing ``desired`` over ``stored`` (the module docstring's rule),
    or None to write now. Deferred only when both Ready conditions are False with a progress
    reason, the desired one is not ``Cloning``, no other condition changes, and the last status write (``last_status_write``) is 0 to ``interval`` s before
    ``now``. The wait includes ``REQUEUE_MARGIN_SECONDS``."""
    if stored is None:
        return None
    old = get_condition(stored.conditions, READY)
    new = get_condition(desired.conditions, READY)
    if old is None or new is None:
        return None
    if old.status is not ConditionStatus.FALSE or new.status is not ConditionStatus.FALSE:
        return None
    if old.reason not in PROGRESS_REASONS or new.reason not in PROGRESS_REASONS or new.reason == VSphereMachineReason.CLONING:
        return None
    if _conditions_but_ready(stored) != _conditions_but_ready(desired):
        return None
    last = last_status_write(stored, clone_started)
    if last is None:
        return None
    elapsed = (now - last).total_seconds()
    if not 0 <= elapsed < interval:
        return None
    return interval - elapsed + REQUEUE_MARGIN_SECONDS
