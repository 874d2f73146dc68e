"""vCenter sessions: one logged-in pyvmomi session per Provider, a bounded thread pool per vCenter.

- ``Endpoint``: one per vCenter (``host:port``): a ThreadPoolExecutor (``max_workers``, default
  8) in which every blocking pyvmomi call runs, a SOAP request counter and the metrics labels.
  Pools are per vCenter, so a slow or dead vCenter only ever occupies its own threads.
- ``Session``: one per ``Connection.session_key`` (provider, endpoint, credentials
  fingerprint). ``call(fn)`` runs ``fn(session)`` and, on ``vim.fault.NotAuthenticated`` (session
  expired or terminated), logs in again and retries ``fn`` once.
- ``SessionPool``: finds or creates both, asynchronously; no lock is held across I/O except the
  per-session login lock (so one Provider's login never blocks another's).

Every SOAP round trip (including Login and long polls) goes through ``Endpoint.record`` via a
wrapper around the stub's ``InvokeMethod``: that is what ``banlieue_vsphere_requests_total``
and the benchmark's "SOAP requests per VM" count.

Reachability: an endpoint is *down* after a round trip that got no answer (outcome ``error``:
refused, reset, timed out) and *back* at the next one that got an answer (``success``, or a
``fault``: vCenter answered, e.g. NotAuthenticated after its restart). ``SessionPool``'s
reconnect listeners hear ``back`` (the endpoint label, from the thread that saw it), at most
once per ``RECONNECT_NOTIFY_SECONDS`` per endpoint (a flapping vCenter stays down until then);
its unreachable listeners hear the transition to *down* (the first unanswered round trip after
answered ones), so a Provider's reachability is re-checked when it changes instead of at the
next periodic refresh.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import structlog
from pyVim import connect as _connect
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import BackendError, Connection, TLSVerifyFailed
from banlieue.backends.vsphere import metrics
from banlieue.backends.vsphere.faults import map_exception

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl
SmartConnect: Any = _connect.SmartConnect
Disconnect: Any = _connect.Disconnect

T = TypeVar("T")
log = structlog.get_logger("banlieue.backends.vsphere")

RECONNECT_NOTIFY_SECONDS = 5.0
"""Least time between two "vCenter back" notifications of one endpoint."""


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``host``, ``host:port`` or ``scheme://host[:port][/sdk]`` -> (protocol, host, port).

    The default is https on 443; ``http://`` is accepted for plain simulators only.
    """
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    parts = urlsplit(endpoint)
    protocol = parts.scheme or "https"
    if protocol not in ("https", "http") or not parts.hostname:
        raise BackendError(f"invalid vCenter endpoint {endpoint!r}", reason="InvalidEndpoint")
    port = parts.port or (443 if protocol == "https" else 80)
    return protocol, parts.hostname, port


def ssl_context(conn: Connection) -> ssl.SSLContext:
    """Verified by default: the Provider's CA bundle (PEM) if given, else the system roots.

    ``insecure_skip_tls_verify`` disables verification only when explicitly set (SPEC §2).
    Raises TLSVerifyFailed when the bundle is not valid PEM.
    """
    if conn.insecure_skip_tls_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if conn.ca_bundle:
        try:
            return ssl.create_default_context(cadata=conn.ca_bundle)
        except (ssl.SSLError, ValueError, TypeError) as exc:  # TypeError: text that is not ASCII
            # A configuration error, reported as TLSVerifyFailed like the reconcilers' own check
            # (connection.check_ca_bundle), which normally catches it before any call.
            raise TLSVerifyFailed(f"spec.connection.caBundle is not a valid PEM certificate bundle: {exc}") from exc
    return ssl.create_default_context()


class Endpoint:
    """One vCenter: its thread pool and request accounting."""

    def __init__(self, label: str, max_workers: int, on_back: Callable[[str], None] | None = None,
                 on_down: Callable[[str], None] | None = None) -> None:
        self.label = label
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"vsphere-{label}")
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self.soap_requests = 0
        self.soap_by_method: dict[str, int] = {}
        self.down = False
        """True after a round trip that got no answer, until one gets an answer (module docstring)."""
        self._on_back = on_back
        self._on_down = on_down
        self._notified_at = float("-inf")

    def record(self, method: str, outcome: str, seconds: float) -> None:
        """Count one round trip (``outcome``: success, fault or error) and track reachability."""
        back = down = False
        with self._lock:
            self.soap_requests += 1
            self.soap_by_method[method] = self.soap_by_method.get(method, 0) + 1
            if outcome == "error":
                down = not self.down
                self.down = True
            elif self.down and time.monotonic() - self._notified_at >= RECONNECT_NOTIFY_SECONDS:
                self.down = False
                self._notified_at = time.monotonic()
                back = True
        metrics.REQUESTS.labels(self.label, method, outcome).inc()
        metrics.REQUEST_DURATION.labels(self.label, method).observe(seconds)
        if back and self._on_back is not None:
            log.info("vcenter reachable again", vcenter=self.label)
            self._on_back(self.label)
        if down and self._on_down is not None:
            log.info("vcenter not answering", vcenter=self.label, method=method)
            self._on_down(self.label)

    def instrument(self, stub: Any) -> None:
        """Wrap ``stub.InvokeMethod`` so every SOAP round trip is counted and timed."""
        original = stub.InvokeMethod

        @functools.wraps(original)
        def invoke(mo: Any, info: Any, args: Any, outerStub: Any = None) -> Any:
            start = time.monotonic()
            outcome = "error"
            try:
                result = original(mo, info, args, outerStub)
                outcome = "success"
                return result
            except BaseException as exc:
                if isinstance(exc, vmodl.MethodFault):
                    outcome = "fault"
                raise
            finally:
                self.record(info.wsdlName, outcome, time.monotonic() - start)

        stub.InvokeMethod = invoke


class Session:
    """A logged-in session for one Provider on one Endpoint. Methods block: run them in the
    endpoint's pool."""

    def __init__(self, conn: Connection, endpoint: Endpoint, request_timeout: float) -> None:
        self.conn = conn
        self.endpoint = endpoint
        self.request_timeout = request_timeout
        self.protocol, self.host, self.port = parse_endpoint(conn.endpoint)
        self._login_lock = threading.Lock()
        self.generation = 0
        self.si: Any = None
        self.content: Any = None
        self.stub: Any = None

    def login(self) -> None:
        """Connect and log in (SmartConnect negotiates the API version). Raises BackendError."""
        start = time.monotonic()
        try:
            si = SmartConnect(
                protocol=self.protocol,
                host=self.host,
                port=self.port,
                user=self.conn.username,
                pwd=self.conn.password,
                sslContext=ssl_context(self.conn) if self.protocol == "https" else None,
                httpConnectionTimeout=self.request_timeout,
                connectionPoolTimeout=-1,
            )
        except Exception as exc:
            # A fault (InvalidLogin...) is an answer: the vCenter is reachable.
            outcome = "fault" if isinstance(exc, vmodl.MethodFault) else "error"
            self.endpoint.record("Login", outcome, time.monotonic() - start)
            raise map_exception(exc) from exc
        # Version negotiation, RetrieveServiceContent and Login are 3 SOAP/HTTP round trips.
        self.endpoint.record("Login", "success", time.monotonic() - start)
        stub = si._stub
        stub.poolSize = max(stub.poolSize, self.endpoint.max_workers)
        self.endpoint.instrument(stub)
        self.si, self.stub = si, stub
        self.content = si.RetrieveContent()
        self.generation += 1
        metrics.SESSIONS.labels(self.endpoint.label).inc()
        log.info("vsphere session opened", vcenter=self.endpoint.label, provider=self.conn.provider)

    def relogin(self, seen_generation: int) -> None:
        """Log in again on the same stub unless another thread already did since
        ``seen_generation`` (so N failing workers cause one Login, not N)."""
        with self._login_lock:
            if self.generation != seen_generation:
                return
            log.info("vsphere session lost; logging in again", vcenter=self.endpoint.label, provider=self.conn.provider)
            self.stub.SetSessionId(None)
            try:
                self.content.sessionManager.Login(self.conn.username, self.conn.password)
            except Exception as exc:
                raise map_exception(exc) from exc
            self.generation += 1

    def call(self, fn: Callable[[Session], T]) -> T:
        """Run ``fn(self)``; on NotAuthenticated re-login and retry once. Maps errors."""
        generation = self.generation
        try:
            return fn(self)
        except vim.fault.NotAuthenticated:
            self.relogin(generation)
        except Exception as exc:
            raise map_exception(exc) from exc
        try:
            return fn(self)
        except Exception as exc:
            raise map_exception(exc) from exc

    def logout(self) -> None:
        if self.si is None:
            return
        try:
            Disconnect(self.si)
        except Exception as exc:  # logging out of a dead or expired session is not an error
            log.debug("vsphere logout failed", vcenter=self.endpoint.label, error=type(exc).__name__)
        finally:
            self.si = None
            metrics.SESSIONS.labels(self.endpoint.label).dec()


class SessionPool:
    """Sessions by ``Connection.session_key`` and endpoints by ``host:port``."""

    def __init__(self, max_workers: int = 8, request_timeout: float = 120.0) -> None:
        self.max_workers = max_workers
        self.request_timeout = request_timeout
        self.endpoints: dict[str, Endpoint] = {}
        self.sessions: dict[tuple[str, str, str], Session] = {}
        self._login_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._down_listeners: list[Callable[[str], None]] = []

    @staticmethod
    def label_of(conn: Connection) -> str:
        """The endpoint label ``host:port`` of ``conn``. Raises BackendError (InvalidEndpoint)."""
        _, host, port = parse_endpoint(conn.endpoint)
        return f"{host}:{port}"

    def endpoint_for(self, conn: Connection) -> Endpoint:
        label = self.label_of(conn)
        ep = self.endpoints.get(label)
        if ep is None:
            ep = self.endpoints[label] = Endpoint(label, self.max_workers, on_back=self._back, on_down=self._down)
        return ep

    def add_reconnect_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(label)`` when an endpoint is reachable again (module docstring), from
        whichever thread saw it: it must not block. Returns the function that removes it."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def add_unreachable_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(label)`` when an endpoint that answered stops answering (module
        docstring), from whichever thread saw it: it must not block. Returns the remover."""
        self._down_listeners.append(callback)
        return lambda: self._down_listeners.remove(callback) if callback in self._down_listeners else None

    def _back(self, label: str) -> None:
        self._notify(self._listeners, label, "reconnect")

    def _down(self, label: str) -> None:
        self._notify(self._down_listeners, label, "unreachable")

    @staticmethod
    def _notify(listeners: list[Callable[[str], None]], label: str, what: str) -> None:
        for callback in list(listeners):
            try:
                callback(label)
            except Exception:  # a listener's bug must not fail the SOAP call that noticed
                log.exception(f"{what} listener failed", vcenter=label)

    async def session(self, conn: Connection) -> Session:
        """The logged-in session for ``conn`` (logging in on first use, in the endpoint's pool)."""
        key = conn.session_key
        existing = self.sessions.get(key)
        if existing is not None:
            return existing
        lock = self._login_locks.setdefault(key, asyncio.Lock())
        async with lock:
            existing = self.sessions.get(key)
            if existing is not None:
                return existing
            endpoint = self.endpoint_for(conn)
            sess = Session(conn, endpoint, self.request_timeout)
            await asyncio.get_running_loop().run_in_executor(endpoint.pool, sess.login)
            self._drop_stale(conn)
            self.sessions[key] = sess
            return sess

    def _drop_stale(self, conn: Connection) -> None:
        """A Provider whose credentials changed gets a new key: log the old session out."""
        for key in [k for k in self.sessions if k[:2] == conn.session_key[:2] and k != conn.session_key]:
            old = self.sessions.pop(key)
            old.endpoint.pool.submit(old.logout)

    async def run(self, conn: Connection, fn: Callable[[Session], T]) -> T:
        """Run blocking ``fn(session)`` in the vCenter's pool with re-login and error mapping."""
        sess = await self.session(conn)
        return await asyncio.get_running_loop().run_in_executor(sess.endpoint.pool, sess.call, fn)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        sessions, self.sessions = list(self.sessions.values()), {}
        await asyncio.gather(
            *(loop.run_in_executor(s.endpoint.pool, s.logout) for s in sessions), return_exceptions=True
        )
        for ep in self.endpoints.values():
            ep.pool.shutdown(wait=False, cancel_futures=True)
        self.endpoints.clear()
