"""In-memory object storage with one global resourceVersion counter and a bounded event history.

Like etcd behind kube-apiserver: every write takes the next revision from one counter (so
resourceVersions are comparable across kinds, as a string on the wire), and each group resource
keeps a bounded history of events (the watch cache) from which watches resume. Asking for a
revision older than the history window yields ``410 Expired: too old resource version``.

Stored objects are treated as immutable: a write stores a new dict, readers serialize without
copying, and watch events hold references. Lookups are O(1) by (namespace, name); an index by
owner UID serves the garbage collector.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
GroupResource = tuple[str, str]
Key = tuple[str, str]  # (namespace or "", name)

DEFAULT_HISTORY = 10_000


@dataclass(frozen=True)
class Event:
    """One change of one object: type ADDED|MODIFIED|DELETED, the new object, the previous one."""

    rv: int
    type: str
    obj: JSON
    old: JSON | None


@dataclass(eq=False)
class Watcher:
    """A subscriber to one group resource; the watch handler drains ``queue``.

    ``None`` on the queue means "stop" (fault injection or shutdown).
    """

    gr: GroupResource
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def stop(self) -> None:
        """Ask the stream to end (sends the sentinel)."""
        self.closed = True
        self.queue.put_nowait(None)


def key_of(obj: JSON) -> Key:
    """(namespace, name) of ``obj``."""
    md = obj.get("metadata") or {}
    return (md.get("namespace") or "", md.get("name") or "")


class Store:
    """Objects per group resource, the global revision counter, event history and watchers."""

    def __init__(self, history_size: int = DEFAULT_HISTORY) -> None:
        self.rv = 1
        self.history_size = history_size
        self._objects: dict[GroupResource, dict[Key, JSON]] = {}
        self._history: dict[GroupResource, deque[Event]] = {}
        # Highest revision no longer in the history of a group resource (watch from <= it: 410).
        self._compacted: dict[GroupResource, int] = {}
        self._watchers: dict[GroupResource, set[Watcher]] = {}
        self._by_owner: dict[str, set[tuple[GroupResource, Key]]] = {}
        self._by_uid: dict[str, tuple[GroupResource, Key]] = {}

    # -- revisions -----------------------------------------------------------------------------

    def next_rv(self) -> int:
        """Take the next revision."""
        self.rv += 1
        return self.rv

    # -- reads ---------------------------------------------------------------------------------

    def get(self, gr: GroupResource, namespace: str, name: str) -> JSON | None:
        """The stored object or None (O(1))."""
        return self._objects.get(gr, {}).get((namespace, name))

    def items(self, gr: GroupResource, namespace: str | None = None) -> Iterator[tuple[Key, JSON]]:
        """(key, object) pairs of ``gr`` in key order, optionally only in ``namespace``."""
        objs = self._objects.get(gr, {})
        for k in sorted(objs):
            if namespace is None or k[0] == namespace:
                yield k, objs[k]

    def count(self, gr: GroupResource) -> int:
        """Number of stored objects of ``gr``."""
        return len(self._objects.get(gr, {}))

    def group_resources(self) -> list[GroupResource]:
        """Every group resource that holds objects."""
        return [gr for gr, objs in self._objects.items() if objs]

    def by_uid(self, uid: str) -> tuple[GroupResource, JSON] | None:
        """(group resource, object) with metadata.uid ``uid`` or None (O(1))."""
        loc = self._by_uid.get(uid)
        if loc is None:
            return None
        obj = self.get(loc[0], *loc[1])
        return None if obj is None else (loc[0], obj)

    def namespaced_items(self, namespace: str) -> list[tuple[GroupResource, JSON]]:
        """Every object in ``namespace`` across group resources."""
        out = []
        for gr, objs in self._objects.items():
            out += [(gr, o) for (ns, _), o in objs.items() if ns == namespace]
        return out

    def dependents(self, owner_uid: str) -> list[tuple[GroupResource, JSON]]:
        """Objects whose ownerReferences name ``owner_uid``."""
        out = []
        for gr, key in list(self._by_owner.get(owner_uid, ())):
            obj = self.get(gr, *key)
            if obj is not None:
                out.append((gr, obj))
        return out

    # -- writes --------------------------------------------------------------------------------

    def put(self, gr: GroupResource, obj: JSON, rv: int) -> Event:
        """Store ``obj`` (whose metadata.resourceVersion is already ``str(rv)``); emit ADDED/MODIFIED."""
        key = key_of(obj)
        objs = self._objects.setdefault(gr, {})
        old = objs.get(key)
        objs[key] = obj
        self._by_uid[obj["metadata"].get("uid", "")] = (gr, key)
        self._index_owners(gr, key, old, obj)
        ev = Event(rv, "MODIFIED" if old is not None else "ADDED", obj, old)
        self._publish(gr, ev)
        return ev

    def remove(self, gr: GroupResource, obj: JSON, rv: int) -> Event:
        """Remove the object keyed like ``obj``; ``obj`` is its final state (with ``str(rv)``)."""
        key = key_of(obj)
        objs = self._objects.setdefault(gr, {})
        old = objs.pop(key, None)
        self._by_uid.pop(obj["metadata"].get("uid", ""), None)
        self._index_owners(gr, key, old, None)
        ev = Event(rv, "DELETED", obj, old)
        self._publish(gr, ev)
        return ev

    def drop_group_resource(self, gr: GroupResource) -> list[JSON]:
        """Forget every object of ``gr`` without events (caller emits them); returns them."""
        objs = self._objects.pop(gr, {})
        for key, obj in objs.items():
            self._by_uid.pop(obj["metadata"].get("uid", ""), None)
            self._index_owners(gr, key, obj, None)
        return list(objs.values())

    def _index_owners(self, gr: GroupResource, key: Key, old: JSON | None, new: JSON | None) -> None:
        old_uids = {r.get("uid") for r in (old or {}).get("metadata", {}).get("ownerReferences") or []}
        new_uids = {r.get("uid") for r in (new or {}).get("metadata", {}).get("ownerReferences") or []}
        if old_uids == new_uids:
            return
        for uid in old_uids - new_uids:
            s = self._by_owner.get(str(uid))
            if s is not None:
                s.discard((gr, key))
                if not s:
                    del self._by_owner[str(uid)]
        for uid in new_uids - old_uids:
            self._by_owner.setdefault(str(uid), set()).add((gr, key))

    # -- history and watchers ------------------------------------------------------------------

    def _publish(self, gr: GroupResource, ev: Event) -> None:
        hist = self._history.get(gr)
        if hist is None:
            hist = self._history[gr] = deque()
        hist.append(ev)
        if len(hist) > self.history_size:
            dropped = hist.popleft()
            self._compacted[gr] = dropped.rv
        for w in self._watchers.get(gr, ()):
            w.queue.put_nowait(ev)

    def compacted_rv(self, gr: GroupResource) -> int:
        """Highest revision of ``gr`` no longer replayable (0 if the history is complete)."""
        return self._compacted.get(gr, 0)

    def compact(self) -> None:
        """Drop all event history (like an etcd compaction): every resourceVersion handed out so far
        becomes too old, so watches and continue tokens from them get 410."""
        mark = self.next_rv()
        for gr, hist in self._history.items():
            hist.clear()
            self._compacted[gr] = mark
        for gr in list(self._objects):
            self._compacted[gr] = mark
        self._compacted[("", "*")] = mark

    def global_compacted(self) -> int:
        """The revision of the last full compaction (0 if never)."""
        return self._compacted.get(("", "*"), 0)

    def events_since(self, gr: GroupResource, rv: int) -> list[Event] | None:
        """Events of ``gr`` with revision > ``rv``, or None when ``rv`` is older than the history."""
        if rv < max(self.compacted_rv(gr), self.global_compacted()):
            return None
        hist = self._history.get(gr, ())
        # Histories are short-ish and appended in order: scan from the right.
        out: list[Event] = []
        for ev in reversed(hist):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def items_at(self, gr: GroupResource, rv: int, namespace: str | None = None) -> list[tuple[Key, JSON]] | None:
        """(key, object) pairs of ``gr`` as they were at revision ``rv`` (key order), or None when
        ``rv`` is older than the history (a consistent snapshot for continue tokens and
        ``resourceVersionMatch=Exact``, rebuilt by undoing later events)."""
        if rv >= self.rv:
            return list(self.items(gr, namespace))
        events = self.events_since(gr, rv)
        if events is None:
            return None
        objs = dict(self._objects.get(gr, {}))
        for ev in reversed(events):
            key = key_of(ev.obj)
            if ev.type == "ADDED" or ev.old is None:
                objs.pop(key, None)
            else:
                objs[key] = ev.old
        return [(k, objs[k]) for k in sorted(objs) if namespace is None or k[0] == namespace]

    def subscribe(self, gr: GroupResource) -> Watcher:
        """Register a watcher; every later event of ``gr`` lands on its queue."""
        w = Watcher(gr)
        self._watchers.setdefault(gr, set()).add(w)
        return w

    def unsubscribe(self, w: Watcher) -> None:
        """Forget ``w``."""
        s = self._watchers.get(w.gr)
        if s is not None:
            s.discard(w)

    def watchers(self) -> list[Watcher]:
        """Every open watcher."""
        return [w for s in self._watchers.values() for w in s]
