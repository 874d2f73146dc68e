"""The informer store: an ``Indexer`` per kind, and ``Cache``, the manager-level reader.

client-go ``tools/cache`` (thread_safe_store.go, index.go): objects keyed "ns/name" (or "name"
for cluster-scoped kinds), indices ``name -> value -> {keys}``, ``add_indexer`` after items exist.

Representation (memory floor: <= 4 KiB RSS per cached object): each object is kept as compact
JSON bytes with ``metadata.managedFields`` stripped, beside its resourceVersion and its index
values. A plain ``json.loads`` dict of a ~2.4 KB VirtualMachine costs ~14 KiB; the bytes ~2 KiB.
Every read decodes a fresh dict, so a caller can never mutate the cache (controller-runtime
hands out deep copies for the same reason). Cost: one ``json.loads`` per object read.

Reads of many objects (``list``, ``by_index``) return ``DecodedObjects``: the stored bytes as
they were at the call, decoded one object at a time as the caller iterates. Decoding them all
at once held every object of the list as dicts (~14 KiB each) together: a reconcile listing
10,000 VSphereMachines, or a ``/metrics`` scrape counting 10,000 VirtualMachines, raised the
process's memory by ~140 MiB each time, and CPython's allocator keeps such high-water marks.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

from banlieue.runtime.event import DeletedFinalStateUnknown, Object
from banlieue.runtime.kinds import ResourceKind

IndexFunc = Callable[[Object], list[str]]
NAMESPACE_INDEX = "namespace"
OWNER_UID_INDEX = "ownerUID"
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


def meta_namespace_key(obj: Object) -> str:
    """client-go ``MetaNamespaceKeyFunc``: "<namespace>/<name>", or "<name>" without a namespace."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


class KeyedStateHandler:
    """A ResourceEventHandler for state kept per object key (:func:`meta_namespace_key`): adds
    and updates call ``observe(key, obj)`` with the newest object, deletions ``forget(key)`` (a
    ``DeletedFinalStateUnknown`` by its own key). Subclasses define both."""

    def observe(self, key: str, obj: Object) -> None:
        raise NotImplementedError

    def forget(self, key: str) -> None:
        raise NotImplementedError

    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        self.observe(meta_namespace_key(obj), obj)

    def on_update(self, old: Object, new: Object) -> None:
        self.observe(meta_namespace_key(new), new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.forget(obj.key if isinstance(obj, DeletedFinalStateUnknown) else meta_namespace_key(obj))


def namespace_index(obj: Object) -> builtins.list[str]:
    """client-go ``MetaNamespaceIndexFunc``: [namespace] ([""] when cluster-scoped)."""
    return [obj["metadata"].get("namespace") or ""]


def owner_uid_index(obj: Object) -> builtins.list[str]:
    """UIDs of all ``metadata.ownerReferences`` (what EnqueueRequestForOwner and GC look up)."""
    return [ref["uid"] for ref in obj["metadata"].get("ownerReferences") or [] if "uid" in ref]


def strip_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``obj`` without ``metadata.managedFields`` (cr DefaultTransform)."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return dict(obj)
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


class DecodedObjects(Sequence[Object]):
    """A snapshot of stored objects (their compact JSON bytes at the time of the read), each
    decoded to a fresh dict when accessed: iterating holds one decoded object at a time.

    A ``Sequence``: ``len``, indexing, slicing (another ``DecodedObjects``), iteration. Each
    access decodes anew, so two accesses to one position give equal but distinct dicts, and a
    change to a returned dict is not kept (copy to a ``list`` to keep changes). The snapshot
    does not follow later changes of the store.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Iterable[bytes]) -> None:
        self._data: tuple[bytes, ...] = tuple(data)

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, index: int) -> Object: ...

    @overload
    def __getitem__(self, index: slice) -> DecodedObjects: ...

    def __getitem__(self, index: int | slice) -> Object | DecodedObjects:
        if isinstance(index, slice):
            return DecodedObjects(self._data[index])
        obj: Object = json.loads(self._data[index])
        return obj

    def __iter__(self) -> Iterator[Object]:
        for data in self._data:
            obj: Object = json.loads(data)
            yield obj

    def __repr__(self) -> str:
        return f"DecodedObjects({len(self._data)} objects)"


class _Entry:
    __slots__ = ("data", "index_values", "rv")

    def __init__(self, data: bytes, rv: str, index_values: tuple[tuple[str, ...], ...]) -> None:
        self.data = data
        self.rv = rv
        self.index_values = index_values


class Indexer:
    """A keyed, indexed object store (single event loop; no locking).

    Built-in indices: "namespace" and "ownerUID"; ``indexers`` adds more. Reads return fresh
    dicts (safe to mutate, never shared with the cache).
    """

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._funcs: dict[str, IndexFunc] = {NAMESPACE_INDEX: namespace_index, OWNER_UID_INDEX: owner_uid_index}
        self._funcs.update(indexers or {})
        self._names: list[str] = list(self._funcs)
        self._items: dict[str, _Entry] = {}
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._names}

    # --- writes (the informer's) ------------------------------------------------------
    def _values(self, obj: Object) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(dict.fromkeys(self._funcs[name](obj))) for name in self._names)

    def _unindex(self, key: str, entry: _Entry) -> None:
        for name, values in zip(self._names, entry.index_values, strict=True):
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index(self, key: str, entry: _Entry) -> None:
        for name, values in zip(self._names, entry.index_values, strict=True):
            index = self._indices[name]
            for value in values:
                index.setdefault(value, set()).add(key)

    def put(self, obj: Object) -> bytes | None:
        """Add or replace ``obj`` (managedFields already stripped); returns the previous
        encoded state or None. Equal bytes mean the object did not change."""
        key = meta_namespace_key(obj)
        data = _encode(obj).encode()
        old = self._items.get(key)
        if old is not None:
            if old.data == data:
                return old.data
            self._unindex(key, old)
        entry = _Entry(data, str(obj["metadata"].get("resourceVersion", "")), self._values(obj))
        self._items[key] = entry
        self._index(key, entry)
        return old.data if old is not None else None

    def add(self, obj: Object) -> None:
        """client-go Store.Add."""
        self.put(obj)

    def update(self, obj: Object) -> None:
        """client-go Store.Update."""
        self.put(obj)

    def delete(self, key: str) -> Object | None:
        """Remove ``key``; returns the last stored state or None."""
        entry = self._items.pop(key, None)
        if entry is None:
            return None
        self._unindex(key, entry)
        obj: Object = json.loads(entry.data)
        return obj

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """client-go AddIndexers: a new index, computed for items already stored.
        Raises ValueError when ``name`` exists."""
        if name in self._funcs:
            raise ValueError(f"indexer {name!r} already exists")
        self._funcs[name] = fn
        self._names.append(name)
        self._indices[name] = {}
        for key, entry in self._items.items():
            values = tuple(dict.fromkeys(fn(json.loads(entry.data))))
            entry.index_values = (*entry.index_values, values)
            for value in values:
                self._indices[name].setdefault(value, set()).add(key)

    # --- reads ------------------------------------------------------------------------
    def get(self, key: str) -> Object | None:
        """The object at "ns/name" (or "name"), decoded fresh; None when absent."""
        entry = self._items.get(key)
        return None if entry is None else json.loads(entry.data)

    def get_by(self, namespace: str | None, name: str) -> Object | None:
        """``get`` by namespace and name (namespace None/"" for cluster-scoped)."""
        return self.get(f"{namespace}/{name}" if namespace else name)

    def get_raw(self, key: str) -> bytes | None:
        """The stored compact JSON (no decode), None when absent."""
        entry = self._items.get(key)
        return None if entry is None else entry.data

    def resource_version(self, key: str) -> str | None:
        """The stored object's resourceVersion without decoding it."""
        entry = self._items.get(key)
        return None if entry is None else entry.rv

    def list(self) -> DecodedObjects:
        """All objects, each decoded fresh as it is accessed (see ``DecodedObjects``)."""
        return DecodedObjects(e.data for e in self._items.values())

    def list_keys(self) -> builtins.list[str]:
        """All keys."""
        return builtins.list(self._items)

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        """client-go IndexKeys: keys whose index ``name`` has ``value``. KeyError for an unknown index."""
        return sorted(self._indices[name].get(value, ()))

    def by_index(self, name: str, value: str) -> DecodedObjects:
        """client-go ByIndex: objects whose index ``name`` has ``value`` (by key order), each
        decoded fresh as it is accessed (see ``DecodedObjects``)."""
        return DecodedObjects(self._items[k].data for k in self.index_keys(name, value))

    def list_index_func_values(self, name: str) -> builtins.list[str]:
        """client-go ListIndexFuncValues: the values present in index ``name``."""
        return builtins.list(self._indices[name])

    @property
    def indexer_names(self) -> builtins.list[str]:
        return builtins.list(self._names)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(builtins.list(self._items))


class SyncedStore(Protocol):
    """What Cache needs from an informer: its store and whether its first list is done."""

    @property
    def store(self) -> Indexer: ...

    def has_synced(self) -> bool: ...


def _labels_match(obj: Object, selector: Mapping[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class Cache:
    """Reads across kinds from the manager's shared informers (controller-runtime
    ``cache.Cache``). ``informer_for(kind)`` returns the (possibly new) informer of a kind.
    Reads never contact the API server; before ``wait_for_cache_sync`` they may be incomplete.
    """

    def __init__(self, informer_for: Callable[[ResourceKind], SyncedStore], informers: Callable[[], Iterable[SyncedStore]]) -> None:
        self._informer_for = informer_for
        self._informers = informers

    def get(self, kind: ResourceKind, name: str, namespace: str | None = None) -> Object | None:
        """One object (a fresh dict) or None."""
        return self._informer_for(kind).store.get_by(namespace if kind.namespaced else None, name)

    def list(self, kind: ResourceKind, namespace: str | None = None,
             label_selector: Mapping[str, str] | None = None) -> builtins.list[Object]:
        """Objects of ``kind`` in ``namespace`` (all when None) whose labels equal every entry
        of ``label_selector``, all decoded (a list). To go through many objects one at a time,
        use :meth:`iter_objects`."""
        return builtins.list(self.iter_objects(kind, namespace, label_selector))

    def iter_objects(self, kind: ResourceKind, namespace: str | None = None,
                     label_selector: Mapping[str, str] | None = None) -> Iterator[Object]:
        """:meth:`list` one object at a time: the stored objects as they are at the call, each
        decoded as the iteration reaches it (the memory of one decoded object, not of all)."""
        store = self._informer_for(kind).store
        objs = store.by_index(NAMESPACE_INDEX, namespace) if namespace and kind.namespaced else store.list()
        return (o for o in objs if _labels_match(o, label_selector)) if label_selector else iter(objs)

    def by_index(self, kind: ResourceKind, index: str, value: str) -> DecodedObjects:
        """Objects of ``kind`` with ``value`` in index ``index`` (a ``DecodedObjects`` snapshot)."""
        return self._informer_for(kind).store.by_index(index, value)

    def index_keys(self, kind: ResourceKind, index: str, value: str) -> builtins.list[str]:
        """Keys (``namespace/name``, or ``name`` for cluster-scoped kinds) of the objects of
        ``kind`` with ``value`` in index ``index``, without decoding them (client-go
        ``Indexer.IndexKeys``). KeyError for an unknown index."""
        return self._informer_for(kind).store.index_keys(index, value)

    def resource_version(self, kind: ResourceKind, key: str) -> str | None:
        """The cached object's resourceVersion by key (see :meth:`index_keys`), without decoding
        it; None when absent. Lets a reader reuse what it derived from an unchanged object."""
        return self._informer_for(kind).store.resource_version(key)

    def add_indexer(self, kind: ResourceKind, name: str, fn: IndexFunc) -> None:
        """Register index ``name`` on the kind's store (works after items exist)."""
        self._informer_for(kind).store.add_indexer(name, fn)

    async def wait_for_cache_sync(self, timeout: float) -> bool:
        """True once every informer has synced; False after ``timeout`` seconds. Polls every
        100 ms (client-go WaitForCacheSync)."""
        deadline = time.monotonic() + timeout
        while not all(i.has_synced() for i in self._informers()):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True
