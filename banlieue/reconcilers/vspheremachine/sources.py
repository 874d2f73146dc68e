"""Event sources of the VSphereMachine controller: cache indexes, map functions, the CAPI watch
and the vCenter property-collector watch (SPEC §4 "Secondary watches map back to primaries").

- Provider -> the machines of its namespace that use it or are not Ready yet (a Provider
  change can resolve a ``ProviderNotFound``/``FailureDomainNotFound``/``SecretMissing``); a
  change of nothing but its domains' reported capacity (rewritten about every 30 s while VMs
  come and go) -> only the machines not placed yet, the only ones a capacity can decide
  (``provider_capacity``).
- Secret -> machines whose bootstrap Secret it is (index ``INDEX_BOOTSTRAP_SECRET``), and via
  Providers whose credentials/CA it holds; ConfigMap -> via Providers whose CA it holds.
- CAPI Machine -> its ``spec.infrastructureRef`` VSphereMachine; CAPI Cluster -> machines
  labelled ``cluster.x-k8s.io/cluster-name=<name>``, each only for a change of what the
  reconciler reads (``CAPI_MACHINE_READS``, ``CAPI_CLUSTER_READS``): CAPI core rewrites a
  Cluster's status at every change of its Machines, and mapping each rewrite to every machine of
  the Cluster made reconciles grow with the square of the machines (1,000 machines: 142,000
  reconciles in 12 minutes, the workers too busy to clone). The CAPI kinds are optional: ``capi_requests``
  looks them up in discovery (``CAPI_DISCOVERY_SECONDS`` at first, backing off to
  ``CAPI_DISCOVERY_MAX_SECONDS``) and creates their informers only once they are served, so a
  cluster without CAPI never waits for their cache sync.
- vCenter: ``VMWatch.requests`` runs ``backend.watch(conn)`` once per vSphere Provider
  connection and maps each ``VMChange`` to the machine by UID (index ``INDEX_UID``) or, for a
  removal without UID, by ``status.instanceUUID`` (index ``INDEX_INSTANCE_UUID``). Provider
  add/update/delete events wake it at once to start or stop watches (``ProviderWake``);
  ``WATCH_RESYNC_SECONDS`` remains as a safety net. When the backend reports a vCenter that
  answers again, the machines waiting on it are enqueued (``vspheremachine.reconnect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from banlieue.api.conditions import READY, is_true
from banlieue.api.infrastructure import VSphereMachineReason, VSphereMachineStatus
from banlieue.backends.base import AuthFailed, Backend, BackendError, Connection, VMChange
from banlieue.reconcilers.connection import (
    ConnectionConfigError,
    connection_for,
    referenced_config_maps,
    referenced_secrets,
)
from banlieue.reconcilers.kinds import (
    CAPI_CLUSTER,
    CAPI_LABEL_CLUSTER_NAME,
    CAPI_MACHINE,
    PROVIDER,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.parsed import parse_provider
from banlieue.reconcilers.provider_changes import Projected
from banlieue.reconcilers.referenced import referenced
from banlieue.reconcilers.vspheremachine.reconnect import ReconnectNotifier, machines_waiting_on
from banlieue.runtime.cache import Cache
from banlieue.runtime.client import Client
from banlieue.runtime.event import DeletedFinalStateUnknown, Object, nested
from banlieue.runtime.handler import EnqueueRequestsFromMapFunc
from banlieue.runtime.informer import Informer
from banlieue.runtime.log import get_logger
from banlieue.runtime.manager import Manager
from banlieue.runtime.reconcile import Request

log = get_logger("banlieue.reconcilers.vspheremachine.controller")

INDEX_UID = "vspheremachine.uid"
"""VSphereMachine index: ``metadata.uid`` (VMChange.uid -> machine)."""
INDEX_INSTANCE_UUID = "vspheremachine.instanceUUID"
"""VSphereMachine index: ``status.instanceUUID``."""
INDEX_BOOTSTRAP_SECRET = "vspheremachine.bootstrapSecret"
"""VSphereMachine index: ``<namespace>/<spec.bootstrapDataSecretRef.name>``."""
CAPI_DISCOVERY_SECONDS = 5.0
"""First interval between looks for the CAPI kinds in discovery (one small GET of
``/apis/cluster.x-k8s.io/v1beta2``; none once they are served), and the interval while a
CAPI-labelled VSphereMachine waits for them (``CapiWatch.wanted``): such a machine sees CAPI
installed after banlieue started within this many seconds (with 300 s, CAPI-labelled machines
waited minutes with no status, issue 21). Discovery needs no RBAC beyond ``system:discovery``,
unlike a watch on CustomResourceDefinitions."""
CAPI_SYNC_GRACE_SECONDS = 30.0
"""Seconds after discovery first showed the CAPI kinds during which a CAPI-path machine whose
CAPI caches are still syncing is requeued without a status write (``CapiWatch.settling``). A
(re)start lists every Machine first: at 1,000 machines that took 4-12 s, and writing
``WaitingForClusterAPI`` on each machine meanwhile (then its real state back) flapped its Ready
condition and cost 2,000 writes per restart (issue 22). Caches that do not sync within this
(Machines not readable: RBAC) are reported on the machine."""

CAPI_DISCOVERY_MAX_SECONDS = 60.0
"""Longest interval between looks: with no machine waiting, the interval doubles from
``CAPI_DISCOVERY_SECONDS`` up to this (5, 10, 20, 40, then 60 s). A standalone cluster that never
installs CAPI pays one GET a minute instead of 12 (issue 22: idle requests); a user who installs
CAPI later waits at most this long before banlieue watches its Machines and Clusters, and no
longer than ``CAPI_DISCOVERY_SECONDS`` once a CAPI-labelled VSphereMachine waits."""
WATCH_RESYNC_SECONDS = 5.0
"""How often the set of watched vCenter connections is compared with the Providers when no
Provider event woke the watcher first (a safety net: Provider events wake it at once)."""
WATCH_RESTART_SECONDS = 5.0
"""Pause before a failed vCenter watch is restarted the first time; doubled after each further
failure up to ``WATCH_RESTART_MAX_SECONDS`` (``watch_restart_delay``)."""
WATCH_RESTART_MAX_SECONDS = 300.0
"""Longest pause between restarts of a failing vCenter watch. 5 s doubling to 5 min is the shape
of the kubelet's CrashLoopBackOff (10 s doubling, capped at 300 s): a vCenter that stays down
costs one login attempt per 5 min instead of one per 5 s (issue F4: a refused port or refused
credentials looped every 5 s forever)."""
WATCH_AUTH_FAILED_SECONDS = 300.0
"""Pause after the vCenter refused the credentials (``AuthFailed``: InvalidLogin/NoPermission),
from the first such failure on. vCenter SSO's default lockout policy locks an account after 5
failed logins within 180 s, for 300 s (vSphere Authentication guide, "Edit the vCenter Single
Sign-On Lockout Policy"); one attempt per 300 s stays below it whatever the count. A changed
credentials Secret or connection is a new watch (``Connection.session_key`` is part of the
watch key) and is tried at once."""
WATCH_HEALTHY_SECONDS = 60.0
"""A watch that ran this long before failing resets the back-off (its next restart waits
``WATCH_RESTART_SECONDS`` again): a vCenter restarted once a day must not wait minutes."""


def watch_restart_delay(failures: int, auth_failed: bool) -> float:
    """Seconds to wait before restarting a vCenter watch after ``failures`` (>= 1) consecutive
    failed attempts, the last one refused for its credentials when ``auth_failed``:
    ``WATCH_RESTART_SECONDS * 2**(failures-1)`` capped at ``WATCH_RESTART_MAX_SECONDS``, and at
    least ``WATCH_AUTH_FAILED_SECONDS`` after ``AuthFailed``. Raises ValueError for failures < 1."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    delay = min(WATCH_RESTART_MAX_SECONDS, WATCH_RESTART_SECONDS * 2.0 ** min(failures - 1, 62))
    return max(delay, WATCH_AUTH_FAILED_SECONDS) if auth_failed else delay


def _meta(obj: Object) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def index_uid(obj: Object) -> list[str]:
    uid = _meta(obj).get("uid")
    return [str(uid)] if uid else []


def index_instance_uuid(obj: Object) -> list[str]:
    value = (obj.get("status") or {}).get("instanceUUID")
    return [str(value)] if value else []


def index_bootstrap_secret(obj: Object) -> list[str]:
    ref = (obj.get("spec") or {}).get("bootstrapDataSecretRef") or {}
    return [f"{_meta(obj).get('namespace')}/{ref['name']}"] if ref.get("name") else []


def register_indexes(cache: Cache) -> None:
    """Add this controller's VSphereMachine indexes (names above) to the shared cache."""
    for name, fn in ((INDEX_UID, index_uid), (INDEX_INSTANCE_UUID, index_instance_uuid), (INDEX_BOOTSTRAP_SECRET, index_bootstrap_secret)):
        cache.add_indexer(VSPHERE_MACHINE, name, fn)


def _request(obj: Object) -> Request:
    meta = _meta(obj)
    return Request(str(meta.get("namespace") or ""), str(meta["name"]))


class MapFuncs:
    """Map functions over the manager's cache (plain functions: they read, never await)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def provider(self, obj: Object) -> list[Request]:
        """Provider -> machines in its namespace that name it or are not Ready (or deleting)."""
        meta = _meta(obj)
        out: list[Request] = []
        # One decoded machine at a time (Cache.iter_objects): a namespace may hold 10,000.
        for m in self.cache.iter_objects(VSPHERE_MACHINE, meta.get("namespace")):
            ref = ((m.get("spec") or {}).get("providerRef") or {}).get("name")
            conditions = VSphereMachineStatus.from_wire(m.get("status") or {}).conditions if m.get("status") else None
            if ref == meta.get("name") or not is_true(conditions, READY) or _meta(m).get("deletionTimestamp"):
                out.append(_request(m))
        return out

    def provider_capacity(self, obj: Object) -> list[Request]:
        """Provider whose domains' capacity changed -> machines of its namespace that wait for
        banlieue to find a domain with room: Ready reason ``FailureDomainNotFound``, no domain
        and no VM yet (``status.failureDomain``, ``status.instanceUUID``), not being deleted. A
        machine waiting for a vCenter slot has been placed by then, or is woken by the slot."""
        meta = _meta(obj)
        out: list[Request] = []
        for m in self.cache.iter_objects(VSPHERE_MACHINE, meta.get("namespace")):
            status = m.get("status") or {}
            if status.get("failureDomain") or status.get("instanceUUID") or _meta(m).get("deletionTimestamp"):
                continue
            conditions = VSphereMachineStatus.from_wire(status).conditions if status else None
            ready = next((c for c in conditions or () if c.type == READY), None)
            if ready is not None and ready.reason == VSphereMachineReason.FAILURE_DOMAIN_NOT_FOUND:
                out.append(_request(m))
        return out

    def _providers_using(self, namespace: str | None, name: str, kind: str) -> list[Request]:
        out: list[Request] = []
        for raw in self.cache.list(PROVIDER, namespace):
            provider = parse_provider(raw)
            if provider is None:
                continue
            names = referenced_secrets(provider) if kind == "Secret" else referenced_config_maps(provider)
            if name in names:
                out.extend(self.provider(raw))
        return out

    def secret(self, obj: Object) -> list[Request]:
        """Secret -> machines bootstrapped from it, and machines of Providers reading it."""
        meta = _meta(obj)
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        out = [_request(m) for m in self.cache.by_index(VSPHERE_MACHINE, INDEX_BOOTSTRAP_SECRET, key)]
        return list(dict.fromkeys(out + self._providers_using(meta.get("namespace"), str(meta.get("name")), "Secret")))

    def referenced(self, obj: Object) -> list[Request]:
        """A changed referenced Secret or ConfigMap (``reconcilers.referenced.changes``)."""
        return self.secret(obj) if obj.get("kind") == "Secret" else self.config_map(obj)

    def config_map(self, obj: Object) -> list[Request]:
        """ConfigMap -> machines of Providers whose CA bundle it holds."""
        meta = _meta(obj)
        return self._providers_using(meta.get("namespace"), str(meta.get("name")), "ConfigMap")

    def capi_machine(self, obj: Object) -> list[Request]:
        """CAPI Machine -> the VSphereMachine of its ``spec.infrastructureRef`` (v1beta2
        ContractVersionedObjectReference: apiGroup, kind, name)."""
        ref = (obj.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("kind") != VSPHERE_MACHINE.kind or ref.get("apiGroup", VSPHERE_MACHINE.group) != VSPHERE_MACHINE.group or not ref.get("name"):
            return []
        return [Request(str(_meta(obj).get("namespace") or ""), str(ref["name"]))]

    def capi_cluster(self, obj: Object) -> list[Request]:
        """CAPI Cluster -> machines labelled with its name."""
        meta = _meta(obj)
        return [_request(m) for m in self.cache.iter_objects(VSPHERE_MACHINE, meta.get("namespace"), {CAPI_LABEL_CLUSTER_NAME: str(meta.get("name"))})]

    def vm_change(self, change: VMChange) -> list[Request]:
        """VMChange -> the machine carrying its UID, else the one with its instance UUID."""
        if change.uid:
            found = self.cache.by_index(VSPHERE_MACHINE, INDEX_UID, change.uid)
            if found:
                return [_request(m) for m in found]
        if change.instance_uuid:
            return [_request(m) for m in self.cache.by_index(VSPHERE_MACHINE, INDEX_INSTANCE_UUID, change.instance_uuid)]
        return []


_META_READS: Final = (("metadata", "uid"), ("metadata", "labels"), ("metadata", "annotations"),
                      ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"))
CAPI_MACHINE_READS: Final = (*_META_READS, ("spec",))
"""What the VSphereMachine reconciler reads of a CAPI Machine (``placement``: the owner check
``machine_owns_back`` on uid and ``spec.infrastructureRef``, ``spec.bootstrap.dataSecretName``,
``spec.failureDomain``, ``spec.clusterName``; the paused annotation); CAPI's status writes of a
Machine change none of it."""
CAPI_CLUSTER_READS: Final = (*_META_READS, ("spec",), ("status", "initialization", "infrastructureProvisioned"),
                             ("status", "failureDomains"))
"""What it reads of a CAPI Cluster (``decide``: existence, ``spec.paused`` and the paused
annotation, ``status.initialization.infrastructureProvisioned``; ``placement``:
``status.failureDomains`` for a machine banlieue places itself). CAPV's machine controller
likewise watches Clusters only for an unpause or infrastructure becoming ready
(cluster-api ``predicates.ClusterPausedTransitionsOrInfrastructureProvisioned``)."""


class ReadsChanged(Projected):
    """Passes an update only when one of ``paths`` (key paths into the object) differs."""

    def __init__(self, paths: tuple[tuple[str, ...], ...]) -> None:
        super().__init__(lambda obj: tuple(nested(obj, *p) for p in paths))


class _QueueAdapter:
    """Lets an informer handler put Requests on an asyncio.Queue (handler ``RequestQueue``)."""

    def __init__(self, queue: asyncio.Queue[Request]) -> None:
        self.queue = queue

    def add(self, item: Request) -> None:
        self.queue.put_nowait(item)


class CapiWatch:
    """The optional CAPI Machine/Cluster watch. ``ready()`` is True once both informers exist
    and have synced; until then the reconciler treats CAPI-path machines as not yet decidable."""

    def __init__(self, mgr: Manager, client: Client, maps: MapFuncs) -> None:
        self.mgr = mgr
        self.client = client
        self.maps = maps
        self.started = False
        self.looks = 0
        """Discovery GETs sent so far (tests)."""
        self.answered = False
        """True once the first discovery GET has come back (served or not)."""
        self._served_at: float | None = None  # loop time discovery first showed the kinds
        self._wanted = asyncio.Event()

    @property
    def served_seen(self) -> bool:
        """True once discovery showed the CAPI kinds (their caches may still be syncing)."""
        return self._served_at is not None

    def wanted(self) -> None:
        """A CAPI-labelled machine waits for the CAPI kinds: look every ``CAPI_DISCOVERY_SECONDS``
        again (not at once: its reconcile requeues every 2 s and would set the pace)."""
        self._wanted.set()

    async def _pause(self, delay: float) -> None:
        """Wait ``delay`` seconds, or only ``CAPI_DISCOVERY_SECONDS`` when a machine wants the
        CAPI kinds (``wanted``, before or during the wait)."""
        await asyncio.sleep(CAPI_DISCOVERY_SECONDS)
        if delay > CAPI_DISCOVERY_SECONDS and not self._wanted.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay - CAPI_DISCOVERY_SECONDS):
                    await self._wanted.wait()

    def ready(self) -> bool:
        if not self.started:
            return False
        return all(self.mgr.get_informer(k).has_synced() for k in (CAPI_MACHINE, CAPI_CLUSTER))

    def settling(self) -> bool:
        """Whether a CAPI-path machine that cannot be decided yet should wait without a word: the
        first discovery GET has not come back, or the kinds are served and their caches have
        been syncing for less than ``CAPI_SYNC_GRACE_SECONDS`` (a start, not a problem to report)."""
        if not self.answered:
            return True
        served_at = self._served_at
        return served_at is not None and asyncio.get_running_loop().time() - served_at < CAPI_SYNC_GRACE_SECONDS

    async def served(self) -> bool:
        """Whether discovery serves Machines and Clusters in cluster.x-k8s.io/v1beta2
        (``answered`` once it came back)."""
        self.looks += 1
        try:
            doc = await self.client.request("GET", f"/apis/{CAPI_MACHINE.group}/{CAPI_MACHINE.version}")
        except Exception as exc:  # any failure means "not (yet) served": look again later
            log.debug("CAPI kinds not served", error=str(exc))
            return False
        finally:
            self.answered = True
        names = {r.get("name") for r in doc.get("resources") or []}
        return {CAPI_MACHINE.plural, CAPI_CLUSTER.plural} <= names

    async def requests(self) -> AsyncIterator[Request]:
        """Requests from CAPI Machine and Cluster events, once those kinds are served."""
        delay = CAPI_DISCOVERY_SECONDS
        while not await self.served():
            await self._pause(delay)
            delay = CAPI_DISCOVERY_SECONDS if self._wanted.is_set() else min(2 * delay, CAPI_DISCOVERY_MAX_SECONDS)
            self._wanted.clear()
        self._served_at = asyncio.get_running_loop().time()
        queue: asyncio.Queue[Request] = asyncio.Queue()
        adapter = _QueueAdapter(queue)
        self.mgr.get_informer(CAPI_MACHINE).add_event_handler(
            EnqueueRequestsFromMapFunc(adapter, self.maps.capi_machine, [ReadsChanged(CAPI_MACHINE_READS)]))
        self.mgr.get_informer(CAPI_CLUSTER).add_event_handler(
            EnqueueRequestsFromMapFunc(adapter, self.maps.capi_cluster, [ReadsChanged(CAPI_CLUSTER_READS)]))
        self.started = True
        log.info("watching CAPI Machines and Clusters")
        while True:
            yield await queue.get()


class ProviderWake:
    """A ``ResourceEventHandler`` for the Provider informer: every add, update (status included:
    a Provider becomes reachable when its credentials Secret appears) and delete calls ``wake()``.
    Handlers run on the informer's task and must not block; ``wake`` only enqueues."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        self.wake()

    def on_update(self, old: Object, new: Object) -> None:
        self.wake()

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        self.wake()


_WAKE: Final = object()
"""Queue item: re-evaluate the watched connections now (a Provider changed)."""


class _Back(str):
    """Queue item: the vCenter with this endpoint label answers again."""


class VMWatch:
    """One ``backend.watch(conn)`` per vSphere Provider connection in ``namespace`` (None: all);
    changes become Requests. The set of watches is re-evaluated when ``providers`` (the Provider
    informer, optional) reports an add/update/delete, and at the latest every
    ``WATCH_RESYNC_SECONDS`` (the safety net; before Provider events woke it, a new Provider waited
    up to that long for its watch). When a watch delivers its first batch, every machine of the
    Provider's namespace is enqueued once (a VM removed before the watch was live appears in no
    batch)."""

    def __init__(self, backend: Backend, cache: Cache, maps: MapFuncs, namespace: str | None,
                 providers: Informer | None = None, client: Client | None = None) -> None:
        self.backend = backend
        self.client = client
        self.cache = cache
        self.maps = maps
        self.namespace = namespace
        self.providers = providers
        self.wakes = 0
        """How many Provider events woke the watcher (coalesced: one per pending re-evaluation)."""
        self._queue: asyncio.Queue[VMChange | str | object] | None = None
        self._wake_pending = False
        self._watched: dict[tuple[str, ...], str] = {}
        self._retry: dict[tuple[str, ...], asyncio.Event] = {}
        """Per watch: set to end its restart pause (its vCenter answers again)."""
        self._conns: dict[tuple[str, ...], Connection] = {}

    @property
    def watched(self) -> frozenset[str]:
        """The Providers (``namespace/name``) whose vCenter is being watched now."""
        return frozenset(self._watched.values())

    def wake(self) -> None:
        """Re-evaluate the watched connections as soon as the watcher runs again (coalesced: a
        burst of Provider events before it runs causes one re-evaluation). No-op before
        ``requests()`` has started."""
        if self._queue is None or self._wake_pending:
            return
        self._wake_pending = True
        self.wakes += 1
        self._queue.put_nowait(_WAKE)

    async def _fetch_referenced(self) -> None:
        """GET (by name, when stale) the Secrets/ConfigMaps of every Provider before ``_connections``."""
        for raw in self.cache.list(PROVIDER, self.namespace):
            provider = parse_provider(raw)
            if provider is not None and self.client is not None:
                # Only a first read here (max_age inf): changes come from the store's resync.
                await referenced(self.cache).fetch_provider(self.client, provider, max_age=math.inf)

    def _connections(self) -> dict[tuple[str, ...], Connection]:
        out: dict[tuple[str, ...], Connection] = {}
        for raw in self.cache.list(PROVIDER, self.namespace):
            provider = parse_provider(raw)
            if provider is None:
                continue
            try:
                conn = connection_for(provider, self.cache)
            except ConnectionConfigError:
                continue  # the reconcilers report it; nothing to watch yet
            # The recorded vCenter is part of the key: a watch refused for an endpoint that reached
            # another vCenter starts again with the Connection of the identity recorded since.
            out[(*conn.session_key, conn.vcenter_instance_uuid or "")] = conn
        return out

    async def _pump(self, conn: Connection, queue: asyncio.Queue[VMChange | str | object],
                    retry: asyncio.Event | None = None) -> None:
        """Run ``backend.watch(conn)`` until cancelled, restarting it after a failure with the
        back-off of ``watch_restart_delay`` (per connection: each Provider's watch has its own).
        ``retry`` set during a pause ends the pause at once (the vCenter answers again)."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            if retry is not None:
                retry.clear()
            first = True
            auth_failed = False
            started = loop.time()
            try:
                async for change in self.backend.watch(conn):
                    queue.put_nowait(change)
                    if first:
                        # A VM removed while the watch was being set up is in no batch:
                        # once the watch is live, look at every machine of the namespace once.
                        queue.put_nowait(conn.provider)
                        first = False
            except BackendError as exc:
                auth_failed = isinstance(exc, AuthFailed)
                error: BaseException | None = exc
            except Exception as exc:  # a bug must not end the watch for good: log it and restart
                error = exc
            else:
                error = None  # the watch ended without an error: restart it like a failure
            failures = 1 if loop.time() - started >= WATCH_HEALTHY_SECONDS else failures + 1
            delay = watch_restart_delay(failures, auth_failed)
            if isinstance(error, BackendError):
                log.info("vcenter watch failed, restarting", provider=conn.provider, reason=error.reason,
                         error=str(error), retry_in_seconds=delay, failures=failures)
            elif error is not None:
                log.error("vcenter watch crashed, restarting", provider=conn.provider, retry_in_seconds=delay,
                          failures=failures, exc_info=error)
            if retry is None:
                await asyncio.sleep(delay)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(retry.wait(), delay)

    def _sync_watches(self, tasks: dict[tuple[str, ...], asyncio.Task[None]],
                      queue: asyncio.Queue[VMChange | str | object]) -> None:
        """Start a watch per wanted connection, cancel those no Provider wants any more."""
        wanted = self._connections()
        for key in [k for k in tasks if k not in wanted]:
            tasks.pop(key).cancel()
            self._retry.pop(key, None)
            self._conns.pop(key, None)
            log.info("stopped watching vcenter", provider=self._watched.pop(key, ""))
        for key, conn in wanted.items():
            if key not in tasks:
                log.info("watching vcenter", provider=conn.provider, endpoint=conn.endpoint)
                retry = self._retry[key] = asyncio.Event()
                tasks[key] = asyncio.create_task(self._pump(conn, queue, retry), name=f"vcenter watch {conn.provider}")
                self._watched[key] = conn.provider
                self._conns[key] = conn

    async def requests(self) -> AsyncIterator[Request]:
        """Requests for machines whose VM changed (power, IPs, config, removal)."""
        queue: asyncio.Queue[VMChange | str | object] = asyncio.Queue()
        self._queue = queue
        if self.providers is not None:
            self.providers.add_event_handler(ProviderWake(self.wake))
        tasks: dict[tuple[str, ...], asyncio.Task[None]] = {}
        loop = asyncio.get_running_loop()
        notifier = self.backend if isinstance(self.backend, ReconnectNotifier) else None
        unsubscribe: Callable[[], None] = lambda: None  # noqa: E731
        if notifier is not None:
            # Called from a vCenter pool thread: hand over to the loop, never block it.
            def back(label: str) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, _Back(label))

            unsubscribe = notifier.add_reconnect_listener(back)
        resync_at = loop.time()  # evaluate at once
        try:
            while True:
                if loop.time() >= resync_at:
                    # Only when woken or on the resync timer: not per VM change (a burst of
                    # changes must not re-parse every Provider each time).
                    await self._fetch_referenced()
                    self._sync_watches(tasks, queue)
                    resync_at = loop.time() + WATCH_RESYNC_SECONDS
                try:
                    async with asyncio.timeout_at(resync_at):
                        change = await queue.get()
                except TimeoutError:
                    continue
                if change is _WAKE:
                    # Cleared before the re-evaluation at the top of the loop, so an event
                    # arriving during it wakes the loop once more.
                    self._wake_pending = False
                    resync_at = loop.time()
                    continue
                if isinstance(change, _Back):
                    if notifier is not None:
                        # A watch pausing after failures on this endpoint restarts now, not
                        # after up to WATCH_RESTART_MAX_SECONDS.
                        for key, conn in self._conns.items():
                            with contextlib.suppress(BackendError, ConnectionConfigError):
                                if notifier.endpoint_label(conn) == str(change) and key in self._retry:
                                    self._retry[key].set()
                        for request in machines_waiting_on(str(change), self._connections().values(), notifier, self.cache):
                            yield request
                    continue
                if isinstance(change, str):
                    for raw in self.cache.iter_objects(VSPHERE_MACHINE, change.partition("/")[0]):
                        yield _request(raw)
                    continue
                if isinstance(change, VMChange):
                    for request in self.maps.vm_change(change):
                        yield request
        finally:
            unsubscribe()
            self._watched.clear()
            self._retry.clear()
            self._conns.clear()
            for task in tasks.values():
                task.cancel()
            for task in tasks.values():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


