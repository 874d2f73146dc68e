"""What the VSphereMachine controller wrote or recorded itself, by object UID (provider role).

``recordable`` filters one reconcile's Events: Ready transitions only on a real change. Two
uses of ``OwnWrites``, both about the informer cache lagging behind this process's own writes:

- ``OwnWrites.cache_behind(obj)``: whether a cached copy may predate a write this process made
  (the cache has not yet delivered the ``resourceVersion`` of our last write, nor one the server
  returned to a later GET). The reconciler then reads the object from the API server instead:
  a reconcile must never decide, and write a status, from a copy older than what it last wrote
  (a stale copy once overwrote a newer status with ``Cloning`` and no ``instanceUUID``).
  Resource versions are compared for equality only (Kubernetes API conventions: opaque).
- ``OwnWrites.predicate()``: drops the informer update caused by our own status write, so a
  status write never re-enqueues the machine at once and bypasses the rate limiter's backoff
  (controller-runtime's ``GenerationChangedPredicate`` idea, narrowed to our own status writes:
  an update whose generation, labels, annotations, finalizers, owner references or
  deletionTimestamp changed always passes, as do creates, deletes and anyone else's writes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from banlieue.reconcilers.vspheremachine.decide import Event
from banlieue.runtime.event import Object
from banlieue.runtime.predicate import Predicate

KEEP_STATUS_WRITES = 8
"""Resource versions of our own status writes remembered per object (their watch events may
arrive after several more writes of one reconcile)."""
_METADATA_THAT_MATTERS = ("generation", "labels", "annotations", "finalizers", "ownerReferences", "deletionTimestamp")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class OwnWrites:
    """Per UID: the resourceVersion the cache must reach before it is as new as our last write,
    and the resourceVersions of our recent status writes. Single event loop; no locking."""

    def __init__(self) -> None:
        self._fresh: dict[str, str] = {}
        self._status: dict[str, deque[str]] = {}

    def wrote(self, obj: Mapping[str, Any], *, status: bool) -> None:
        """Record the object the server returned for one of our writes (``status``: a write of
        the status subresource only)."""
        meta = _meta(obj)
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if not uid or not rv:
            return
        self._fresh[uid] = rv
        if status:
            self._status.setdefault(uid, deque(maxlen=KEEP_STATUS_WRITES)).append(rv)

    def observed(self, obj: Mapping[str, Any]) -> None:
        """The server's current copy (a GET): once the cache shows this version it is at least
        as new as every write recorded before."""
        meta = _meta(obj)
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if uid in self._fresh and rv:
            self._fresh[uid] = rv

    def cache_behind(self, obj: Mapping[str, Any]) -> bool:
        """Whether the cached ``obj`` may predate our last write (see the module docstring)."""
        meta = _meta(obj)
        uid = str(meta.get("uid") or "")
        want = self._fresh.get(uid)
        if want is None:
            return False
        if str(meta.get("resourceVersion") or "") == want:
            del self._fresh[uid]
            return False
        return True

    def forget(self, uid: str) -> None:
        """Drop what is known about ``uid`` (the object is gone or its finalizer removed)."""
        self._fresh.pop(uid, None)
        self._status.pop(uid, None)

    def own_status_update(self, old: Object, new: Object) -> bool:
        """Whether ``old -> new`` is exactly one of our status writes: its resourceVersion is
        one we wrote to the status subresource and no metadata that matters changed."""
        meta_new, meta_old = _meta(new), _meta(old)
        uid, rv = str(meta_new.get("uid") or ""), str(meta_new.get("resourceVersion") or "")
        if self._fresh.get(uid) == rv:
            del self._fresh[uid]  # the cache now holds our last write
        if rv not in self._status.get(uid, ()):
            return False
        return all(meta_old.get(k) == meta_new.get(k) for k in _METADATA_THAT_MATTERS)

    def predicate(self) -> Predicate:
        """The informer predicate of the module docstring (put it first: it also notes when the
        cache catches up with our writes)."""
        return _OwnStatusWrites(self)


class _OwnStatusWrites(Predicate):
    def __init__(self, writes: OwnWrites) -> None:
        self.writes = writes

    def update(self, old: Object, new: Object) -> bool:
        return not self.writes.own_status_update(old, new)

    def delete(self, obj: Object) -> bool:
        self.writes.forget(str(_meta(obj).get("uid") or ""))
        return True


def recordable(events: Sequence[Event], initial: str | None, final: str | None,
               last_recorded: str | None) -> tuple[list[Event], str | None]:
    """The Events of one reconcile worth recording, and the Ready reason last recorded after
    them. Every non-transition Event once (duplicates dropped). A Ready transition
    (``Event.transition``) only when the reconcile changed the Ready reason (``initial`` ->
    ``final``: an attempt that went ``Cloning`` -> ``ConnectFailed`` starting from
    ``ConnectFailed`` changed nothing), never one naming ``initial``, and never the reason
    recorded last for the object again (same reason twice: no new Event), so a failing retry
    loop cannot flood the recorder."""
    out: list[Event] = []
    last = last_recorded
    for event in dict.fromkeys(events):
        if not event.transition:
            out.append(event)
            continue
        if final == initial or event.reason in (initial, last):
            continue
        last = event.reason
        out.append(event)
    return out, last
