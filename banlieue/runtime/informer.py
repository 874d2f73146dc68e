"""The shared informer: a reflector (LIST then WATCH) feeding an Indexer and event handlers.

client-go ``tools/cache/reflector.go`` and ``shared_informer.go`` (runtime-facts §4.1-4.4):
paginated LIST (500 per page; an expired continue token falls back to one full list), WATCH
from the list's resourceVersion with ``allowWatchBookmarks`` and ``timeoutSeconds`` uniform in
[min, 2*min); 410 Gone -> relist; 429 and connection errors at watch start -> back off and re-watch
without relisting; a watch closed in < 1 s with no events -> relist; any other error -> relist.
Between ListAndWatch attempts: backoff 0.8 s doubling, jitter 1.0 (delay in [d, 2d)), cap 30 s,
reset after 2 min without a backoff. A relist diffs against the store: adds/updates for changed
objects, ``DeletedFinalStateUnknown`` tombstones for keys that vanished.

Added by banlieue: a watch that stays silent (no event, no bookmark) longer than
``watch_silence_timeout`` is abandoned and restarted from the last resourceVersion.

Changed by banlieue: ``min`` is ``MIN_WATCH_TIMEOUT_SECONDS`` (1,800 s), not client-go's 300 s.
Each informer re-opened its watch every 5-10 minutes; with ten informers that was 1.8 of the
4 API requests a minute an idle manager sent (issue 22, docs/performance.md). kube-apiserver
itself gives a watch that asks for no timeout one uniform in [--min-request-timeout,
2 x --min-request-timeout), default 1,800 s (k8s.io/apiserver ``handlers/get.go`` ``ListResource``);
banlieue asks for the same. A longer watch loses nothing: bookmarks keep its resourceVersion
fresh, so a re-open resumes where it stopped instead of relisting. A connection that dies without
a reset is still noticed within ``WATCH_SILENCE_SECONDS`` (the silence bound no longer follows the
timeout): kube-apiserver's watch cache sends a bookmark about every minute to every watch that
allows them, quiet resources included (measured on envtest's kube-apiserver: 60 s apart on a
watch of an empty namespace), so a healthy watch is never silent that long.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping
from typing import Any

import structlog

from banlieue.runtime.cache import Indexer, IndexFunc, meta_namespace_key, strip_managed_fields
from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError, Gone, ServerError, TooManyRequests, from_status_object
from banlieue.runtime.event import DeletedFinalStateUnknown, Object, ResourceEventHandler
from banlieue.runtime.kinds import ResourceKind

log = structlog.get_logger("banlieue.runtime.informer")


class Backoff:
    """client-go ``wait.Backoff`` as the reflector uses it: ``initial`` seconds, ``factor``,
    jitter 1.0 (each delay uniform in [d, 2d)), ``cap`` on d, reset to ``initial`` after
    ``reset_after`` seconds without a backoff (``DelayWithReset``)."""

    def __init__(self, initial: float = 0.8, factor: float = 2.0, cap: float = 30.0, reset_after: float = 120.0) -> None:
        self.initial, self.factor, self.cap, self.reset_after = initial, factor, cap, reset_after
        self._d = initial
        self._last = 0.0

    def next_delay(self) -> float:
        now = time.monotonic()
        if now - self._last > self.reset_after:
            self._d = self.initial
        self._last = now
        delay = self._d * (1.0 + random.random())
        self._d = min(self._d * self.factor, self.cap)
        return delay


MIN_WATCH_TIMEOUT_SECONDS = 1800
"""Default ``min_watch_timeout``: kube-apiserver's ``--min-request-timeout`` default (module docstring)."""


WATCH_SILENCE_SECONDS = 300.0
"""Default ``watch_silence_timeout`` (seconds), when the watch's own timeout is longer: five
kube-apiserver bookmark periods (module docstring). A server that sends no periodic bookmarks
(the API double while nothing changes) sees such a watch re-opened every 5 minutes, as client-go's
shortest timeout would."""


class _RelistNeeded(Exception):
    """The watch ended in a way that needs a fresh LIST (410, very short watch)."""


class Informer:
    """One kind's list-watch loop, store and handlers (a client-go SharedIndexInformer).

    ``namespace`` None watches all namespaces; ``label_selector``/``field_selector`` are API
    selector strings. ``resync_period`` (seconds, None = never) re-delivers every cached object
    as ``on_update(obj, obj)`` without contacting the server. ``min_watch_timeout``: watches
    ask for ``timeoutSeconds`` uniform in [min, 2*min) (seconds; default
    ``MIN_WATCH_TIMEOUT_SECONDS``). ``watch_silence_timeout`` (seconds;
    default: the watch timeout + 30 s, at most ``WATCH_SILENCE_SECONDS``) bounds how long a watch may deliver nothing.
    Handlers run inline on the informer's task, in event order; an exception in a handler is
    logged and does not stop delivery.
    """

    def __init__(
        self,
        client: Client,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        page_size: int = 500,
        min_watch_timeout: int = MIN_WATCH_TIMEOUT_SECONDS,
        watch_silence_timeout: float | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace if kind.namespaced else None
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync_period = resync_period
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.watch_silence_timeout = watch_silence_timeout
        self.backoff = backoff or Backoff()
        self.store = Indexer(indexers)
        self._handlers: list[ResourceEventHandler] = []
        self._synced = False
        self._synced_event = asyncio.Event()
        self.last_sync_resource_version: str = ""
        self.relists = 0
        self.watches = 0
        self._log = log.bind(kind=str(kind), namespace=self.namespace)

    # --- handlers -----------------------------------------------------------------------
    def add_event_handler(self, handler: ResourceEventHandler) -> None:
        """Register ``handler``; if objects are already cached it first receives
        ``on_add(obj, True)`` for each of them (client-go AddEventHandler on a running informer)."""
        self._handlers.append(handler)
        for key in self.store.list_keys():
            obj = self.store.get(key)
            if obj is not None:
                self._call(handler.on_add, obj, True)

    def has_synced(self) -> bool:
        """True once the first LIST has been stored and delivered to handlers."""
        return self._synced

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Wait until ``has_synced()``; False after ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self._synced_event.wait()
        except TimeoutError:
            return False
        return True

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            self._log.exception("event handler failed", handler=type(getattr(fn, "__self__", fn)).__name__)

    def _emit_add(self, obj: Object, initial: bool) -> None:
        for h in self._handlers:
            self._call(h.on_add, obj, initial)

    def _emit_update(self, old: Object, new: Object) -> None:
        for h in self._handlers:
            self._call(h.on_update, old, new)

    def _emit_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        for h in self._handlers:
            self._call(h.on_delete, obj)

    # --- store updates ------------------------------------------------------------------
    def _upsert(self, raw: Mapping[str, Any], initial: bool) -> None:
        obj = strip_managed_fields(raw)
        old = self.store.put(obj)
        if old is None:
            self._emit_add(obj, initial)
        elif old != self.store.get_raw(meta_namespace_key(obj)):
            self._emit_update(json.loads(old), obj)

    def _delete_unseen(self, seen: set[str]) -> None:
        """The end of a LIST: keys the list did not return vanished while we were not
        watching (client-go Replace: ``DeletedFinalStateUnknown`` tombstones)."""
        for key in self.store.list_keys():
            if key not in seen:
                last = self.store.delete(key)
                self._emit_delete(DeletedFinalStateUnknown(key, last or {}))

    # --- reflector ----------------------------------------------------------------------
    async def _list(self) -> None:
        """LIST in pages of ``page_size``, each page stored (and its events delivered) as it
        arrives, then tombstones for the keys no page returned.

        client-go's reflector collects every page and calls ``Replace`` once; applying a page
        at a time yields the same events in the same order (adds/updates by list order, then
        deletions) and the same store at the end, but never holds more than one decoded page:
        holding the whole list decoded (~14 KiB per object as dicts, against ~2 KiB stored)
        set the process's memory high-water mark, which CPython's allocator keeps (10,000
        VirtualMachines + 2 x 10,000 VSphereMachines: 613 MiB RSS for 50 MiB of stored
        objects). A LIST that fails part-way leaves the pages already applied in the store,
        as newer-than-watched state; the next LIST (the reflector relists after any error)
        completes the diff, and ``has_synced`` stays False until one LIST completed.
        """
        initial = not self._synced
        seen: set[str] = set()
        continue_: str | None = None
        limit: int | None = self.page_size or None
        count = 0
        while True:
            try:
                page = await self.client.list(
                    self.kind, self.namespace, label_selector=self.label_selector,
                    field_selector=self.field_selector, limit=limit, continue_=continue_,
                )
            except Gone:
                if continue_ is None:
                    raise
                # client-go pager: an expired continue token falls back to one full list.
                self._log.info("continue token expired, listing without pages")
                seen, continue_, limit, count = set(), None, None, 0
                continue
            items = page.get("items") or []
            meta = page.get("metadata") or {}
            del page
            count += len(items)
            items.reverse()
            while items:
                item = items.pop()  # in list order; each decoded object dropped once stored
                seen.add(meta_namespace_key(item))
                self._upsert(item, initial)
            continue_ = meta.get("continue") or None
            if not continue_:
                self.last_sync_resource_version = str(meta.get("resourceVersion", ""))
                break
        self.relists += 1
        self._delete_unseen(seen)
        if not self._synced:
            self._synced = True
            self._synced_event.set()
        self._log.debug("listed", items=count, resource_version=self.last_sync_resource_version)

    async def _watch_once(self) -> None:
        """One WATCH request until it ends. Raises _RelistNeeded, TooManyRequests, ApiError."""
        timeout = random.randrange(self.min_watch_timeout, 2 * self.min_watch_timeout)
        silence = self.watch_silence_timeout or min(timeout + 30.0, WATCH_SILENCE_SECONDS)
        started = time.monotonic()
        events = 0
        self.watches += 1
        stream = self.client.watch(
            self.kind, self.namespace, resource_version=self.last_sync_resource_version,
            timeout_seconds=timeout, allow_bookmarks=True, label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        try:
            while True:
                try:
                    async with asyncio.timeout(silence):
                        event = await anext(stream)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    self._log.warning("watch silent too long, restarting", silence_seconds=silence)
                    return
                events += 1
                self._handle(event)
        finally:
            await stream.aclose()
        if events == 0 and time.monotonic() - started < 1.0:
            raise _RelistNeeded("very short watch")

    def _handle(self, event: Mapping[str, Any]) -> None:
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "ERROR":
            raise from_status_object(obj)
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if type_ in ("ADDED", "MODIFIED"):
            self._upsert(obj, False)
        elif type_ == "DELETED":
            self.store.delete(meta_namespace_key(obj))
            self._emit_delete(strip_managed_fields(obj))
        elif type_ != "BOOKMARK":
            self._log.warning("unknown watch event type", type=type_)
            return
        if rv:
            self.last_sync_resource_version = rv

    async def _list_and_watch(self) -> None:
        await self._list()
        while True:
            try:
                await self._watch_once()
            except (Gone, _RelistNeeded) as exc:
                self._log.info("relisting", reason=str(exc))
                return
            except TooManyRequests as exc:
                delay = max(exc.retry_after or 0.0, self.backoff.next_delay())
                self._log.info("watch throttled, re-watching", delay=delay)
                await asyncio.sleep(delay)
            except ServerError as exc:
                if exc.status != 0:
                    raise
                # connection refused / dropped: back off and re-watch without relisting.
                delay = self.backoff.next_delay()
                self._log.info("watch connection failed, re-watching", error=str(exc), delay=delay)
                await asyncio.sleep(delay)

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            for key in self.store.list_keys():
                obj = self.store.get(key)
                if obj is not None:
                    self._emit_update(obj, obj)

    async def run(self) -> None:
        """Run until cancelled: ListAndWatch under the reflector's backoff, and resync."""
        async with asyncio.TaskGroup() as tg:
            if self.resync_period:
                tg.create_task(self._resync_loop(self.resync_period))
            while True:
                try:
                    await self._list_and_watch()
                except ApiError as exc:
                    self._log.warning("list/watch failed", error=str(exc))
                except Exception:
                    # client-go HandleError: a malformed response or object must not end the
                    # informer; log it and relist after the backoff.
                    self._log.exception("list/watch failed unexpectedly")
                await asyncio.sleep(self.backoff.next_delay())
