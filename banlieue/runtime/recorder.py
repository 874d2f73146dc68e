"""Kubernetes Events for objects, posted as core ``v1`` Events (as controller-runtime's recorder,
client-go ``tools/record``, posts them for CAPI and its providers).

Why core/v1 and not ``events.k8s.io/v1``: kube-apiserver refuses ``deprecatedFirstTimestamp``,
``deprecatedLastTimestamp``, ``deprecatedCount`` and ``deprecatedSource`` on an
``events.k8s.io/v1`` create ("needs to be unset"), so such an Event has no ``lastTimestamp`` and
``kubectl get events --sort-by=.lastTimestamp`` shows nothing for it (issue 24). A core Event
carries ``firstTimestamp``, ``lastTimestamp``, ``count`` and ``source`` for that command, and
``eventTime``, ``action``, ``reportingComponent``/``reportingInstance`` for ``kubectl events``
and readers of ``events.k8s.io/v1`` (the API server converts: ``reportingController``, ``note``,
``regarding``...).

``event()`` never blocks and never raises: it queues (bounded; on overflow the event is dropped
with a log line) and ``POSTERS`` background loops post, one object's Events one at a time and in
order. One loop was too few: at 1,000 machines deleted with 16 vCenter slots, Events came at
about 16 a second and a post took about 0.1 s on a loaded API server, so the 1,000-Event queue
filled and 565 of 2,000 Events were dropped (issue 22). Repeats of the same object + reason + message
(+ type) within 10 minutes are folded into the existing Event (``count`` + 1, ``lastTimestamp``)
by a merge patch instead of a new object (client-go ``record`` aggregation; the first repeat sets
count 2).
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
from banlieue.runtime.kinds import CORE_EVENT

log = structlog.get_logger("banlieue.runtime.recorder")
SERIES_WINDOW = 600.0  # seconds: client-go events' isomorphic-event window
POSTERS = 8
"""Events posted at once (module docstring)."""
NOTE_MAX = 1024  # kube-apiserver validation of an Event with eventTime: message at most 1 kB


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(ts: float) -> str:
    """metav1.Time: RFC 3339, whole seconds."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        queue_size: int = 1000, posters: int = POSTERS,
    ) -> None:
        self.client = client
        self.component = component
        self.namespace_fallback = namespace_fallback
        self.instance = instance or socket.gethostname()
        self._leader_check: Callable[[], bool] | None = None
        self._leader_retry_after = 1.0
        self._queue: asyncio.Queue[tuple[dict[str, Any], str, str, str, str, float]] = asyncio.Queue(queue_size)
        self._series: dict[tuple[str, ...], _Series] = {}
        self.posters = posters
        # Object (namespace, kind, name, uid) -> its lock and the queued Events holding it: one
        # object's Events are posted one at a time, in queue order, and fold into one series.
        self._objects: dict[tuple[str, ...], tuple[asyncio.Lock, int]] = {}
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
            patch = {"count": series.count, "lastTimestamp": _time(ts)}
            try:
                await self.client.patch(CORE_EVENT, series.name, series.namespace, patch)
                return
            except NotFound:
                pass  # the Event expired (TTL) or was deleted: start a new one
        name = f"{regarding['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": CORE_EVENT.api_version, "kind": CORE_EVENT.kind,
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {k: v for k, v in regarding.items() if v},
            "reason": reason, "message": note, "type": type_, "action": action,
            "source": {"component": self.component, "host": self.instance},
            "firstTimestamp": _time(ts), "lastTimestamp": _time(ts), "count": 1,
            "eventTime": _micro_time(ts), "reportingComponent": self.component, "reportingInstance": self.instance,
        }
        await self.client.create(CORE_EVENT, body)
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
        """Post queued events with ``posters`` loops until cancelled; a failed post is logged
        and dropped."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self.posters):
                group.create_task(self._poster())

    async def _poster(self) -> None:
        while True:
            item = await self._queue.get()
            regarding = item[0]
            key = (regarding["namespace"], regarding["kind"], regarding["name"], regarding["uid"])
            # Taken before any await: the loop that took this object's earlier Event from the
            # queue holds (or waits for) the lock first, so the order stays the queue's.
            lock, users = self._objects.get(key) or (asyncio.Lock(), 0)
            self._objects[key] = (lock, users + 1)
            try:
                async with lock:
                    while self._leader_check is not None and not self._leader_check():
                        await asyncio.sleep(self._leader_retry_after)
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
                lock, users = self._objects[key]
                if users == 1:
                    del self._objects[key]
                else:
                    self._objects[key] = (lock, users - 1)
                self._queue.task_done()

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` s) until queued events are posted (tests, shutdown)."""
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            log.warning("events not flushed", pending=self._queue.qsize())
