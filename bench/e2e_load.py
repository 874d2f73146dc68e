"""Load side of ``bench/e2e.py``: concurrent creates over aiohttp, a list+watch that timestamps
each VirtualMachine's Ready transition, and classification of the API double's request log into
writes by resource, subresource and verb.

Times are monotonic seconds unless stated; the request log's ``time`` is epoch seconds.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


def is_ready(obj: dict[str, Any]) -> bool:
    """True when ``obj`` has condition Ready=True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def connector(limit: int = 100, tls: ssl.SSLContext | None = None) -> aiohttp.TCPConnector:
    """An aiohttp connector of ``limit`` connections, verifying TLS with ``tls`` (the real API
    server: ``Env.tls``) or aiohttp's default (None: the double's plain HTTP)."""
    return aiohttp.TCPConnector(limit=limit, ssl=tls if tls is not None else True)


async def create_all(url: str, path: str, docs: Iterable[dict[str, Any]], concurrency: int = 32,
                     tls: ssl.SSLContext | None = None) -> int:
    """POST every doc to ``url + path`` with ``concurrency`` requests in flight (TLS context
    ``tls`` for an https ``url``); returns the number created. Raises RuntimeError on any answer
    other than 201 (409 counts as done)."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for d in docs:
        queue.put_nowait(d)
    created = 0
    async with aiohttp.ClientSession(connector=connector(concurrency, tls)) as session:
        async def worker() -> None:
            nonlocal created
            while not queue.empty():
                doc = queue.get_nowait()
                async with session.post(url + path, data=json.dumps(doc),
                                        headers={"Content-Type": "application/json"}) as resp:
                    if resp.status not in (201, 409):
                        raise RuntimeError(f"POST {path}: {resp.status} {(await resp.text())[:300]}")
                    created += resp.status == 201
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return created


@dataclass
class ReadyWatch:
    """List+watch of VirtualMachines in one namespace; ``ready_at[name]`` is the monotonic time the
    watch first saw Ready=True; ``events`` counts watch events by type (every change of a stored
    object bumps its resourceVersion and yields exactly one event). ``tls``: the TLS context of an
    https ``url``."""

    url: str
    path: str
    tls: ssl.SSLContext | None = None
    ready_at: dict[str, float] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)
    rv: str = ""
    _task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        """LIST (records objects already Ready), then watch in the background."""
        async with aiohttp.ClientSession(connector=connector(tls=self.tls)) as s, s.get(self.url + self.path) as resp:
            body = await resp.json()
        for o in body["items"]:
            if is_ready(o):
                self.ready_at.setdefault(o["metadata"]["name"], time.monotonic())
        self.rv = body["metadata"]["resourceVersion"]
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector(tls=self.tls)) as s:
            while True:
                q = f"?watch=1&allowWatchBookmarks=true&resourceVersion={self.rv}&timeoutSeconds=3600"
                async with s.get(self.url + self.path + q) as resp:
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        obj = ev["object"]
                        if ev["type"] == "ERROR":
                            raise RuntimeError(f"watch error: {obj}")
                        self.rv = obj["metadata"].get("resourceVersion", self.rv)
                        self.events[ev["type"]] += 1
                        if ev["type"] != "BOOKMARK" and is_ready(obj):
                            self.ready_at.setdefault(obj["metadata"]["name"], time.monotonic())
                            self._changed.set()

    async def wait_ready(self, names: set[str], timeout: float) -> bool:
        """Wait until every name in ``names`` was seen Ready; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not names <= self.ready_at.keys():
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 5.0))
            except TimeoutError:
                pass
            if self._task is not None and self._task.done():
                self._task.result()
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def classify(rec: dict[str, Any]) -> str:
    """``VERB resource[/subresource][ (apply)]`` for one request-log record, e.g.
    ``PATCH virtualmachines/status (apply)``; the apply is recognised by its ``force``/``fieldManager``
    query (client.apply) vs. merge/JSON patches without one."""
    segs = [s for s in rec["path"].split("/") if s]
    if segs[:1] not in (["api"], ["apis"]) or len(segs) < 3:
        return f"{rec['method']} {rec['path']}"
    # /api/v1/namespaces/ns/kind[/name[/sub]] or /apis/g/v/namespaces/ns/kind[/name[/sub]]
    rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    if not rest:  # discovery of a group version (e.g. GET /apis/cluster.x-k8s.io/v1beta2): the path names it
        return f"{rec['method']} {rec['path']}"
    resource = rest[0]
    sub = f"/{rest[2]}" if len(rest) >= 3 else ""
    verb = rec["method"]
    kind = ""
    if verb == "PATCH":
        kind = " (apply)" if "fieldManager=" in rec["query"] and "force=" in rec["query"] else " (merge)"
    return f"{verb} {resource}{sub}{kind}"


def writes(log: list[dict[str, Any]], user_agent_excludes: str = "bench") -> Counter[str]:
    """Successful (2xx) writes by :func:`classify` key, skipping the benchmark's own requests
    (user agent containing ``user_agent_excludes``: aiohttp's default ``Python/... aiohttp``)."""
    out: Counter[str] = Counter()
    for r in log:
        if r["method"] in WRITE_VERBS and 200 <= r["status"] < 300 and "aiohttp" not in r["user_agent"] \
                and "Python-urllib" not in r["user_agent"]:
            out[classify(r)] += 1
    return out


def requests_by(log: list[dict[str, Any]]) -> Counter[str]:
    """Every request (any verb, any status; watches counted once when they end) by
    ``VERB resource[?watch]``, skipping the benchmark's own."""
    out: Counter[str] = Counter()
    for r in log:
        if "aiohttp" in r["user_agent"] or "Python-urllib" in r["user_agent"]:
            continue
        key = classify(r)
        if r["method"] == "GET" and "watch=" in r["query"]:
            key += " (watch)"
        out[key] += 1
    return out
