"""Release what an unused vCenter endpoint holds (issue 23 case 6).

Every distinct endpoint a Provider ever named used to keep, for the life of the process, a
thread pool (``--vsphere-max-workers`` threads once busy), a reachability probe thread, cached
inventory/template indexes and Prometheus series labelled with the Provider. ``EndpointJanitor``
asks the backend to release them (``VSphereBackend.release_unused``) for every session no
Provider wants any more:

- a Provider's wanted session is the one of its current connection (``connection_for``: its
  endpoint and credentials as the cache has them); older ones (previous endpoint or
  credentials) are released;
- a Provider whose connection cannot be built now (Secret not read yet, missing, invalid) keeps
  all its sessions: nothing is released for a transient reason, and a deleting Provider keeps
  what its machines' deletions may still need;
- a Provider absent from the cache (deleted) wants nothing.

It runs when a Provider is deleted or its ``spec.connection`` changes (after ``DEBOUNCE_SECONDS``,
one pass per burst) and every ``RELEASE_INTERVAL_SECONDS`` (a Secret's rotation changes the
credentials fingerprint without a Provider event). A session released while still in use is
replaced by a fresh login at its next call (``SessionPool.run``), so a wrong guess costs a login,
never a failed call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import structlog

from banlieue.reconcilers.connection import ConnectionConfigError, connection_for
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import PROVIDER
from banlieue.reconcilers.parsed import parse_provider
from banlieue.runtime.event import DeletedFinalStateUnknown, Object

log = structlog.get_logger("banlieue.reconcilers.provider.release")

RELEASE_INTERVAL_SECONDS = 60.0
"""Periodic pass (seconds)."""
DEBOUNCE_SECONDS = 1.0
"""Delay between a Provider deletion / connection change and the pass it triggers (seconds)."""

SessionKey = tuple[str, str, str]


@runtime_checkable
class EndpointReleaser(Protocol):
    """A backend that can release unused sessions and endpoints (``VSphereBackend``)."""

    def release_unused(self, wanted: Callable[[SessionKey], bool]) -> list[str]: ...


class EndpointJanitor:
    """A manager runnable and a Provider ``ResourceEventHandler`` (module docstring)."""

    need_leader_election = False  # sessions are this process's own, leader or not

    def __init__(self, ctx: RoleContext, backend: EndpointReleaser, interval: float = RELEASE_INTERVAL_SECONDS,
                 debounce: float = DEBOUNCE_SECONDS) -> None:
        self.ctx = ctx
        self.backend = backend
        self.interval = interval
        self.debounce = debounce
        self.passes = 0
        """Completed passes (tests)."""
        self.released: list[str] = []
        """Every endpoint label released so far, in order (tests, logs)."""
        self._wake = asyncio.Event()

    def wanted(self) -> Callable[[SessionKey], bool]:
        """The session keys the Providers in the cache want now (module docstring rules)."""
        current: dict[str, SessionKey] = {}
        keep_all: set[str] = set()
        for raw in self.ctx.cache.list(PROVIDER):
            provider = parse_provider(raw)
            if provider is None:
                continue
            name = f"{provider.metadata.namespace}/{provider.metadata.name}"
            try:
                current[name] = connection_for(provider, self.ctx.cache).session_key
            except ConnectionConfigError:
                keep_all.add(name)
        return lambda key: key[0] in keep_all or current.get(key[0]) == key

    def release_now(self) -> list[str]:
        """One pass; returns the endpoint labels released."""
        released = self.backend.release_unused(self.wanted())
        self.passes += 1
        if released:
            self.released.extend(released)
            log.info("released unused vcenter endpoints", endpoints=released)
        return released

    async def start(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
                await asyncio.sleep(self.debounce)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.release_now()
            except Exception:  # a bug here must not end the loop: the next pass retries
                log.exception("releasing unused vcenter endpoints failed")

    # --- ResourceEventHandler of the Provider informer -------------------------------------
    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        return

    def on_update(self, old: Object, new: Object) -> None:
        if _connection(old) != _connection(new):
            self._wake.set()

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self._wake.set()


def _connection(obj: Mapping[str, object]) -> object:
    spec = obj.get("spec")
    return spec.get("connection") if isinstance(spec, Mapping) else None
