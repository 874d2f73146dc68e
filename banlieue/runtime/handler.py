"""Event handlers: how informer events become reconcile ``Request``s (cr ``pkg/handler``).

Each handler implements the informer's ``ResourceEventHandler`` seam and feeds a queue:
predicates are applied first, tombstones (``DeletedFinalStateUnknown``) are unwrapped, then the
handler maps the object to requests and ``add``s them. ``generic(obj)`` is the entry point for
non-informer sources (backend notifications, timers).

* ``EnqueueRequestForObject``: the object itself (the ``for_`` kind).
* ``EnqueueRequestForOwner``: the owner named in ``metadata.ownerReferences`` (the ``owns`` kinds).
* ``EnqueueRequestsFromMapFunc``: whatever a function returns (``watches``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from banlieue.runtime.event import DeletedFinalStateUnknown, Object
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.log import get_logger
from banlieue.runtime.predicate import Predicate
from banlieue.runtime.reconcile import Request

log = get_logger("runtime.handler")

MapFunc = Callable[[Object], Iterable[Request]]
"""Maps one object to the requests it should trigger (cr ``handler.MapFunc``)."""


class RequestQueue(Protocol):
    """Where handlers put requests: any queue with ``add`` (``WorkQueue[Request]``)."""

    def add(self, item: Request) -> None: ...


def object_key(obj: Object) -> Request | None:
    """``Request(namespace, name)`` of an object, or None when it has no ``metadata.name``."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        return None
    return Request(meta.get("namespace") or "", meta["name"])


class EnqueueHandler:
    """Base of the enqueueing handlers: predicates, tombstones, dedup within one event.

    ``queue``: receives the requests; ``predicates``: all must pass for an event to be enqueued.
    Subclasses implement ``map(obj)`` and set ``map_old_on_update``.
    """

    map_old_on_update = True
    """Whether an update also maps the old object (owner and map-func handlers: yes)."""

    def __init__(self, queue: RequestQueue, predicates: Sequence[Predicate] = ()) -> None:
        self.queue = queue
        self.predicates = tuple(predicates)

    def map(self, obj: Object) -> Iterable[Request]:
        """The requests one object triggers."""
        raise NotImplementedError

    # --- ResourceEventHandler -----------------------------------------------------------------

    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        if all(p.create(obj) for p in self.predicates):
            self._enqueue((obj,))

    def on_update(self, old: Object, new: Object) -> None:
        if all(p.update(old, new) for p in self.predicates):
            self._enqueue((old, new) if self.map_old_on_update else (new,))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            # cr source: unwrap the tombstone (DeleteStateUnknown=true); a tombstone without an
            # object cannot be mapped and is dropped.
            if not obj.obj:
                log.error("tombstone without an object, dropped", key=obj.key)
                return
            obj = obj.obj
        if all(p.delete(obj) for p in self.predicates):
            self._enqueue((obj,))

    def generic(self, obj: Object) -> None:
        """A non-watch event for ``obj`` (channel sources)."""
        if all(p.generic(obj) for p in self.predicates):
            self._enqueue((obj,))

    def _enqueue(self, objs: Iterable[Object]) -> None:
        seen: set[Request] = set()
        for obj in objs:
            for request in self.map(obj):
                if request not in seen:
                    seen.add(request)
                    self.queue.add(request)


class EnqueueRequestForObject(EnqueueHandler):
    """Enqueues ``Request(namespace, name)`` of the event object; for updates of the new object.
    Objects without ``metadata.name`` are logged and dropped (cr ``EnqueueRequestForObject``)."""

    map_old_on_update = False

    def map(self, obj: Object) -> Iterable[Request]:
        request = object_key(obj)
        if request is None:
            log.error("object without metadata.name, dropped", kind=obj.get("kind"))
            return ()
        return (request,)


def _group_of(api_version: str) -> str:
    """The API group of an ``apiVersion``: "" for core ``v1``, else the part before "/"."""
    group, sep, _version = api_version.partition("/")
    return group if sep else ""


class EnqueueRequestForOwner(EnqueueHandler):
    """Enqueues the owners of kind ``owner`` found in ``metadata.ownerReferences``.

    cr ``EnqueueRequestForOwner``: matches on group + kind only (the version is ignored); the
    request namespace is the object's namespace, or "" when the owner kind is cluster-scoped;
    updates enqueue the owners of both old and new objects. ``only_controller=True`` (the
    builder's ``owns`` default) considers only the reference with ``controller: true``.
    """

    def __init__(
        self,
        queue: RequestQueue,
        owner: ResourceKind,
        *,
        only_controller: bool = True,
        predicates: Sequence[Predicate] = (),
    ) -> None:
        super().__init__(queue, predicates)
        self.owner = owner
        self.only_controller = only_controller

    def map(self, obj: Object) -> Iterable[Request]:
        meta: Mapping[str, Any] = obj.get("metadata") or {}
        namespace = (meta.get("namespace") or "") if self.owner.namespaced else ""
        group, kind = self.owner.group_kind
        for ref in meta.get("ownerReferences") or ():
            if self.only_controller and ref.get("controller") is not True:
                continue
            if ref.get("kind") != kind or _group_of(ref.get("apiVersion", "")) != group:
                continue
            if ref.get("name"):
                yield Request(namespace, ref["name"])


class EnqueueRequestsFromMapFunc(EnqueueHandler):
    """Enqueues what ``fn(obj)`` returns; on updates ``fn`` runs on old and new and both result
    sets are enqueued (cr ``EnqueueRequestsFromMapFunc``). An exception in ``fn`` is logged and
    the event dropped: a handler must never break the informer."""

    def __init__(self, queue: RequestQueue, fn: MapFunc, predicates: Sequence[Predicate] = ()) -> None:
        super().__init__(queue, predicates)
        self.fn = fn

    def map(self, obj: Object) -> Iterable[Request]:
        try:
            return list(self.fn(obj))
        except Exception:
            log.exception("map function failed, event dropped", kind=obj.get("kind"))
            return ()
