"""Per-vCenter cap on the controller workers held by backend calls (docs/operations.md,
"Per-vCenter worker cap").

All vCenters share one controller's workers (``max_concurrent_reconciles``). A reconcile that
talks to a slow vCenter holds its worker for the whole clone + reconfigure + power-on, so
enough of them starve every other vCenter. ``VCenterSlots`` bounds how many workers one vCenter
may hold at once: a reconcile takes a slot before its first backend call and, when none is
free, requeues instead of waiting (the worker goes back to the pool for other vCenters).

Single event loop, no awaits inside: ``try_acquire`` / ``release`` need no lock.
"""

from __future__ import annotations

__all__ = ["VCenterSlots", "cap_for_workers"]


def cap_for_workers(workers: int) -> int:
    """Slots per vCenter for a controller with ``workers`` workers: ``max(1, workers // 2)``,
    so one vCenter never holds more than half the workers (and always at least one)."""
    return max(1, workers // 2)


class VCenterSlots:
    """Counting slots per vCenter key (the Connection's ``endpoint``), ``cap`` per key.

    ``try_acquire(key) -> bool`` never waits; every True must be paired with one
    ``release(key)`` (in a ``finally``). Raises ValueError for ``cap < 1`` and RuntimeError on a
    release without a matching acquire.
    """

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self._held: dict[str, int] = {}

    def held(self, key: str) -> int:
        """Slots currently held for ``key``."""
        return self._held.get(key, 0)

    def try_acquire(self, key: str) -> bool:
        """Take a slot for ``key`` if fewer than ``cap`` are held; False (nothing taken) if not."""
        held = self._held.get(key, 0)
        if held >= self.cap:
            return False
        self._held[key] = held + 1
        return True

    def release(self, key: str) -> None:
        """Give back one slot taken by ``try_acquire(key)``."""
        held = self._held.get(key, 0)
        if held <= 0:
            raise RuntimeError(f"release of {key!r} without a held slot")
        if held == 1:
            del self._held[key]  # no entry per vCenter ever seen: the table stays small
        else:
            self._held[key] = held - 1
