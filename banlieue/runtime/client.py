"""The API client: every read and write to the API server goes through ``Client``.

Sits on kubernetes_asyncio's REST client (its aiohttp session, TLS and auth settings), with
paths from ``ResourceKind.path`` and plain JSON dicts in and out. Adds what controller-runtime's
client and client-go's rest client give: explicit timeouts, an optional client-side QPS/burst
token bucket (controller-runtime default: disabled, QPS=-1), Retry-After on 429, bounded 5xx
retries for idempotent verbs, conflict retry (``retry.RetryOnConflict``), finalizer helpers and
the ``rest_client_requests_total{code,method,host}`` counter.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import platform
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import aiohttp
import structlog
from kubernetes_asyncio.client import ApiClient, Configuration

from banlieue.runtime.config import Timeouts
from banlieue.runtime.errors import Conflict, NotFound, ServerError, TooManyRequests, from_response
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.metrics import REST_CLIENT_REQUESTS

log = structlog.get_logger("banlieue.runtime.client")
T = TypeVar("T")

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "HEAD"})


class TokenBucket:
    """client-go ``flowcontrol.NewTokenBucketRateLimiter(qps, burst)``: ``burst`` tokens refill
    at ``qps`` per second; ``wait()`` sleeps until a token is free. qps <= 0 disables it."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._last = time.monotonic()

    async def wait(self) -> None:
        if self.qps <= 0:
            return
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0  # reserve now so concurrent waiters queue up behind each other
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.qps)


async def retry_on_conflict(
    fn: Callable[[], Awaitable[T]], *, steps: int = 5, duration: float = 0.010, factor: float = 1.0, jitter: float = 0.1
) -> T:
    """Call ``fn`` again while it raises ``Conflict``; client-go ``retry.RetryOnConflict`` with
    ``retry.DefaultRetry`` (5 steps, 10 ms, factor 1.0, jitter 0.1). ``fn`` must re-read the
    object it writes. Raises the last Conflict after ``steps`` attempts."""
    delay = duration
    for attempt in range(steps):
        try:
            return await fn()
        except Conflict:
            if attempt == steps - 1:
                raise
            await asyncio.sleep(delay + random.random() * jitter * delay)
            delay *= factor
    raise AssertionError("unreachable")


def default_user_agent() -> str:
    """``banlieue/<version> (<os>/<arch>) pid/<pid>``.

    client-go's ``rest.DefaultKubernetesUserAgent`` shape (``<command>/<version> (<os>/<arch>)
    ...``) plus the process id, so that the API server's audit log (and the test double's
    request log) tells two replicas on one host apart: who wrote what while leadership moved.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("banlieue")
    except PackageNotFoundError:  # a source checkout on sys.path, not installed
        release = "unknown"
    return f"banlieue/{release} ({platform.system().lower()}/{platform.machine()}) pid/{os.getpid()}"


def _q(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


class Client:
    """Async Kubernetes client over plain dicts. Construct with a kubernetes_asyncio
    ``Configuration``; close with ``await client.close()``.

    ``qps``/``burst``: client-side token bucket (qps <= 0 disables, the controller-runtime
    default). ``max_retry_after``: 429 retries honouring Retry-After (client-go maxRetries 10).
    ``server_error_retries``: retries of 5xx/connection errors for GET/PUT/DELETE.
    ``user_agent``: the User-Agent header (default :func:`default_user_agent`).
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        qps: float = -1.0,
        burst: int = 10,
        timeouts: Timeouts = Timeouts(),
        max_retry_after: int = 10,
        server_error_retries: int = 3,
        user_agent: str | None = None,
    ) -> None:
        self.configuration = configuration
        self.timeouts = timeouts
        self.limiter = TokenBucket(qps, burst)
        self.max_retry_after = max_retry_after
        self.server_error_retries = server_error_retries
        self._api = ApiClient(configuration)
        self._api.user_agent = user_agent or default_user_agent()
        self.host = urlparse(configuration.host).netloc
        self._direct: aiohttp.ClientSession | None = None
        if not any(os.environ.get(v) for v in PROXY_ENV):
            # kubernetes_asyncio's session has trust_env=True: aiohttp then looks up proxy and
            # netrc settings in a worker thread on every request (two thread hops each). With
            # no proxy configured in the environment, use a session on the same connector
            # (same TLS and pool) without that lookup.
            rest: Any = self._api.rest_client
            pool: aiohttp.ClientSession = rest.pool_manager
            self._direct = aiohttp.ClientSession(
                connector=pool.connector, connector_owner=False, trust_env=False, read_bufsize=2**21
            )
            rest.pool_manager = self._direct
            self._original_session = pool

    async def close(self) -> None:
        """Close the HTTP session (open watches end)."""
        if self._direct is not None:
            await self._direct.close()
            rest: Any = self._api.rest_client
            rest.pool_manager = self._original_session
        await self._api.close()

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type or "application/json"}
        headers.update(self._api.default_headers)
        await self._api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    async def _send(
        self, method: str, path: str, query: Sequence[tuple[str, str]], body: Any, content_type: str | None,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        await self.limiter.wait()
        try:
            rest: Any = self._api.rest_client
            resp: aiohttp.ClientResponse = await rest.request(
                method, f"{self.configuration.host}{path}", query_params=builtins.list(query) or None,
                headers=await self._headers(content_type), body=body, _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._count("<error>", method)
            raise ServerError(0, "ConnectionError", f"{type(exc).__name__}: {exc}") from exc
        self._count(str(resp.status), method)
        return resp

    def _count(self, code: str, method: str) -> None:
        REST_CLIENT_REQUESTS.labels(code=code, method=method, host=self.host).inc()

    async def request(
        self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
        content_type: str | None = None, timeout: float | None = None,
    ) -> dict[str, Any]:
        """One request returning the decoded JSON body. Retries 429 (Retry-After, default 1 s)
        up to ``max_retry_after`` times and 5xx/connection errors of idempotent verbs up to
        ``server_error_retries`` times (0.1 s doubling). Raises ``ApiError`` subclasses."""
        total = timeout or self.timeouts.request
        client_timeout = aiohttp.ClientTimeout(total=total, connect=self.timeouts.connect)
        throttled = failed = 0
        while True:
            try:
                resp = await self._send(method, path, query, body, content_type, client_timeout)
                try:
                    data = await resp.read()
                finally:
                    resp.release()
                if 200 <= resp.status < 300:
                    return json.loads(data) if data else {}
                raise from_response(resp.status, data, dict(resp.headers))
            except TooManyRequests as exc:
                throttled += 1
                if throttled > self.max_retry_after:
                    raise
                await asyncio.sleep(exc.retry_after if exc.retry_after is not None else 1.0)
            except ServerError:
                failed += 1
                if method not in IDEMPOTENT or failed > self.server_error_retries:
                    raise
                await asyncio.sleep(0.1 * 2 ** (failed - 1))

    # --- reads --------------------------------------------------------------------------
    async def get(self, kind: ResourceKind, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object. Raises NotFound."""
        return await self.request("GET", kind.path(namespace, name))

    async def list(
        self, kind: ResourceKind, namespace: str | None = None, *, label_selector: str | None = None,
        field_selector: str | None = None, limit: int | None = None, continue_: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """LIST one page: the ``<Kind>List`` dict (``items``, ``metadata.resourceVersion``,
        ``metadata.continue``). ``namespace=None`` lists all namespaces. Raises Gone when a
        ``continue_`` token expired."""
        query = [
            (k, _q(v)) for k, v in (
                ("labelSelector", label_selector), ("fieldSelector", field_selector), ("limit", limit),
                ("continue", continue_), ("resourceVersion", resource_version),
            ) if v is not None
        ]
        return await self.request("GET", kind.path(namespace), query=query, timeout=max(self.timeouts.request, 60.0))

    # --- writes -------------------------------------------------------------------------
    @staticmethod
    def _ns(kind: ResourceKind, body: Mapping[str, Any]) -> str | None:
        return body.get("metadata", {}).get("namespace") if kind.namespaced else None

    async def create(self, kind: ResourceKind, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new object (``metadata.namespace`` picks the namespace). Raises AlreadyExists, Invalid."""
        return await self.request("POST", kind.path(self._ns(kind, body)), body=dict(body))

    async def update(self, kind: ResourceKind, body: Mapping[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        """PUT the whole object; ``metadata.resourceVersion`` in ``body`` guards it (Conflict)."""
        meta = body["metadata"]
        return await self.request("PUT", kind.path(self._ns(kind, body), meta["name"], subresource), body=dict(body))

    async def update_status(self, kind: ResourceKind, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT on the ``/status`` subresource (only ``.status`` is written)."""
        return await self.update(kind, body, subresource="status")

    async def delete(
        self, kind: ResourceKind, name: str, namespace: str | None = None, *, propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None, ignore_not_found: bool = False,
    ) -> None:
        """DELETE with DeleteOptions (``propagation_policy``: Foreground/Background/Orphan;
        ``preconditions``: {"uid"|"resourceVersion": ...}). NotFound is swallowed when
        ``ignore_not_found``."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        try:
            await self.request("DELETE", kind.path(namespace, name), body=options)
        except NotFound:
            if not ignore_not_found:
                raise

    async def patch(
        self, kind: ResourceKind, name: str, namespace: str | None, patch: Any, *,
        patch_type: Literal["merge", "json"] = "merge", subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with an explicit Content-Type (runtime-facts §6.2: never let kubernetes_asyncio
        pick it): ``merge`` = RFC 7386 merge patch (dict), ``json`` = RFC 6902 ops (list).
        Unlike an apply, a PATCH never creates the object (404 NotFound when there is none).
        ``field_manager``: the manager its fields are recorded under (``managedFields``)."""
        query = [("fieldManager", field_manager)] if field_manager else []
        return await self.request(
            "PATCH", kind.path(namespace, name, subresource), query=query, body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )

    async def patch_status(self, kind: ResourceKind, name: str, namespace: str | None, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge patch on ``/status``."""
        return await self.patch(kind, name, namespace, dict(patch), subresource="status")

    async def apply(
        self, kind: ResourceKind, body: Mapping[str, Any], *, field_manager: str, force: bool = True,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply (``application/apply-patch+yaml``, JSON body) of ``body``, which
        carries apiVersion, kind, metadata.name (and namespace). ``field_manager`` is required
        (e.g. "banlieue.io/controller"); ``force`` takes over conflicting fields."""
        meta = body["metadata"]
        query = [("fieldManager", field_manager)] + ([("force", "true")] if force else [])
        return await self.request(
            "PATCH", kind.path(self._ns(kind, body), meta["name"], subresource), query=query, body=dict(body),
            content_type=PATCH_CONTENT_TYPES["apply"],
        )

    async def apply_status(self, kind: ResourceKind, body: Mapping[str, Any], *, field_manager: str, force: bool = True) -> dict[str, Any]:
        """Server-side apply on ``/status``."""
        return await self.apply(kind, body, field_manager=field_manager, force=force, subresource="status")

    async def _set_finalizers(self, kind: ResourceKind, obj: Mapping[str, Any], change: Callable[[builtins.list[str]], builtins.list[str]]) -> dict[str, Any]:
        current: Mapping[str, Any] = obj

        async def attempt() -> dict[str, Any]:
            nonlocal current
            meta = current["metadata"]
            before = list(meta.get("finalizers") or [])
            after = change(before)
            if after == before:
                return dict(current)
            # resourceVersion in a merge patch is a precondition: a stale read gets 409.
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": after or None}}
            try:
                return await self.patch(kind, meta["name"], meta.get("namespace"), patch)
            except Conflict:
                fresh = await self.get(kind, meta["name"], meta.get("namespace"))
                if meta.get("uid") and fresh["metadata"].get("uid") != meta.get("uid"):
                    # Re-created under the same name: the object read is gone, and its
                    # finalizers are never moved onto its successor.
                    raise NotFound(404, "NotFound", f"{kind.kind} {meta.get('namespace')}/{meta['name']} with uid "
                                   f"{meta['uid']} is gone (the name now holds uid {fresh['metadata'].get('uid')})") from None
                current = fresh
                raise

        return await retry_on_conflict(attempt)

    async def add_finalizer(self, kind: ResourceKind, obj: Mapping[str, Any], finalizer: str) -> dict[str, Any]:
        """Add ``finalizer`` (no-op when present), guarded by resourceVersion, re-read and
        retried on Conflict (DefaultRetry) while the name holds the same UID; NotFound when the
        object is gone or was re-created under its name. Returns the object as written."""
        return await self._set_finalizers(kind, obj, lambda fs: fs if finalizer in fs else [*fs, finalizer])

    async def remove_finalizer(self, kind: ResourceKind, obj: Mapping[str, Any], finalizer: str) -> dict[str, Any]:
        """Remove ``finalizer`` (no-op when absent); same concurrency rules as add_finalizer."""
        return await self._set_finalizers(kind, obj, lambda fs: [f for f in fs if f != finalizer])

    # --- watch --------------------------------------------------------------------------
    async def watch(
        self, kind: ResourceKind, namespace: str | None = None, *, resource_version: str | None,
        timeout_seconds: int, allow_bookmarks: bool = True, label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream raw watch events ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}``.

        Reads JSON lines with a read timeout of ``timeout_seconds`` + ``timeouts.watch_margin``
        (a dead connection ends with ServerError instead of hanging; runtime-facts §6.1).
        Ends when the server closes the stream. A non-2xx start raises the ApiError (e.g. Gone,
        TooManyRequests); ERROR events are yielded for the caller to map.
        """
        query = [("watch", "true"), ("timeoutSeconds", str(timeout_seconds))]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        for k, v in (("resourceVersion", resource_version), ("labelSelector", label_selector), ("fieldSelector", field_selector)):
            if v:
                query.append((k, v))
        timeout = aiohttp.ClientTimeout(connect=self.timeouts.connect, sock_connect=self.timeouts.connect,
                                        sock_read=timeout_seconds + self.timeouts.watch_margin)
        resp = await self._send("GET", kind.path(namespace), query, None, None, timeout)
        try:
            if resp.status != 200:
                raise from_response(resp.status, await resp.read(), dict(resp.headers))
            while True:
                try:
                    line = await resp.content.readline()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    raise ServerError(0, "WatchReadError", f"{type(exc).__name__}: {exc}") from exc
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release()

