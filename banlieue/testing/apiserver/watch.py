"""WATCH streams: JSON lines of ``{"type", "object"}`` over a chunked HTTP response.

Source: Kubernetes API concepts, "Efficient detection of changes" and "Watch bookmarks":
- no resourceVersion or ``"0"``: synthetic ADDED events for the current state, then changes;
- resourceVersion N: every change after N from the event history; N older than the history
  yields one ERROR event carrying a 410 Expired Status (``too old resource version: N (M)``)
  and the stream ends;
- ``allowWatchBookmarks``: BOOKMARK events whose object has only ``metadata.resourceVersion``,
  as kube-apiserver's watch cache sends them (k8s.io/apiserver ``cacheWatcher.nextBookmarkTime``
  and ``process``): every ``bookmark_interval`` (kube: one minute) and once 2 s before the
  watch's ``timeoutSeconds`` end, each only when the store's resourceVersion is newer than the
  one the watch started from (a quiet watch gets none);
- ``sendInitialEvents=true`` (which kube-apiserver defaults for a watch from ``""``/``"0"``
  without ``resourceVersionMatch``: the handler does the same): the initial ADDED events end
  with a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` when bookmarks are allowed;
- selectors: an object that stops matching is reported DELETED, one that starts matching ADDED;
- ``timeoutSeconds`` ends the stream cleanly.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .errors import ApiError, expired, too_large_resource_version
from .faults import Faults
from .resources import ResourceType
from .store import Event, Store

JSON = dict[str, Any]
DEFAULT_WATCH_TIMEOUT = 1800.0  # kube: minRequestTimeout 1800 s, randomised up to 2x


@dataclass
class WatchRequest:
    """The parsed query of one watch."""

    rt: ResourceType
    namespace: str | None
    matches: Callable[[JSON], bool]
    resource_version: str | None
    allow_bookmarks: bool
    send_initial_events: bool | None
    timeout: float
    # Called with an object to encode it (plain object or a Table row); None means plain.
    transform: Callable[[JSON], JSON] | None = None


def _visible(req: WatchRequest, obj: JSON | None) -> bool:
    if obj is None:
        return False
    if req.namespace is not None and obj["metadata"].get("namespace", "") != req.namespace:
        return False
    return req.matches(obj)


def translate(req: WatchRequest, ev: Event) -> tuple[str, JSON] | None:
    """The event this watcher sees for ``ev`` (selector transitions become ADDED/DELETED)."""
    new_ok = _visible(req, ev.obj)
    if ev.type == "ADDED":
        return ("ADDED", ev.obj) if new_ok else None
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if new_ok or _visible(req, ev.old) else None
    old_ok = _visible(req, ev.old)
    if old_ok and new_ok:
        return ("MODIFIED", ev.obj)
    if old_ok:
        return ("DELETED", ev.obj)
    if new_ok:
        return ("ADDED", ev.obj)
    return None


def _line(kind: str, obj: JSON) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


async def serve_watch(
    request: web.Request,
    req: WatchRequest,
    store: Store,
    faults: Faults,
    bookmark_interval: float,
    headers: dict[str, str],
) -> web.StreamResponse:
    """Stream a watch until timeout, client disconnect, or a drop fault.

    Subscription and the initial snapshot happen synchronously (no await in between), so no
    event is lost or duplicated between the snapshot and the live stream.
    """
    gr = req.rt.group_resource
    initial: list[tuple[str, JSON]] = []
    error: ApiError | None = None
    watcher = store.subscribe(gr)
    start_rv: int | None = None  # the resourceVersion asked for, when the watch resumes from one
    try:
        if faults.take_expired_watch():
            error = expired(f"too old resource version: {req.resource_version or 0} ({store.rv})")
        elif req.resource_version in (None, "", "0") or req.send_initial_events:
            for _, obj in store.items(gr, req.namespace if req.rt.namespaced else None):
                if req.matches(obj):
                    initial.append(("ADDED", obj))
        else:
            try:
                rv = int(req.resource_version or "0")
            except ValueError:
                rv = -1
            events = store.events_since(gr, rv) if rv >= 0 else None
            if rv > store.rv:  # e.g. a client that outlived a restarted server: make it relist
                error = too_large_resource_version(rv, store.rv)
            elif events is None:
                error = expired(f"too old resource version: {req.resource_version} ({store.compacted_rv(gr)})")
            else:
                for ev in events:
                    t = translate(req, ev)
                    if t is not None:
                        initial.append(t)
                start_rv = rv
        snapshot_rv = store.rv
        # A bookmark is sent only when the store has moved past the resourceVersion the watch
        # started from: the one asked for, or the snapshot's for initial events.
        if start_rv is None:
            start_rv = snapshot_rv
        deadline = time.monotonic() + req.timeout
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", **headers})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if error is not None:
            await resp.write(_line("ERROR", error.status()))
            return resp
        enc = req.transform or (lambda o: o)
        try:
            while faults.freeze_watches:  # frozen: not even the initial events go out
                if time.monotonic() >= deadline:
                    return resp
                await asyncio.sleep(0.05)
            for kind, obj in initial:
                await resp.write(_line(kind, enc(obj)))
            if req.send_initial_events and req.allow_bookmarks:
                await resp.write(_line("BOOKMARK", _bookmark(req.rt, snapshot_rv, initial_end=True)))
            await _pump(resp, req, watcher, store, faults, bookmark_interval, enc, deadline, start_rv)
        except ConnectionResetError:
            pass  # the client went away mid-stream: the watch simply ends (no error to report)
        return resp
    finally:
        store.unsubscribe(watcher)


PRE_TIMEOUT_BOOKMARK = 2.0
"""Seconds before a watch's end at which kube-apiserver sends its last bookmark (cacheWatcher)."""


def _next_bookmark(now: float, deadline: float, interval: float) -> float:
    """When the next bookmark is due (monotonic seconds): ``interval`` from ``now``, or
    :data:`PRE_TIMEOUT_BOOKMARK` before ``deadline`` when that comes first and is still ahead."""
    due = now + interval
    pre_timeout = deadline - PRE_TIMEOUT_BOOKMARK
    return pre_timeout if now < pre_timeout < due else due


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> JSON:
    md: JSON = {"resourceVersion": str(rv)}
    if initial_end:
        md["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": md}


async def _pump(
    resp: web.StreamResponse,
    req: WatchRequest,
    watcher: Any,
    store: Store,
    faults: Faults,
    bookmark_interval: float,
    enc: Callable[[JSON], JSON],
    deadline: float,
    start_rv: int,
) -> None:
    next_bookmark = _next_bookmark(time.monotonic(), deadline, bookmark_interval)
    while not watcher.closed:
        now = time.monotonic()
        if now >= deadline:
            return
        if faults.freeze_watches:
            await asyncio.sleep(min(0.05, deadline - now))
            continue
        wait = deadline - now
        if req.allow_bookmarks:
            wait = min(wait, max(0.0, next_bookmark - now))
        try:
            ev = await asyncio.wait_for(watcher.queue.get(), timeout=max(wait, 0.001))
        except TimeoutError:
            if req.allow_bookmarks and time.monotonic() >= next_bookmark and watcher.queue.empty():
                if store.rv > start_rv:
                    await resp.write(_line("BOOKMARK", _bookmark(req.rt, store.rv)))
                next_bookmark = _next_bookmark(time.monotonic(), deadline, bookmark_interval)
            continue
        if ev is None:
            return
        t = translate(req, ev)
        if t is not None:
            await resp.write(_line(t[0], enc(t[1])))
