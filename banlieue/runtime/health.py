"""Probe and metrics HTTP endpoints (controller-runtime ``pkg/healthz`` and metrics server).

``/healthz`` and ``/readyz`` (and ``/healthz/<check>``, ``/readyz/<check>``): 200 ``ok`` when
every check passes, else 500 with a ``[+]name ok`` / ``[-]name failed`` list; ``?verbose``
forces the list, ``?exclude=<name>`` skips a check; with no checks a ``ping`` check is used.
``/metrics``: prometheus_client's default registry; with ``metrics_auth`` over HTTPS behind
TokenReview + SubjectAccessReview (``runtime.metrics_auth``, on its own listener). Bind addresses
use Go's form: ":8080" (all interfaces), "127.0.0.1:0" (a free port; read ``bound_ports``), "0"
or "" = disabled.
"""

from __future__ import annotations

import inspect
import ssl
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from banlieue.runtime.metrics_auth import MetricsAuth, guarded

log = structlog.get_logger("banlieue.runtime.health")
Check = Callable[[], bool | Awaitable[bool]]


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """":8080" -> ("0.0.0.0", 8080); "127.0.0.1:0" -> ("127.0.0.1", 0); "0"/"" -> None."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


class HealthServer:
    """Serves probes on ``health_probe_bind_address`` and ``/metrics`` on
    ``metrics_bind_address`` (one listener when both are equal)."""

    def __init__(self, *, metrics_bind_address: str = ":8080", health_probe_bind_address: str = ":8081",
                 metrics_auth: MetricsAuth | None = None, metrics_ssl: ssl.SSLContext | None = None) -> None:
        self.metrics_address = parse_bind_address(metrics_bind_address)
        self.probe_address = parse_bind_address(health_probe_bind_address)
        self.metrics_auth = metrics_auth
        """When set, /metrics is served over ``metrics_ssl`` to authorized requests only."""
        self.metrics_ssl = metrics_ssl
        if metrics_auth is not None and self.metrics_address is not None and self.metrics_address == self.probe_address:
            raise ValueError("secure metrics need their own address: --metrics-bind-address equals --health-probe-bind-address")
        self.healthz_checks: dict[str, Check] = {}
        self.readyz_checks: dict[str, Check] = {}
        self._runners: list[web.AppRunner] = []
        self.bound_ports: dict[str, int] = {}
        """"metrics"/"probes" -> the port actually bound (after ``start``)."""

    def add_healthz_check(self, name: str, check: Check) -> None:
        """Liveness check ``name``: a (possibly async) callable returning True when healthy."""
        self.healthz_checks[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        """Readiness check ``name``."""
        self.readyz_checks[name] = check

    @staticmethod
    async def _run(check: Check) -> bool:
        try:
            result = check()
            return bool(await result) if inspect.isawaitable(result) else bool(result)
        except Exception:
            log.exception("probe check raised")
            return False

    def _handler(self, checks: dict[str, Check]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            only = request.match_info.get("check")
            excluded = set(request.query.getall("exclude", []))
            selected = dict(checks) or {"ping": lambda: True}
            if only is not None:
                if only not in selected:
                    return web.Response(status=404, text=f"no such check {only!r}\n")
                selected = {only: selected[only]}
            lines, healthy = [], True
            for name, check in selected.items():
                if name in excluded:
                    lines.append(f"[+]{name} excluded: ok")
                    continue
                passed = await self._run(check)
                healthy &= passed
                lines.append(f"[+]{name} ok" if passed else f"[-]{name} failed: reason withheld")
            if healthy and "verbose" not in request.query:
                return web.Response(text="ok")
            lines.append(f"{request.path.strip('/').split('/')[0]} check {'passed' if healthy else 'failed'}")
            return web.Response(status=200 if healthy else 500, text="\n".join(lines) + "\n")

        return handle

    @staticmethod
    async def _metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _probe_routes(self, app: web.Application) -> None:
        for path, checks in (("healthz", self.healthz_checks), ("readyz", self.readyz_checks)):
            handler = self._handler(checks)
            app.router.add_get(f"/{path}", handler)
            app.router.add_get(f"/{path}/{{check}}", handler)

    async def _serve(self, name: str, address: tuple[str, int], app: web.Application,
                     ssl_context: ssl.SSLContext | None = None) -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, address[0], address[1], ssl_context=ssl_context)
        await site.start()
        self._runners.append(runner)
        self.bound_ports[name] = int(runner.addresses[0][1])  # one site per runner
        log.info("serving", endpoint=name, host=address[0], port=self.bound_ports[name])

    async def start(self) -> None:
        """Bind and serve. Raises OSError when a port is taken."""
        if self.metrics_address is not None and self.metrics_address == self.probe_address:
            app = web.Application()
            app.router.add_get("/metrics", self._metrics)
            self._probe_routes(app)
            await self._serve("probes", self.probe_address, app)
            self.bound_ports["metrics"] = self.bound_ports["probes"]
            return
        if self.metrics_address is not None:
            app = web.Application()
            if self.metrics_auth is not None:
                app.router.add_get("/metrics", guarded(self.metrics_auth, self._metrics))
                await self._serve("metrics", self.metrics_address, app, self.metrics_ssl)
            else:
                app.router.add_get("/metrics", self._metrics)
                await self._serve("metrics", self.metrics_address, app)
        if self.probe_address is not None:
            app = web.Application()
            self._probe_routes(app)
            await self._serve("probes", self.probe_address, app)

    async def stop(self) -> None:
        """Close the listeners."""
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
