"""Kubernetes Events for objects, posted as ``events.k8s.io/v1`` (client-go ``tools/events``).

``event()`` never blocks and never raises: it queues (bounded; on overflow the event is dropped
with a log line) and a background loop posts. Repeats of the same regarding + reason + note
(+ type) within 10 minutes are folded into the existing Event's ``series``
(``count``, ``lastObservedTime``) by a merge patch instead of a new object (client-go
``events.EventSeries``; the first repeat sets count 2).
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import structlog

from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError, NotFound
from banlieue.runtime.kinds import EVENT

log = structlog.get_logger("banlieue.runtime.recorder")
SERIES_WINDOW = 600.0  # seconds: client-go events' isomorphic-event window
NOTE_MAX = 1024  # events.k8s.io/v1 validation: note at most 1 kB


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    last_seen: float


class EventRecorder:
    """Records Events for ``component`` (reportingController, e.g. "banlieue.io/controller").

    ``instance`` is reportingInstance (default: hostname). ``queue_size`` bounds pending events.
    Run ``start()`` (a manager runnable, no leader election needed) to post them.
    """

    need_leader_election = False
    fenced_by_lease = True
    """The Manager hands it ``lease_valid`` (:meth:`set_leader_check`) once elected, as to its
    controllers, although it runs in every replica."""

    def __init__(
        self, client: Client, component: str, *, namespace_fallback: str = "default", instance: str | None = None,
        queue_size: int = 1000,
    ) -> None:
        self.client = client
        self.component = component
        self.namespace_fallback = namespace_fallback
        self.instance = instance or socket.gethostname()
        self._leader_check: Callable[[], bool] | None = None
        self._leader_retry_after = 1.0
        self._queue: asyncio.Queue[tuple[dict[str, Any], str, str, str, str, float]] = asyncio.Queue(queue_size)
        self._series: dict[tuple[str, ...], _Series] = {}
        self.dropped = 0
        self.posted = 0

    def event(
        self, obj: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str,
        action: str | None = None,
    ) -> None:
        """Queue an Event about ``obj`` (needs apiVersion, kind, metadata.name). Never raises."""
        try:
            meta = obj.get("metadata") or {}
            regarding = {
                "apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""), "name": meta.get("name", ""),
                "namespace": meta.get("namespace") or "", "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            }
            item = (regarding, type_, reason, message[:NOTE_MAX], action or reason, time.time())
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event queue full, dropping event", reason=reason)
        except Exception:
            self.dropped += 1
            log.exception("could not queue event", reason=reason)

    async def _post(self, regarding: dict[str, Any], type_: str, reason: str, note: str, action: str, ts: float) -> None:
        namespace = regarding["namespace"] or self.namespace_fallback
        key = (namespace, regarding["kind"], regarding["name"], regarding["uid"], type_, reason, note)
        series = self._series.get(key)
        if series is not None and ts - series.last_seen < SERIES_WINDOW:
            series.count += 1
            series.last_seen = ts
            patch = {"series": {"count": series.count, "lastObservedTime": _micro_time(ts)}}
            try:
                await self.client.patch(EVENT, series.name, series.namespace, patch)
                return
            except NotFound:
                pass  # the Event expired (TTL) or was deleted: start a new one
        name = f"{regarding['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": EVENT.api_version, "kind": EVENT.kind,
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": _micro_time(ts), "reportingController": self.component,
            "reportingInstance": self.instance, "action": action, "reason": reason, "note": note,
            "type": type_, "regarding": {k: v for k, v in regarding.items() if v},
        }
        await self.client.create(EVENT, body)
        self._series[key] = _Series(name, namespace, 1, ts)
        if len(self._series) > 4096:  # bound memory: forget series older than the window
            cutoff = ts - SERIES_WINDOW
            self._series = {k: s for k, s in self._series.items() if s.last_seen >= cutoff}

    def set_leader_check(self, check: Callable[[], bool], retry_after: float = 1.0) -> None:
        """Post only while ``check()`` is True (the Manager passes ``LeaderElector.lease_valid``):
        a leader resumed after a pause holds the Events it queued before it until its Lease is
        renewed, so an ex-leader that lost the Lease meanwhile posts none of them (it exits on
        leadership loss). Checked every ``retry_after`` seconds while False."""
        self._leader_check = check
        self._leader_retry_after = retry_after

    async def start(self) -> None:
        """Post queued events until cancelled; a failed post is logged and dropped."""
        while True:
            item = await self._queue.get()
            while self._leader_check is not None and not self._leader_check():
                await asyncio.sleep(self._leader_retry_after)
            try:
                await self._post(*item)
                self.posted += 1
            except ApiError as exc:
                self.dropped += 1
                # A namespace being terminated refuses new objects (403), and once it is gone its
                # events have nowhere to go (404 on the namespace): both expected while it empties.
                gone = (exc.status == 403 and "terminat" in str(exc)) or (exc.status == 404 and "namespaces" in str(exc))
                level = log.debug if gone else log.warning
                level("event post failed", error=str(exc), reason=item[2])
            finally:
                self._queue.task_done()

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` s) until queued events are posted (tests, shutdown)."""
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            log.warning("events not flushed", pending=self._queue.qsize())
