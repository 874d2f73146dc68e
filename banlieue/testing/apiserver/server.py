"""The API-server double: an aiohttp application serving the Kubernetes REST API from memory.

``ApiServer`` owns the registry (builtin kinds + CRDs), the store, the write rules, the garbage
collector, fault injection and a request log. Start it in-process with :meth:`ApiServer.start`
(returns the base URL) and stop it with :meth:`ApiServer.stop`; ``python -m
banlieue.testing.apiserver`` runs it standalone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml
from aiohttp import web

from . import crds, discovery, errors, openapi, openapi_proto
from .builtin import builtin_types
from .errors import ApiError
from .faults import Faults
from .gc import GarbageCollector
from .handlers import handle_resource
from .resources import Registry, ResourceType
from .rest import Rest, WriteOptions
from .store import DEFAULT_HISTORY, Store
from .target import NOT_FOUND_PATH, parse_target
from .views import json_response

JSON = dict[str, Any]
log = structlog.get_logger(__name__)
CRD_GR = ("apiextensions.k8s.io", "customresourcedefinitions")
SNAPSHOT_VERSION = 1
"""Format version of :meth:`ApiServer.save` files."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class RequestRecord:
    """One served request (the request log)."""

    method: str
    path: str
    query: str
    status: int
    time: float  # seconds since the epoch when the request arrived
    duration: float  # seconds
    user_agent: str


class ApiServer:
    """In-memory kube-apiserver double.

    ``bookmark_interval``: seconds between watch BOOKMARK events (kube: about a minute).
    ``history_size``: events kept per group resource for watch resumption.
    """

    def __init__(self, *, bookmark_interval: float = 60.0, history_size: int = DEFAULT_HISTORY,
                 request_log_size: int = 100_000) -> None:
        self.bookmark_interval = bookmark_interval
        self.store = Store(history_size)
        self.registry = Registry()
        for rt in builtin_types():
            self.registry.add(rt)
        self.rest = Rest(self.store)
        self.rest.strategies[CRD_GR] = self._crd_strategy
        self.rest.on_change.append(self._on_change)
        self.gc = GarbageCollector(self.rest, self.registry)
        self.rest.on_change.append(self.gc.observe)
        self.faults = Faults()
        self.requests: deque[RequestRecord] = deque(maxlen=request_log_size)
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._gc_task: asyncio.Task[None] | None = None
        self._openapi_v2: JSON | None = None
        self._openapi_v2_pb: bytes | None = None
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.rest.create(self.registry.get("", "v1", "namespaces"),  # type: ignore[arg-type]
                             "", {"metadata": {"name": ns}}, WriteOptions(field_manager="kube-apiserver"))

    # -- CRDs ----------------------------------------------------------------------------------

    def _crd_strategy(self, obj: JSON, old: JSON | None) -> list[JSON]:
        crds.default_crd(obj)
        causes = crds.validate_crd(obj) + crds.validate_crd_update(obj, old)
        if not causes:
            crds.set_status(obj, old, self.rest.clock())
        return causes

    def _on_change(self, rt: ResourceType, obj: JSON) -> None:
        if rt.group_resource != CRD_GR:
            return
        self._openapi_v2 = None
        spec = obj["spec"]
        group, plural = spec["group"], spec["names"]["plural"]
        live = self.store.get(CRD_GR, "", obj["metadata"]["name"])
        self.registry.remove_group_resource(group, plural)
        if live is None:
            # The cleanup finalizer emptied it already; drop leftovers of a forced removal, and end
            # the watches of a resource that no longer exists (kube closes them too).
            self.store.drop_group_resource((group, plural))
            for w in self.store.watchers():
                if w.gr == (group, plural):
                    w.stop()
            return
        for new_rt in crds.resource_types(live):
            self.registry.add(new_rt)

    def crd_objects(self) -> list[JSON]:
        """Every stored CRD."""
        return [o for _, o in self.store.items(CRD_GR)]

    def load_crd(self, crd: JSON) -> JSON:
        """Create (or replace the spec of) a CRD from a dict; returns the stored CRD. Raises ApiError."""
        rt = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rt is not None
        body = copy.deepcopy(crd)
        name = (body.get("metadata") or {}).get("name", "")
        opts = WriteOptions(field_manager="banlieue-apiserver-double")
        body.setdefault("metadata", {}).pop("resourceVersion", None)
        if self.store.get(CRD_GR, "", name) is not None:
            live = self.store.get(CRD_GR, "", name)
            assert live is not None
            body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            return self.rest.update(rt, "", name, body, opts)
        return self.rest.create(rt, "", body, opts)

    def load_crd_dir(self, path: str | Path) -> int:
        """Load every CRD document from ``*.yaml``/``*.yml``/``*.json`` files under ``path``; returns count."""
        n = 0
        for f in sorted(Path(path).rglob("*")):
            if f.suffix not in (".yaml", ".yml", ".json") or not f.is_file():
                continue
            for doc in yaml.safe_load_all(f.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    self.load_crd(doc)
                    n += 1
        return n

    # -- persistence (banlieue dev --keep-state) ---------------------------------------------------

    def snapshot(self) -> JSON:
        """Every stored object and the revision counter: ``{"version": 1, "revision": N,
        "objects": [{"group", "resource", "object"}...]}``, CRDs first (what :meth:`restore`
        needs to serve the others). Event history, watches and the request log are not kept."""
        entries = [{"group": gr[0], "resource": gr[1], "object": obj}
                   for gr in sorted(self.store.group_resources(), key=lambda g: (g != CRD_GR, g))
                   for _, obj in self.store.items(gr)]
        return {"version": SNAPSHOT_VERSION, "revision": self.store.rv, "objects": entries}

    def save(self, path: Path) -> None:
        """Write :meth:`snapshot` to ``path`` atomically (a temporary file renamed over it), so a
        kill during the write leaves the previous snapshot. Raises OSError."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.snapshot(), separators=(",", ":")), encoding="utf-8")
        tmp.replace(path)

    def restore(self, path: Path) -> int:
        """Load a :meth:`save` file into this (new, not yet started) server; returns the number of
        objects. Objects keep their UID, resourceVersion, generation, status and managedFields;
        CRDs are served again; the revision counter continues after the saved one and the event
        history starts empty (every older resourceVersion is compacted: watches and continue
        tokens of the previous process get 410 Gone, as after an etcd compaction).
        Raises ValueError for a file that is not such a snapshot, OSError when it cannot be read."""
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.get("version") != SNAPSHOT_VERSION or not isinstance(doc.get("objects"), list):
            raise ValueError(f"{path} is not an API-server double snapshot (version {SNAPSHOT_VERSION})")
        crd_rt = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_rt is not None
        top = self.store.rv
        for entry in doc["objects"]:
            gr, obj = (str(entry["group"]), str(entry["resource"])), entry["object"]
            rv = int(obj["metadata"].get("resourceVersion") or 0)
            top = max(top, rv)
            self.store.put(gr, obj, rv)
            if gr == CRD_GR:
                self._on_change(crd_rt, obj)
        self.store.rv = max(top, int(doc.get("revision") or 0))
        self.store.compact()
        for entry in doc["objects"]:
            rt = self.registry.for_group_resource(str(entry["group"]), str(entry["resource"]))
            if rt is not None:
                self.gc.observe(rt, entry["object"])  # a namespace or object left mid-deletion
        return len(doc["objects"])

    # -- fault helpers -------------------------------------------------------------------------

    def drop_watches(self) -> int:
        """Close every open watch stream now; returns how many."""
        ws = self.store.watchers()
        for w in ws:
            w.stop()
        return len(ws)

    def compact(self) -> None:
        """Drop the event history: watches and continue tokens from older revisions get 410."""
        self.store.compact()

    def request_log(self, *, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        """Served requests, oldest first, optionally filtered by method and path substring."""
        return [r for r in self.requests
                if (method is None or r.method == method) and (path_contains is None or path_contains in r.path)]

    # -- HTTP ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started, t0 = time.time(), time.monotonic()
        status = 500
        try:
            api = request.path.startswith(("/api/", "/apis/")) or request.path in ("/api", "/apis")
            if api and self.faults.latency > 0:
                await asyncio.sleep(self.faults.latency)
            if api:
                injected = self.faults.pick_error(request.method, request.path, request.query_string)
                if injected is not None:
                    raise injected
            resp = await handler(request)
            status = resp.status
            return resp
        except ApiError as e:
            status = e.code
            return json_response(e.status(), e.code, headers=None) if not e.headers else \
                web.Response(body=json.dumps(e.status()).encode(), status=e.code, content_type="application/json",
                             headers=e.headers)
        except web.HTTPException as e:
            status = e.status
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug in the double: answer as kube does (500 Status), keep serving
            log.exception("apiserver double request failed", method=request.method, path=request.path)
            err = errors.internal_error(f"{type(e).__name__}: {e}")
            status = err.code
            return json_response(err.status(), err.code)
        finally:
            if not request.path.startswith("/debug/"):
                self.requests.append(RequestRecord(request.method, request.path, request.query_string, status,
                                                   started, time.monotonic() - t0,
                                                   request.headers.get("User-Agent", "")))

    def make_app(self) -> web.Application:
        """The aiohttp application (one catch-all route; routing is done here)."""
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._route)
        return app

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        segs = [s for s in path.split("/") if s]
        if path in ("/healthz", "/readyz", "/livez") or (segs and segs[0] in ("healthz", "readyz", "livez")):
            return web.Response(text="ok", content_type="text/plain")
        if segs and segs[0] == "debug":
            return await self._debug(request, segs)
        if path == "/version":
            return json_response(discovery.version_info())
        if segs[:1] == ["openapi"]:
            return self._openapi(request, segs)
        accept = request.headers.get("Accept", "")
        if segs == ["api"]:
            agg = discovery.wants_aggregated(accept)
            if agg:
                return self._aggregated(discovery.aggregated(self.registry, legacy=True, version=agg), agg)
            return json_response(discovery.api_versions(request.host))
        if segs == ["apis"]:
            agg = discovery.wants_aggregated(accept)
            if agg:
                return self._aggregated(discovery.aggregated(self.registry, legacy=False, version=agg), agg)
            return json_response(discovery.api_group_list(self.registry))
        if len(segs) >= 2 and segs[0] == "api":
            if segs[1] != "v1":
                raise NOT_FOUND_PATH
            if len(segs) == 2:
                return json_response(discovery.api_resource_list(self.registry, "", "v1") or {})
            return await handle_resource(self, parse_target(self.registry, "", "v1", segs[2:]), request)
        if len(segs) >= 2 and segs[0] == "apis":
            group = segs[1]
            if len(segs) == 2:
                doc = discovery.api_group(self.registry, group)
                if doc is None:
                    raise NOT_FOUND_PATH
                return json_response(doc)
            if len(segs) == 3:
                doc = discovery.api_resource_list(self.registry, group, segs[2])
                if doc is None:
                    raise NOT_FOUND_PATH
                return json_response(doc)
            return await handle_resource(self, parse_target(self.registry, group, segs[2], segs[3:]), request)
        raise NOT_FOUND_PATH

    @staticmethod
    def _aggregated(doc: JSON, version: str) -> web.Response:
        return web.Response(body=json.dumps(doc, separators=(",", ":")).encode(),
                            headers={"Content-Type": discovery.AGGREGATED_CT.format(v=version)})

    def _openapi(self, request: web.Request, segs: list[str]) -> web.Response:
        crd_list = self.crd_objects()
        if segs == ["openapi", "v2"]:
            if self._openapi_v2 is None:
                self._openapi_v2 = openapi.openapi_v2(crd_list)
                self._openapi_v2_pb = None
            if "protobuf" in request.headers.get("Accept", ""):
                if self._openapi_v2_pb is None:
                    self._openapi_v2_pb = openapi_proto.document(self._openapi_v2)
                return web.Response(body=self._openapi_v2_pb,
                                    headers={"Content-Type": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"})
            return json_response(self._openapi_v2)
        if segs == ["openapi", "v3"]:
            gvs = ["api/v1"] + [f"apis/{g}/{v}" for g, vs in self.registry.group_versions().items() if g for v in vs]
            return json_response(openapi.openapi_v3_index(gvs))
        if len(segs) == 4 and segs[:3] == ["openapi", "v3", "api"]:
            return json_response(openapi.openapi_v3_doc("", segs[3], crd_list))
        if len(segs) == 5 and segs[:3] == ["openapi", "v3", "apis"]:
            if discovery.api_resource_list(self.registry, segs[3], segs[4]) is None:
                raise NOT_FOUND_PATH
            return json_response(openapi.openapi_v3_doc(segs[3], segs[4], crd_list))
        raise NOT_FOUND_PATH

    async def _debug(self, request: web.Request, segs: list[str]) -> web.Response:
        if segs == ["debug", "requests"]:
            # GET lists served requests (filters: ?method=POST&pathContains=/configmaps); DELETE clears.
            if request.method == "DELETE":
                self.requests.clear()
            records = self.request_log(method=request.query.get("method"),
                                       path_contains=request.query.get("pathContains"))
            return json_response({"items": [asdict(r) for r in records]})
        if segs != ["debug", "faults"]:
            raise NOT_FOUND_PATH
        if request.method == "DELETE":
            self.faults.clear()
        elif request.method == "POST":
            try:
                body = await request.json()
                if not isinstance(body, dict):
                    raise ValueError("body must be an object")
                self.faults.update_from_json(body)
            except (ValueError, KeyError, TypeError) as e:
                raise errors.bad_request(f"invalid fault configuration: {e}") from e
            if body.get("dropWatches"):
                self.drop_watches()
            if body.get("compact"):
                self.compact()
        return json_response(self.faults.to_json())

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0 = a free port); returns the base URL ``http://host:port``."""
        self._runner = web.AppRunner(self.make_app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, shutdown_timeout=0.5)
        await site.start()
        server = site._server
        assert server is not None
        sock = server.sockets[0]  # type: ignore[attr-defined]
        real_port = sock.getsockname()[1]
        self.url = f"http://{host}:{real_port}"
        self._gc_task = asyncio.create_task(self.gc.run(), name="apiserver-gc")
        log.debug("apiserver double listening", url=self.url)
        return self.url

    async def stop(self) -> None:
        """Close watches, stop the garbage collector and the listener."""
        self.drop_watches()
        if self._gc_task is not None:
            self._gc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gc_task
            self._gc_task = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
