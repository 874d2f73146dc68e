"""Informer notifications: the ResourceEventHandler seam between informers and controllers.

client-go ``tools/cache``: ``ResourceEventHandler`` (OnAdd/OnUpdate/OnDelete) and
``DeletedFinalStateUnknown`` (a tombstone for a delete missed across a relist).
Objects are plain JSON dicts the receiver must not mutate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Object = Mapping[str, Any]
"""A Kubernetes object as decoded JSON. Objects handed out by the cache are read-only."""


def nested(obj: Object | None, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a level is missing or not a mapping
    (``unstructured.NestedFieldNoCopy`` without the found flag)."""
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """Tombstone: ``key`` ("ns/name" or "name") vanished while the watch was down.

    ``obj`` is the last known state (may be stale). client-go: cache.DeletedFinalStateUnknown.
    """

    key: str
    obj: Object


class ResourceEventHandler(Protocol):
    """Receives an informer's notifications in order, per informer.

    client-go semantics: ``on_add(obj, is_in_initial_list)`` for objects of the initial list and
    new objects; ``on_update(old, new)`` (old and new may share a resourceVersion on resync);
    ``on_delete(obj)`` where ``obj`` may be a ``DeletedFinalStateUnknown``.
    Handlers must not block: they enqueue and return.
    """

    def on_add(self, obj: Object, is_in_initial_list: bool) -> None: ...

    def on_update(self, old: Object, new: Object) -> None: ...

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None: ...
