"""The controller builder: controller-runtime ``pkg/builder`` as a fluent sentence.

    controller = (
        ControllerBuilder(mgr)
        .named("virtualmachine")
        .for_(VM_KIND, predicates=[GenerationChangedPredicate()])
        .owns(VSM_KIND)
        .watches(SECRET_KIND, secret_to_vms, predicates=[...])
        .with_options(max_concurrent_reconciles=2)
        .complete(reconciler)
    )

The builder talks to the manager only through ``ManagerLike`` (below): ``get_informer(kind)``
returns an ``InformerLike`` the builder registers handlers on (and whose ``has_synced`` the
controller waits for), and ``add(controller)`` hands the finished controller over as a runnable.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from banlieue.runtime.clock import Clock
from banlieue.runtime.controller import CACHE_SYNC_TIMEOUT, Controller
from banlieue.runtime.event import Object, ResourceEventHandler
from banlieue.runtime.handler import (
    EnqueueHandler,
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
    MapFunc,
)
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.predicate import Predicate
from banlieue.runtime.rate_limiters import RateLimiter
from banlieue.runtime.reconcile import Reconciler, Request


@runtime_checkable
class InformerLike(Protocol):
    """What the builder needs from an informer (B2's Informer implements it)."""

    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        """Deliver every later event (and, if already listed, the current objects as adds)."""
        ...

    def has_synced(self) -> bool:
        """True once the initial list has been delivered to the handlers."""
        ...


class Runnable(Protocol):
    """What the manager runs: ``start()`` runs until cancelled; ``need_leader_election`` says
    whether it may run only on the leader (controllers: True)."""

    need_leader_election: bool

    async def start(self) -> None: ...


class ManagerLike(Protocol):
    """The manager seam the builder uses (B2's Manager implements it)."""

    def get_informer(self, kind: ResourceKind) -> InformerLike:
        """The shared informer of ``kind`` (created on first request; started with the manager)."""
        ...

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` with the manager (on the leader when it needs leader election)."""
        ...


ChannelSource = InformerLike | AsyncIterable[Object | Request]
"""A non-informer source: either an ``InformerLike`` object (``add_event_handler`` and
``has_synced``; return True from the latter if there is nothing to sync), or an async iterable yielding objects (mapped like informer objects, delivered
as generic events) or ready-made ``Request``s (enqueued as they are)."""


@dataclass
class _Watch:
    kind: ResourceKind
    handler: str  # "for", "owns", "map"
    predicates: tuple[Predicate, ...]
    map_fn: MapFunc | None = None
    only_controller: bool = True


class ControllerBuilder:
    """Fluent builder of a ``Controller`` wired to a manager's informers (cr ``builder``).

    Raises ``ValueError`` from ``complete`` when ``for_`` is missing (and no name was given) or
    called twice.
    """

    def __init__(self, mgr: ManagerLike) -> None:
        self._mgr = mgr
        self._name: str | None = None
        self._for: _Watch | None = None
        self._watches: list[_Watch] = []
        self._channels: list[tuple[ChannelSource, MapFunc | None, tuple[Predicate, ...]]] = []
        self._global_predicates: list[Predicate] = []
        self._options: dict[str, Any] = {}

    def named(self, name: str) -> ControllerBuilder:
        """The controller name (metrics, logs). Default: the ``for_`` kind in lower case."""
        self._name = name
        return self

    def for_(self, kind: ResourceKind, *, predicates: Sequence[Predicate] = ()) -> ControllerBuilder:
        """The reconciled kind: its events enqueue the object itself (EnqueueRequestForObject)."""
        if self._for is not None:
            raise ValueError("for_ may only be called once")
        self._for = _Watch(kind, "for", tuple(predicates))
        return self

    def owns(
        self, kind: ResourceKind, *, predicates: Sequence[Predicate] = (), only_controller: bool = True
    ) -> ControllerBuilder:
        """A kind created by the reconciler: its events enqueue the owning ``for_`` object found
        in ownerReferences (only the ``controller: true`` reference unless
        ``only_controller=False``, cr ``MatchEveryOwner``)."""
        self._watches.append(_Watch(kind, "owns", tuple(predicates), only_controller=only_controller))
        return self

    def watches(
        self, kind: ResourceKind, map_fn: MapFunc, *, predicates: Sequence[Predicate] = ()
    ) -> ControllerBuilder:
        """Any other kind: ``map_fn(obj)`` says which requests an event triggers. ``map_fn`` is
        a plain function (it reads from caches, it does not await); ``TypeError`` otherwise."""
        _check_map_fn(map_fn)
        self._watches.append(_Watch(kind, "map", tuple(predicates), map_fn=map_fn))
        return self

    def watches_channel(
        self, source: ChannelSource, map_fn: MapFunc | None = None, *, predicates: Sequence[Predicate] = ()
    ) -> ControllerBuilder:
        """A non-informer source (vSphere property-collector updates, timers), see
        ``ChannelSource``. Objects go through ``map_fn`` (default: the object's own request) and
        the ``generic`` predicates; yielded ``Request``s are enqueued directly. An async iterable
        is consumed by a task that runs while the controller runs."""
        if map_fn is not None:
            _check_map_fn(map_fn)
        self._channels.append((source, map_fn, tuple(predicates)))
        return self

    def with_event_filter(self, predicate: Predicate) -> ControllerBuilder:
        """A predicate applied to every watch of this controller (cr ``WithEventFilter``)."""
        self._global_predicates.append(predicate)
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        rate_limiter: RateLimiter[Request] | None = None,
        clock: Clock | None = None,
        recover_panic: bool | None = None,
        cache_sync_timeout: float | None = None,
        need_leader_election: bool | None = None,
        reconciliation_timeout: float | None = None,
    ) -> ControllerBuilder:
        """Controller options (see ``Controller``); None keeps the default."""
        given = {
            "max_concurrent_reconciles": max_concurrent_reconciles,
            "rate_limiter": rate_limiter,
            "clock": clock,
            "recover_panic": recover_panic,
            "cache_sync_timeout": cache_sync_timeout,
            "need_leader_election": need_leader_election,
            "reconciliation_timeout": reconciliation_timeout,
        }
        self._options.update({k: v for k, v in given.items() if v is not None})
        return self

    def complete(self, reconciler: Reconciler) -> Controller:
        """Build the controller, register its handlers on the manager's informers, add it to the
        manager, and return it."""
        if self._for is None:
            raise ValueError("for_ must be called before complete")
        name = self._name or self._for.kind.kind.lower()
        controller = Controller(
            name,
            reconciler,
            max_concurrent_reconciles=self._options.get("max_concurrent_reconciles", 1),
            rate_limiter=self._options.get("rate_limiter"),
            clock=self._options.get("clock"),
            recover_panic=self._options.get("recover_panic", True),
            cache_sync_timeout=self._options.get("cache_sync_timeout", CACHE_SYNC_TIMEOUT),
            need_leader_election=self._options.get("need_leader_election", True),
            reconciliation_timeout=self._options.get("reconciliation_timeout"),
        )
        queue = controller.queue
        owner = self._for.kind
        for watch in (self._for, *self._watches):
            predicates = (*self._global_predicates, *watch.predicates)
            handler: EnqueueHandler
            if watch.handler == "for":
                handler = EnqueueRequestForObject(queue, predicates)
            elif watch.handler == "owns":
                handler = EnqueueRequestForOwner(
                    queue, owner, only_controller=watch.only_controller, predicates=predicates
                )
            else:
                assert watch.map_fn is not None
                handler = EnqueueRequestsFromMapFunc(queue, watch.map_fn, predicates)
            informer = self._mgr.get_informer(watch.kind)
            informer.add_event_handler(handler)
            controller.add_sync_check(informer.has_synced, f"kind source: {watch.kind}")
        for source, map_fn, own_predicates in self._channels:
            self._add_channel(controller, source, map_fn, (*self._global_predicates, *own_predicates))
        self._mgr.add(controller)
        return controller

    @staticmethod
    def _add_channel(
        controller: Controller,
        source: ChannelSource,
        map_fn: MapFunc | None,
        predicates: tuple[Predicate, ...],
    ) -> None:
        queue = controller.queue
        handler: EnqueueHandler = (
            EnqueueRequestForObject(queue, predicates)
            if map_fn is None
            else EnqueueRequestsFromMapFunc(queue, map_fn, predicates)
        )
        if isinstance(source, InformerLike):
            source.add_event_handler(handler)
            controller.add_sync_check(source.has_synced, f"channel source: {type(source).__name__}")
            return
        if not isinstance(source, AsyncIterable):
            raise TypeError(f"unsupported channel source {type(source).__name__}")
        iterable = source

        async def run() -> None:
            async for item in iterable:
                if isinstance(item, Request):
                    queue.add(item)
                else:
                    handler.generic(item)

        controller.add_source(run, f"channel source: {type(source).__name__}")


def _check_map_fn(map_fn: MapFunc) -> None:
    if inspect.iscoroutinefunction(map_fn):
        raise TypeError("map functions must be plain functions (read caches, do not await)")
