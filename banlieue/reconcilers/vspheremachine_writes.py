"""What the VSphereMachine controller wrote itself, by object UID (provider role).

Use, both about the informer cache lagging behind this process's own writes:

- ``OwnWrites.cache_behind(obj)``: whether a cached copy may predate a write this process made
  (the cache has not yet delivered the ``resourceVersion`` of our last write, nor one the server
  returned to a later GET). The reconciler then reads the object from the API server instead:
  a reconcile must never decide, and write a status, from a copy older than what it last wrote
  (a stale copy once overwrote a newer status with ``Cloning`` and no ``instanceUUID``).
  Resource versions are compared for equality only (Kubernetes API conventions: opaque).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

KEEP_STATUS_WRITES = 8
"""Resource versions of our own status writes remembered per object (their watch events may
arrive after several more writes of one reconcile)."""


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
