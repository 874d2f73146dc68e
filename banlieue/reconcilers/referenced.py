"""Secrets and ConfigMaps read only as referenced: direct GETs by name, never a list or a watch.

Why (issue 23, docs/security.md): an informer on Secrets caches every Secret of the cluster
(kube-system tokens, TLS keys) in the manager's memory and needs cluster-wide ``list``/``watch``
on ``secrets``. The provider role instead GETs exactly the names a Provider
(``credentialsRef``, ``caBundle.secretRef``/``configMapRef``) or a VSphereMachine (bootstrap data
Secret) references, in the Provider's/machine's namespace, and keeps only those objects.

Freshness, and how a changed Secret is noticed:

- ``fetch`` re-GETs an object older than ``max_age`` seconds (default ``MAX_AGE_SECONDS``); every
  reconcile that builds a Connection calls it first, so what a reconcile uses is at most that old.
- ``changes()`` (a controller channel) re-GETs every object still in the store every
  ``resync`` seconds (``--secret-resync-period``, default ``RESYNC_SECONDS``) and yields the
  objects whose ``resourceVersion`` changed, appeared or disappeared since the last read; the
  controllers map them to Providers / VSphereMachines with the map functions they used for the
  Secret informer. A changed Secret is therefore picked up within one resync period (and at once
  by any reconcile that runs after ``max_age``), where a watch would have taken milliseconds.
- Fetches of one object while a GET of it is in flight share that GET (``max_age`` > 0): a
  change of a CAPI Cluster reconciles every machine of the Cluster at once, and each read the
  same bootstrap and credentials Secrets (2 GETs per machine per Cluster change, issue 22).
- An object fetched ``settled`` (a provisioned machine's bootstrap data Secret: CAPI never
  changes a Machine's bootstrap data once written, and the VM has booted with it) is served
  from the store whatever its age and left out of the resync, until a fetch not settled asks
  for it again: with one bootstrap Secret per Machine (CAPI's kubeadm bootstrap), the resync
  cost 2 GETs per machine per minute once everything was provisioned (issue 22: no idle
  request may grow with the number of machines).
- ``reread_soon`` re-GETs one object whatever its age, at most once per ``REREAD_SPACING_SECONDS``
  and always after the call: vCenter refused a login with a Provider's credentials
  (``reconcilers/refused``), so the password was probably rotated and the Secret may hold the new
  one. That is what lets the periodic resync be minutes long: a rotated password is picked up
  at the first login it breaks.
- Entries not asked for by a reconcile for ``IDLE_SECONDS`` are dropped (a deleted Provider's
  Secret does not stay in memory or keep being polled).

A GET that fails for another reason than 404 (403 because a namespaced Role does not cover the
namespace, a 5xx) keeps the previous object if there was one and is logged; the reconcile then
reports ``SecretMissing`` as for a Secret that is not there. The synchronous ``get`` serves the
map functions and the Connection builder (``connection.connection_for``) from the store.

One store per manager ``Cache`` (``referenced(cache)``), like ``last_connection``: every
reconciler of a role shares it, separate managers in one test process never do.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from banlieue.api.provider import Provider
from banlieue.runtime.cache import Cache
from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError, NotFound
from banlieue.runtime.kinds import CONFIG_MAP, SECRET, ResourceKind
from banlieue.runtime.log import get_logger

log = get_logger("banlieue.reconcilers.referenced")

MAX_AGE_SECONDS = 10.0
"""A reconcile re-reads a referenced object older than this (seconds)."""
RESYNC_SECONDS = 300.0
"""Default of ``--secret-resync-period``: every stored object is re-read this often (seconds).

Five minutes, not 30 s (issue 22: the re-reads were half of the idle API requests, 2-2.5 a
minute). What a change waits for at most, when no reconcile reads the object first (every
reconcile that builds a Connection re-reads what is older than ``MAX_AGE_SECONDS``, and those
waiting for a referenced object re-check on their own: a Provider whose Secret is missing or
invalid every ``provider.decide.CONFIG_RECHECK_SECONDS``, a machine whose bootstrap data Secret is
missing every ``vspheremachine.decide.BOOTSTRAP_POLL_SECONDS``): a rotated vCenter password,
nothing once a login fails with the old one (``reread_soon``); a credentials Secret or CA bundle
changed while the old ones still work, one period."""
REREAD_SPACING_SECONDS = 5.0
"""``reread_soon``: at most one GET of an object per this many seconds (a burst of refused
logins, one per worker, costs one GET)."""
IDLE_SECONDS = 900.0
"""An object no reconcile asked for during this long is dropped from the store (seconds)."""

Key = tuple[str, str, str]
"""(kind, namespace, name)."""


@dataclass(slots=True)
class _Entry:
    obj: dict[str, Any] | None  # None: not found (or never readable)
    fetched: float  # monotonic
    wanted: float  # monotonic, last time a reconcile asked
    settled: bool = False  # the last fetch asked for it settled: no resync


def _version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _stub(kind: ResourceKind, namespace: str, name: str) -> dict[str, Any]:
    """What ``changes()`` yields for an object that went away (map functions read metadata only)."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name, "namespace": namespace}}


class ReferencedObjects:
    """Referenced Secrets and ConfigMaps by (kind, namespace, name), read by direct GET.

    ``clock`` returns monotonic seconds (injectable for tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[Key, _Entry] = {}
        self._clock = clock
        self._subscribers: list[asyncio.Queue[dict[str, Any]]] = []
        # The GET of each object in flight (fetch): later fetches of it wait for its answer.
        self._inflight: dict[Key, asyncio.Future[tuple[bool, dict[str, Any] | None]]] = {}
        self.allow_http_endpoints = False
        """Whether ``connection.connection_for`` accepts ``http://`` endpoints: the role's
        ``--development-allow-http-endpoints``, set by the controllers' ``setup``."""
        self.gets = 0
        """How many GETs were sent (tests and the docs' figures)."""
        self._rereads: dict[Key, asyncio.Task[None]] = {}
        self._reread_wanted: set[Key] = set()
        self.refusals_heard = False
        """Set by ``refused.hear_refusals``: one listener per store."""

    def __repr__(self) -> str:  # never the objects: they hold credentials
        return f"ReferencedObjects({sorted(self._entries)})"

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, kind: ResourceKind, name: str, namespace: str | None) -> dict[str, Any] | None:
        """The object as last read (None: not found, or never fetched). No I/O."""
        entry = self._entries.get((kind.kind, namespace or "", name))
        return entry.obj if entry is not None else None

    def _publish(self, kind: ResourceKind, namespace: str, name: str, obj: dict[str, Any] | None) -> None:
        for queue in self._subscribers:
            queue.put_nowait(obj if obj is not None else _stub(kind, namespace, name))

    async def _read(self, client: Client, kind: ResourceKind, name: str, namespace: str) -> tuple[bool, dict[str, Any] | None]:
        """(answered, object): answered False when the GET failed for another reason than 404."""
        self.gets += 1
        try:
            return True, await client.get(kind, name, namespace)
        except NotFound:
            return True, None
        except ApiError as err:
            log.info("referenced object unreadable", kind=kind.kind, namespace=namespace, name=name, code=err.status, reason=err.reason)
            return False, None

    async def fetch(self, client: Client, kind: ResourceKind, name: str, namespace: str | None,
                    max_age: float = MAX_AGE_SECONDS, *, settled: bool = False) -> dict[str, Any] | None:
        """The object, re-read when the stored copy is older than ``max_age`` seconds (0: always).
        Marks it wanted (kept by the resync). Subscribers hear of a changed resourceVersion.
        ``settled``: any stored copy will do, and the resync leaves the object alone until a
        fetch not settled asks for it (see the module docstring)."""
        ns = namespace or ""
        key = (kind.kind, ns, name)
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None:
            entry.settled = settled
            if settled or now - entry.fetched < max_age:
                entry.wanted = now
                return entry.obj
        pending = self._inflight.get(key) if max_age > 0 else None
        if pending is not None:
            # Answered by the GET already sent (asked for after this fetch's max_age began: as
            # fresh as a GET of its own), stored by the fetch that sent it.
            answered, obj = await asyncio.shield(pending)
            entry = self._entries.get(key)
            if entry is not None:
                entry.wanted = now
                return entry.obj
            return obj if answered else None
        answered, obj = await self._shared_read(client, kind, name, ns, key)
        if not answered:
            if entry is not None:
                entry.wanted = now
                return entry.obj
            obj = None
        self._store(kind, ns, name, obj, now, wanted=now)
        self._entries[key].settled = settled
        return obj

    async def _shared_read(self, client: Client, kind: ResourceKind, name: str, ns: str,
                           key: Key) -> tuple[bool, dict[str, Any] | None]:
        """``_read``, published in ``_inflight`` for concurrent fetches while it runs."""
        future: asyncio.Future[tuple[bool, dict[str, Any] | None]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await self._read(client, kind, name, ns)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        else:
            future.set_result(result)
            return result
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]

    def _store(self, kind: ResourceKind, ns: str, name: str, obj: dict[str, Any] | None, now: float, *, wanted: float | None) -> None:
        key = (kind.kind, ns, name)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(obj, now, wanted if wanted is not None else now)
            return
        changed = _version(entry.obj) != _version(obj)
        entry.obj, entry.fetched = obj, now
        if wanted is not None:
            entry.wanted = wanted
        if changed:
            self._publish(kind, ns, name, obj)

    async def fetch_provider(self, client: Client, provider: Provider, max_age: float = MAX_AGE_SECONDS) -> None:
        """Fetch the credentials Secret and the CA ConfigMap/Secret ``provider`` references."""
        ns = provider.metadata.namespace
        conn = provider.spec.connection
        await self.fetch(client, SECRET, conn.credentials_ref.name, ns, max_age)
        bundle = conn.ca_bundle
        if bundle is not None and not bundle.inline:
            if bundle.config_map_ref is not None:
                await self.fetch(client, CONFIG_MAP, bundle.config_map_ref.name, ns, max_age)
            elif bundle.secret_ref is not None:
                await self.fetch(client, SECRET, bundle.secret_ref.name, ns, max_age)

    def reread_soon(self, client: Client, kind: ResourceKind, name: str, namespace: str | None) -> None:
        """Re-GET the object (kind, namespace, name) whatever its age, in a task: at once when no
        re-read of it ran in the last ``REREAD_SPACING_SECONDS``, else once that spacing is over;
        calls meanwhile share that one GET, which always starts after them. A changed object is
        published as by ``fetch``. Call from the event loop."""
        ns = namespace or ""
        key = (kind.kind, ns, name)
        self._reread_wanted.add(key)
        if key not in self._rereads:
            self._rereads[key] = asyncio.get_running_loop().create_task(
                self._reread(client, kind, name, ns, key), name=f"re-read {kind.kind} {ns}/{name}")

    def cancel_rereads(self) -> None:
        """Cancel the re-reads ``reread_soon`` started (the manager stops)."""
        for task in list(self._rereads.values()):
            task.cancel()
        self._reread_wanted.clear()

    async def _reread(self, client: Client, kind: ResourceKind, name: str, ns: str, key: Key) -> None:
        try:
            while key in self._reread_wanted:
                self._reread_wanted.discard(key)
                try:
                    await self.fetch(client, kind, name, ns, max_age=0)
                except Exception:  # a bug must not leave the key stuck in _rereads
                    log.exception("referenced object re-read failed", kind=kind.kind, namespace=ns, name=name)
                await asyncio.sleep(REREAD_SPACING_SECONDS)
        finally:
            self._rereads.pop(key, None)

    async def resync(self, client: Client) -> None:
        """Re-read every stored object once; drop those idle for ``IDLE_SECONDS``."""
        kinds = {SECRET.kind: SECRET, CONFIG_MAP.kind: CONFIG_MAP}
        for key in list(self._entries):
            entry = self._entries.get(key)
            if entry is None:
                continue
            if self._clock() - entry.wanted > IDLE_SECONDS:
                del self._entries[key]
                continue
            if entry.settled:
                continue
            kind = kinds[key[0]]
            answered, obj = await self._read(client, kind, key[2], key[1])
            if answered and key in self._entries:
                self._store(kind, key[1], key[2], obj, self._clock(), wanted=None)

    async def changes(self, client: Client, resync: float = RESYNC_SECONDS) -> AsyncIterator[dict[str, Any]]:
        """A controller channel (``watches_channel`` with the Secret/ConfigMap map function):
        every referenced object whose resourceVersion changed, appeared or disappeared, until the
        controller stops. The first subscriber also runs the periodic resync."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._subscribers.append(queue)
        resyncer: asyncio.Task[None] | None = None
        if len(self._subscribers) == 1:
            resyncer = asyncio.create_task(self._resync_loop(client, resync), name="referenced objects resync")
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(queue)
            if resyncer is not None:
                resyncer.cancel()

    async def _resync_loop(self, client: Client, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await self.resync(client)
            except Exception:  # a bug must not end the resync for good
                log.exception("referenced objects resync failed")


_STORES: weakref.WeakKeyDictionary[Cache, ReferencedObjects] = weakref.WeakKeyDictionary()


def referenced(cache: Cache) -> ReferencedObjects:
    """The store shared by the reconcilers of the manager that owns ``cache``."""
    store = _STORES.get(cache)
    if store is None:
        store = _STORES[cache] = ReferencedObjects()
    return store
