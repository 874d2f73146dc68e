"""Read-your-writes over a possibly stale informer cache, for the controllers that write an object
and may reconcile again before their informer has seen that write (the VirtualMachine and
VSphereCluster controllers): without it they would write the same thing twice, or decide from the
state their own write replaced.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from banlieue.runtime.event import Object


@dataclass
class _Written:
    stale: set[str]
    obj: Object | None
    at: float


@dataclass
class ReadYourWrites:
    """Overlays the controller's own last write of an object on a possibly stale cache read.

    ``record(key, before, after)``: the object was ``before`` (None: absent) and is now
    ``after`` (None: deleted). ``view(key, cached)`` returns ``after`` while the cache still
    shows a state that write superseded (a resourceVersion it replaced, or absence after a
    create), else the cache. Entries expire after ``ttl`` seconds, so a missed event can only
    delay, never wedge, a reconcile.
    """

    ttl: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _entries: OrderedDict[str, _Written] = field(default_factory=OrderedDict)

    @staticmethod
    def _rv(obj: Object | None) -> str:
        return "" if obj is None else str(obj.get("metadata", {}).get("resourceVersion", ""))

    def record(self, key: str, before: Object | None, after: Object | None) -> None:
        now = self.clock()
        while self._entries:
            first = next(iter(self._entries.values()))
            if now - first.at < self.ttl:
                break
            self._entries.popitem(last=False)
        prior = self._entries.pop(key, None)
        stale = {self._rv(before)}
        if prior is not None and self._rv(prior.obj) == self._rv(before):
            stale |= prior.stale
        self._entries[key] = _Written(stale, after, now)

    def view(self, key: str, cached: Object | None) -> Object | None:
        entry = self._entries.get(key)
        if entry is None:
            return cached
        if self.clock() - entry.at >= self.ttl or self._rv(cached) not in entry.stale:
            del self._entries[key]
            return cached
        return entry.obj

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def has(self, key: str) -> bool:
        """Whether a recorded write may still override the cache for ``key``."""
        return key in self._entries
