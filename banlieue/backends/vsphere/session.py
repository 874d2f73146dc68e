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

A vCenter that hangs instead (accepts connections, never answers) leaves its pool's requests
waiting for the request timeout: the endpoint's ``ReachabilityProbe`` (``health``, started after
the first login on it) notices it within seconds on its own connection, calls the same unreachable
and reconnect listeners, and ``SessionPool.unreachable_since`` tells since when it is silent.

Refused credentials: a login (first or again) that vCenter refuses with ``InvalidLogin`` tells
``SessionPool``'s refused listeners the Connection's ``provider`` (``namespace/name``), from the
thread that saw it. The provider role re-reads that Provider's credentials Secret then
(``reconcilers/refused``): a password rotated in vCenter and in the Secret is picked up at the
first login it breaks, not at the next periodic re-read of the Secret.

Identity (ADR 0013): each session reads ``ServiceContent.about`` at login and again at every
re-login (a vCenter restarted or replaced behind the same address answers NotAuthenticated first).
A Connection whose ``vcenter_instance_uuid`` is set runs calls only on a session whose vCenter has
that instance UUID; any other raises VCenterIdentityChanged before ``fn`` sends anything
(``SessionPool.run``, ``Session.call``, ``SessionPool.checked_session``).

Certificate check (CAPV #1718, #1134, #3372): a vCenter whose certificate is replaced by one the
Provider's CA bundle does not sign, on the same host and port, fails only *new* TLS connections;
kept-alive ones (the pool's, the change watch's long poll) would go on answering for minutes.
So every ``CERT_CHECK_SECONDS`` a daemon thread makes one TLS handshake (no HTTP request) per
https session with that session's own verification settings. When it fails verification the
session is marked (``Session.tls_error``): its kept-alive connections are closed, every later
call raises TLSVerifyFailed before anything is sent, and the unreachable listeners are told (the
Provider re-checks and reports ``TLSVerifyFailed`` within seconds). A later handshake that
verifies clears the mark; a changed CA bundle is a new Connection, hence a new session.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import http.client
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit
from xml.etree import ElementTree

import structlog
from pyVim import connect as _connect
from pyVmomi import VmomiSupport as _VmomiSupport
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import (
    AuthFailed,
    BackendError,
    Connection,
    TLSVerifyFailed,
    VCenterAbout,
    VCenterIdentityChanged,
)
from banlieue.backends.vsphere import metrics
from banlieue.backends.vsphere.allowlist import Network, check_endpoint
from banlieue.backends.vsphere.faults import map_exception
from banlieue.backends.vsphere.health import PROBE_INTERVAL, ReachabilityProbe, stub_factory

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl
Connect: Any = _connect.Connect
Disconnect: Any = _connect.Disconnect
VmomiSupport: Any = _VmomiSupport

T = TypeVar("T")
log = structlog.get_logger("banlieue.backends.vsphere")

RECONNECT_NOTIFY_SECONDS = 5.0
"""Least time between two "vCenter back" notifications of one endpoint."""
CERT_CHECK_SECONDS = 5.0
"""Interval of the TLS handshake that re-verifies each https session's vCenter certificate."""


def verify_certificate(host: str, port: int, context: ssl.SSLContext, timeout: float) -> str | None:
    """One TLS handshake with ``context`` (no request sent): the verification error message,
    or None when the certificate verifies or the server cannot be reached (that is the
    reachability check's business, not this one's)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"TLS certificate verification failed: {getattr(exc, 'verify_message', None) or exc}"
    except (OSError, ssl.SSLError):
        return None


SDK_PATH = "/sdk"
MAX_VERSIONS_DOCUMENT = 1 << 20
"""Bytes of ``vimServiceVersions.xml`` read at most (vCenter's is about 2 KiB)."""


def negotiate_version(protocol: str, host: str, port: int, context: ssl.SSLContext | None, timeout: float) -> str:
    """The most preferred ``vim25`` API version pyVmomi speaks that the server lists in
    ``/sdk/vimServiceVersions.xml`` (a ``namespaces`` document, version 1.0: each ``namespace``
    has a ``version`` and ``priorVersions/version`` ids), e.g. ``vim.version.v8_0_3_0``.

    What pyVmomi's ``SmartConnect`` does first, but with ``timeout`` seconds on the connection
    (connect, TLS handshake, every read): SmartConnect sends this GET with no timeout at all,
    so a vCenter that accepts the connection and never answers held the login forever.
    Raises what the connection raises (``TimeoutError``, ``ssl.SSLError``, ``OSError``,
    ``http.client.HTTPException``) and ``BackendError`` (reason ``NotVimServer``) when the
    document is missing or lists no version pyVmomi speaks."""
    conn: http.client.HTTPConnection
    if protocol == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", f"{SDK_PATH}/vimServiceVersions.xml")
        response = conn.getresponse()
        body = response.read(MAX_VERSIONS_DOCUMENT)
    finally:
        conn.close()
    offered: set[str] = set()
    if response.status == 200:
        with contextlib.suppress(ElementTree.ParseError):
            root = ElementTree.fromstring(body)
            if root.tag == "namespaces" and root.get("version") == "1.0":
                for ns in root.findall("namespace"):
                    offered.update(v.text or "" for v in [*ns.findall("version"), *ns.findall("priorVersions/version")])
    for version in VmomiSupport.GetServiceVersions("vim25"):
        if VmomiSupport.versionIdMap.get(version) in offered:
            return str(version)
    raise BackendError(f"{host}:{port} is not a vCenter: {SDK_PATH}/vimServiceVersions.xml answered "
                       f"{response.status} and lists no API version pyVmomi speaks", reason="NotVimServer")


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``host``, ``host:port`` or ``scheme://host[:port][/sdk]`` -> (protocol, host, port).

    The default is https on 443; ``http://`` is accepted for plain simulators only. Raises
    BackendError (``InvalidEndpoint``) for another scheme, no host, or a port out of 1-65535.
    """
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    parts = urlsplit(endpoint)
    protocol = parts.scheme or "https"
    if protocol not in ("https", "http") or not parts.hostname:
        raise BackendError(f"invalid vCenter endpoint {endpoint!r}", reason="InvalidEndpoint")
    try:
        port = parts.port or (443 if protocol == "https" else 80)
    except ValueError:  # urlsplit checks the port only when asked: out of 0-65535, not a number
        raise BackendError(f"invalid vCenter endpoint {endpoint!r}: the port is not in 1-65535",
                           reason="InvalidEndpoint", public=True) from None
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
        self.probe_requests = 0
        """Reachability probes sent (``count_probe``)."""
        self.answered_at = float("-inf")
        """Monotonic time the last round trip (``record``) got an answer (success or fault): the
        reachability probe is skipped within its interval of it (``health``)."""
        self.down = False
        """True after a round trip that got no answer, until one gets an answer (module docstring)."""
        self._on_back = on_back
        self._on_down = on_down
        self._notified_at = float("-inf")
        self.probe: ReachabilityProbe | None = None
        """The endpoint's reachability probe, once a session on it logged in (``health``)."""
        self.series: set[tuple[str, str, str]] = set()
        """(provider, method, outcome) label values this endpoint's round trips created in
        ``banlieue_vsphere_requests_total`` / ``..._request_duration_seconds``: the series
        ``SessionPool.release_unused`` removes once the provider uses nothing any more."""
        self.closed = False
        """Set by ``close``: the pool takes no new work; a session on it is dropped at next use."""
        self.refused: dict[str, float] = {}
        """Credentials this vCenter refused (``InvalidLogin``), by ``credentials_digest``:
        monotonic time of the refusal (``Session.login``, ``REFUSED_LOGIN_RETRY_SECONDS``)."""

    def refused_at(self, digest: str) -> float | None:
        """Monotonic time this vCenter refused the credentials of ``digest``, None if it did not."""
        with self._lock:
            return self.refused.get(digest)

    def note_refused(self, digest: str) -> None:
        """Remember that this vCenter refused the credentials of ``digest`` now."""
        with self._lock:
            self.refused[digest] = time.monotonic()

    def count_probe(self, method: str, outcome: str, seconds: float, provider: str) -> None:
        """Count one reachability probe in the metrics (label ``provider``) and in
        ``probe_requests``, not in ``soap_requests`` (the calls made for reconcilers, which
        tests and benchmarks compare per operation), without touching reachability (the probe
        tracks its own)."""
        with self._lock:
            self.probe_requests += 1
            # Released with the provider's other series (issue 23 case 6).
            self.series.add((provider, method, outcome))
        metrics.REQUESTS.labels(provider, method, outcome).inc()
        metrics.REQUEST_DURATION.labels(provider, method).observe(seconds)

    def close(self) -> None:
        """Stop the probe and the pool: its idle threads exit once the queued work (a logout)
        ran (issue 23 case 6). Idempotent."""
        self.closed = True
        if self.probe is not None:
            self.probe.stop()
        self.pool.shutdown(wait=False)

    def record(self, method: str, outcome: str, seconds: float, provider: str, *, series: bool = True) -> None:
        """Count one round trip (``outcome``: success, fault or error) of ``provider``'s session
        (``namespace/name``, the metrics' label) and track the endpoint's reachability.
        ``series`` False: no Prometheus series (a released session's last Logout must not
        re-create the series its release removed)."""
        back = down = False
        with self._lock:
            self.soap_requests += 1
            self.soap_by_method[method] = self.soap_by_method.get(method, 0) + 1
            if series:
                self.series.add((provider, method, outcome))
            if outcome == "error":
                down = not self.down
                self.down = True
            else:
                self.answered_at = time.monotonic()
                if self.down and time.monotonic() - self._notified_at >= RECONNECT_NOTIFY_SECONDS:
                    self.down = False
                    self._notified_at = time.monotonic()
                    back = True
        if series:
            metrics.REQUESTS.labels(provider, method, outcome).inc()
            metrics.REQUEST_DURATION.labels(provider, method).observe(seconds)
        if back and self._on_back is not None:
            log.info("vcenter reachable again", vcenter=self.label)
            self._on_back(self.label)
        if down and self._on_down is not None:
            log.info("vcenter not answering", vcenter=self.label, method=method)
            self._on_down(self.label)

    def instrument(self, stub: Any, provider: str, muted: Callable[[], bool] = lambda: False) -> None:
        """Wrap ``stub.InvokeMethod`` so every SOAP round trip is counted and timed for
        ``provider`` (no Prometheus series while ``muted()``)."""
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
                self.record(info.wsdlName, outcome, time.monotonic() - start, provider, series=not muted())

        stub.InvokeMethod = invoke


REFUSED_LOGIN_RETRY_SECONDS = 60.0
"""Seconds before credentials a vCenter refused (``InvalidLogin``) are sent to it again, unless
they change (a fixed Secret is tried at once). vCenter SSO's default lockout policy locks an
account after 5 failed logins within 180 s, for 300 s: every Provider and machine retrying a
wrong password on its own back-off sent 10 refused logins in 13 s (review of issue 22), enough
to lock a shared service account. At most 3 refused logins in any 180 s now come from banlieue."""


def credentials_digest(conn: Connection) -> str:
    """SHA-256 (hex) of the Connection's user and password: what ``Endpoint.refused`` keys on,
    so no password is kept beyond the Connection itself."""
    return hashlib.sha256(f"{conn.username}\0{conn.password}".encode()).hexdigest()


class Session:
    """A logged-in session for one Provider on one Endpoint. Methods block: run them in the
    endpoint's pool."""

    def __init__(self, conn: Connection, endpoint: Endpoint, request_timeout: float,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.conn = conn
        self._on_refused = on_refused
        self.endpoint = endpoint
        self.request_timeout = request_timeout
        self.protocol, self.host, self.port = parse_endpoint(conn.endpoint)
        self._login_lock = threading.Lock()
        self.generation = 0
        self.si: Any = None
        self.content: Any = None
        self.stub: Any = None
        self.tls_error: str | None = None
        """Set by the certificate check while the vCenter's certificate does not verify: no
        call is sent (module docstring)."""
        self.about: VCenterAbout | None = None
        """Who the session's vCenter is (``ServiceContent.about``), read at each (re-)login."""
        self.succeeded_at = float("-inf")
        """Monotonic time a call through this session (``call``) last returned: its vCenter
        accepted the session then, so it was still the one ``about`` names (another vCenter
        knows no session of this one's and answers NotAuthenticated, which logs in again and
        reads ``about`` anew)."""
        self._uncounted = False
        """True once ``forget_metrics`` took the session out of the sessions gauge."""
        self.extra_stubs: weakref.WeakSet[Any] = weakref.WeakSet()
        """Other stubs on this session (the change watch's; weak: they go with their watch):
        closed with the pool's when the certificate stops verifying."""

    def check_certificate(self) -> bool:
        """Re-verify the vCenter's certificate (one handshake); True when the mark changed.
        On failure, closes every kept-alive connection of the session's stubs."""
        if self.protocol != "https" or self.conn.insecure_skip_tls_verify:
            return False
        error = verify_certificate(self.host, self.port, ssl_context(self.conn), min(self.request_timeout, 10.0))
        changed = (error is None) != (self.tls_error is None)
        self.tls_error = error
        if error is not None:
            for stub in [self.stub, *self.extra_stubs]:
                if stub is not None:
                    with contextlib.suppress(Exception):
                        stub.DropConnections()
            if changed:
                log.warning("vcenter certificate no longer verifies", vcenter=self.endpoint.label,
                            provider=self.conn.provider, error=error)
        elif changed:
            log.info("vcenter certificate verifies again", vcenter=self.endpoint.label, provider=self.conn.provider)
        return changed

    def login(self) -> None:
        """Connect and log in: negotiate the API version (:func:`negotiate_version`), then
        pyVim's ``Connect`` (RetrieveServiceContent, Login), every round trip bounded by the
        request timeout. Raises BackendError."""
        start = time.monotonic()
        digest = credentials_digest(self.conn)
        refused_at = self.endpoint.refused_at(digest)
        if refused_at is not None and start - refused_at < REFUSED_LOGIN_RETRY_SECONDS:
            # Not sent: the same credentials were refused moments ago (REFUSED_LOGIN_RETRY_SECONDS).
            # Told to on_refused as a refusal is, so the Secret is re-read and a fixed one used.
            wait = REFUSED_LOGIN_RETRY_SECONDS - (start - refused_at)
            err = AuthFailed(f"vCenter {self.endpoint.label} refused these credentials {start - refused_at:.0f} s ago; "
                             f"they are sent again in {wait:.0f} s, or at once when the Secret changes "
                             "(vCenter locks an account after 5 refused logins in 180 s)")
            if self._on_refused is not None:
                self._on_refused(self.conn.provider)
            raise err
        try:
            context = ssl_context(self.conn) if self.protocol == "https" else None
            version = negotiate_version(self.protocol, self.host, self.port, context, self.request_timeout)
            si = Connect(
                host=self.host,
                port=self.port if self.protocol == "https" else -self.port,  # pyVmomi: negative = plain http
                user=self.conn.username,
                pwd=self.conn.password,
                version=version,
                path=SDK_PATH,
                sslContext=context,
                httpConnectionTimeout=self.request_timeout,
                connectionPoolTimeout=-1,
            )
        except Exception as exc:
            # A fault (InvalidLogin...) is an answer: the vCenter is reachable.
            outcome = "fault" if isinstance(exc, vmodl.MethodFault) else "error"
            self.endpoint.record("Login", outcome, time.monotonic() - start, self.conn.provider)
            raise self._login_error(exc) from exc
        # Version negotiation, RetrieveServiceContent and Login are 3 SOAP/HTTP round trips.
        self.endpoint.record("Login", "success", time.monotonic() - start, self.conn.provider)
        stub = si._stub
        stub.poolSize = max(stub.poolSize, self.endpoint.max_workers)
        self.endpoint.instrument(stub, self.conn.provider, lambda: self.released)
        self.si, self.stub = si, stub
        self.content = si.RetrieveContent()
        self._read_about()
        self.generation += 1
        metrics.SESSIONS.labels(self.conn.provider).inc()
        log.info("vsphere session opened", vcenter=self.endpoint.label, provider=self.conn.provider)

    def _login_error(self, exc: Exception) -> BackendError:
        """``map_exception(exc)`` for a failed login; an ``InvalidLogin`` (``AuthFailed`` with
        its own reason, not ``NoPermission``) is told to ``on_refused`` first (module docstring)."""
        err = map_exception(exc)
        if isinstance(err, AuthFailed) and err.reason == AuthFailed.reason:
            self.endpoint.note_refused(credentials_digest(self.conn))
            if self._on_refused is not None:
                self._on_refused(self.conn.provider)
        return err

    def _read_about(self) -> None:
        about = self.content.about
        self.about = VCenterAbout(instance_uuid=str(about.instanceUuid or ""), version=str(about.version or ""),
                                  api_type=str(about.apiType or ""), api_version=str(about.apiVersion or ""))

    def check_identity(self, expected: str | None) -> None:
        """Raise VCenterIdentityChanged when ``expected`` (a recorded instance UUID) is set and this
        session's vCenter is another one (module docstring). Sends nothing when it matches; on a
        mismatch, reads ``ServiceContent`` once more (no session needed, no VM touched) so that a
        vCenter that answers on the address again is seen at once."""
        if not expected or self.about is None or not self.about.instance_uuid or self.about.instance_uuid == expected:
            return
        try:
            self.content = self.si.RetrieveContent()
            self._read_about()
        except Exception as exc:
            raise map_exception(exc) from exc
        if self.about is None or self.about.instance_uuid == expected:
            return
        raise VCenterIdentityChanged(
            f"{self.conn.endpoint} reaches vCenter {self.about.instance_uuid}, not vCenter {expected} where "
            f"Provider {self.conn.provider}'s machines live (status.vcenter.instanceUUID): nothing was sent; "
            "point spec.connection.endpoint back at that vCenter"
        )

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
                # Another vCenter may answer on this address now (restarted, replaced): read
                # who it is before anything else is sent through the session.
                self.content = self.si.RetrieveContent()
                self._read_about()
            except Exception as exc:
                raise self._login_error(exc) from exc
            self.generation += 1

    def call(self, fn: Callable[[Session], T], expected: str | None = None) -> T:
        """Run ``fn(self)``; on NotAuthenticated re-login and retry once. Maps errors. Raises
        TLSVerifyFailed without sending anything while ``tls_error`` is set, and
        VCenterIdentityChanged (before ``fn``, and before its retry after a re-login) when
        ``expected`` is an instance UUID the session's vCenter does not have."""
        if self.tls_error is not None:
            raise TLSVerifyFailed(self.tls_error)
        self.check_identity(expected)
        generation = self.generation
        try:
            out = fn(self)
        except vim.fault.NotAuthenticated:
            self.relogin(generation)
        except Exception as exc:
            raise map_exception(exc) from exc
        else:
            self.succeeded_at = time.monotonic()
            return out
        self.check_identity(expected)
        try:
            out = fn(self)
        except Exception as exc:
            raise map_exception(exc) from exc
        self.succeeded_at = time.monotonic()
        return out

    @property
    def released(self) -> bool:
        """True once ``SessionPool.release_unused`` released the session: its stubs (the
        change watch's too) create no metric series any more."""
        return self._uncounted

    def forget_metrics(self) -> None:
        """Take this session out of ``banlieue_vsphere_sessions`` now (it is being released; its
        logout runs later in the pool and must not re-create a removed series)."""
        # No lock: a session is released only once it is in the pool's table (logged in), and
        # its logout is submitted after this ran.
        if self.si is not None and not self._uncounted:
            metrics.SESSIONS.labels(self.conn.provider).dec()
        self._uncounted = True

    def logout(self) -> None:
        if self.si is None:
            return
        try:
            Disconnect(self.si)
        except Exception as exc:  # logging out of a dead or expired session is not an error
            log.debug("vsphere logout failed", vcenter=self.endpoint.label, error=type(exc).__name__)
        finally:
            self.si = None
            if not self._uncounted:
                metrics.SESSIONS.labels(self.conn.provider).dec()


def _remove(metric: Any, *labels: str) -> None:
    """Remove one labelled series; absent is fine (never created, or removed already)."""
    try:
        metric.remove(*labels)
    except KeyError:
        pass


class SessionPool:
    """Sessions by ``Connection.session_key`` and endpoints by ``host:port``."""

    def __init__(self, max_workers: int = 8, request_timeout: float = 120.0,
                 probe_interval: float = PROBE_INTERVAL, allowed_networks: Sequence[Network] | None = None) -> None:
        self.max_workers = max_workers
        self.allowed_networks = tuple(allowed_networks) if allowed_networks is not None else None
        """``--allowed-endpoint-cidrs`` (``allowlist``); None: every endpoint may be dialled."""
        self.request_timeout = request_timeout
        self.probe_interval = probe_interval
        """Seconds between reachability probes of each vCenter; 0 disables them."""
        self.endpoints: dict[str, Endpoint] = {}
        self.sessions: dict[tuple[str, str, str], Session] = {}
        self._login_locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self._logging_in: dict[str, int] = {}
        """Endpoint label -> logins in flight there (not released meanwhile)."""
        self._listeners: list[Callable[[str], None]] = []
        self._down_listeners: list[Callable[[str], None]] = []
        self._refused_listeners: list[Callable[[str], None]] = []
        self._cert_stop = threading.Event()
        self._cert_thread: threading.Thread | None = None
        self.cert_check_seconds = CERT_CHECK_SECONDS

    def _check_certificates(self) -> None:
        """The certificate check loop (module docstring), on a daemon thread."""
        while not self._cert_stop.wait(self.cert_check_seconds):
            for sess in list(self.sessions.values()):
                try:
                    if sess.check_certificate():
                        self._notify(self._down_listeners if sess.tls_error else self._listeners,
                                     sess.endpoint.label, "certificate")
                except Exception as exc:  # one vCenter's failure must not stop the others' checks
                    log.debug("certificate check failed", vcenter=sess.endpoint.label, error=str(exc))

    def _start_certificate_check(self) -> None:
        if self._cert_thread is None:
            self._cert_thread = threading.Thread(target=self._check_certificates, name="vsphere certificate check", daemon=True)
            self._cert_thread.start()

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

    def add_refused_listener(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(provider)`` (``Connection.provider``, ``namespace/name``) when vCenter
        refuses a login of that Provider's credentials (``InvalidLogin``; module docstring), from
        the pool thread that saw it: it must not block. Returns the remover."""
        self._refused_listeners.append(callback)
        return lambda: self._refused_listeners.remove(callback) if callback in self._refused_listeners else None

    def _refused(self, provider: str) -> None:
        self._notify(self._refused_listeners, provider, "refused credentials")

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
        if existing is not None and not existing.endpoint.closed:
            return existing
        lock = self._login_locks.setdefault(key, asyncio.Lock())
        async with lock:
            existing = self.sessions.get(key)
            if existing is not None and not existing.endpoint.closed:
                return existing
            self.sessions.pop(key, None)
            endpoint = self.endpoint_for(conn)
            sess = Session(conn, endpoint, self.request_timeout, on_refused=self._refused)
            self._logging_in[endpoint.label] = self._logging_in.get(endpoint.label, 0) + 1
            def checked_login() -> None:
                if self.allowed_networks is not None:
                    check_endpoint(sess.host, sess.port, self.allowed_networks)  # before any connection
                sess.login()

            try:
                await asyncio.get_running_loop().run_in_executor(endpoint.pool, checked_login)
            finally:
                self._logging_in[endpoint.label] -= 1
                if not self._logging_in[endpoint.label]:
                    del self._logging_in[endpoint.label]
            self._drop_stale(conn)
            self.sessions[key] = sess
            self._start_probe(endpoint, sess)
            if sess.protocol == "https":
                self._start_certificate_check()
            return sess

    def _start_probe(self, endpoint: Endpoint, sess: Session) -> None:
        """Start ``endpoint``'s reachability probe (once), speaking the version ``sess`` negotiated."""
        if endpoint.probe is not None or self.probe_interval <= 0:
            return
        context = ssl_context(sess.conn) if sess.protocol == "https" else None
        make = stub_factory(sess.protocol, sess.host, sess.port, str(sess.stub.version), context)
        # Counted under the Provider whose session started it: one probe serves every Provider
        # on the vCenter (banlieue_vsphere_requests_total, method CurrentTime).
        provider = sess.conn.provider
        endpoint.probe = ReachabilityProbe(endpoint.label, make, on_down=self._down, on_back=self._back,
                                           interval=self.probe_interval, answered_at=lambda: endpoint.answered_at,
                                           record=lambda method, outcome, seconds: endpoint.count_probe(method, outcome, seconds, provider))
        endpoint.probe.start()

    def unreachable_since(self, conn: Connection) -> float | None:
        """Wall-clock seconds (epoch) since which ``conn``'s vCenter has not answered its
        reachability probe, or None (it answers, or no probe runs there yet)."""
        ep = self.endpoints.get(self.label_of(conn))
        return ep.probe.down_since if ep is not None and ep.probe is not None else None

    def seconds_since_answer(self, conn: Connection) -> float | None:
        """Seconds since ``conn``'s vCenter last answered a session request (any Provider's on
        that endpoint; the reachability probe's own are not counted), or None when none was
        answered yet. Raises BackendError (InvalidEndpoint)."""
        ep = self.endpoints.get(self.label_of(conn))
        if ep is None or ep.answered_at == float("-inf"):
            return None
        return time.monotonic() - ep.answered_at

    def _drop_stale(self, conn: Connection) -> None:
        """A Provider whose credentials changed gets a new key: log the old session out."""
        for key in [k for k in self.sessions if k[:2] == conn.session_key[:2] and k != conn.session_key]:
            old = self.sessions.pop(key)
            old.endpoint.pool.submit(old.logout)

    async def run(self, conn: Connection, fn: Callable[[Session], T], *, check_identity: bool = True) -> T:
        """Run blocking ``fn(session)`` in the vCenter's pool with re-login and error mapping.
        Raises VCenterIdentityChanged (nothing sent) when ``conn.vcenter_instance_uuid`` names
        another vCenter, unless ``check_identity`` is False (the identity probe itself). A
        session whose endpoint ``release_unused`` closed between finding it and submitting the
        call is replaced once by a fresh one."""
        expected = conn.vcenter_instance_uuid if check_identity else None
        for attempt in (1, 2):
            sess = await self.session(conn)
            try:
                return await asyncio.get_running_loop().run_in_executor(sess.endpoint.pool, sess.call, fn, expected)
            except RuntimeError:
                if attempt == 2 or not sess.endpoint.closed:
                    raise
        raise AssertionError("unreachable")

    async def checked_session(self, conn: Connection) -> Session:
        """``session(conn)`` after the identity check of ``run`` (for the change watch, which
        drives the session itself). Raises VCenterIdentityChanged."""
        sess = await self.session(conn)
        sess.check_identity(conn.vcenter_instance_uuid)
        return sess

    def release_unused(self, wanted: Callable[[tuple[str, str, str]], bool]) -> list[str]:
        """Issue 23 case 6: log out every session whose ``session_key`` ``wanted`` refuses (a
        deleted Provider, an old endpoint or credentials), close every endpoint left without a
        session or login in flight (its pool's threads exit, its probe stops) and remove the
        metric series of providers that hold no session any more. Returns the released
        endpoint labels (the backend drops their caches). Call from the event loop's thread."""
        for key in [k for k in self.sessions if not wanted(k)]:
            old = self.sessions.pop(key)
            self._login_locks.pop(key, None)
            old.forget_metrics()
            if not old.endpoint.closed:
                old.endpoint.pool.submit(old.logout)
        used = {s.endpoint.label for s in self.sessions.values()} | set(self._logging_in)
        released = [label for label in self.endpoints if label not in used]
        holders = {k[0] for k in self.sessions}
        every = list(self.endpoints.values())
        for label in released:
            self.endpoints.pop(label).close()
            log.info("vcenter endpoint released", vcenter=label)
        for ep in every:
            for series in [x for x in ep.series if x[0] not in holders]:
                ep.series.discard(series)
                _remove(metrics.REQUESTS, *series)
                _remove(metrics.REQUEST_DURATION, *series[:2])
                _remove(metrics.SESSIONS, series[0])
                _remove(metrics.TASKS_IN_FLIGHT, series[0])
        return released

    async def close(self) -> None:
        self._cert_stop.set()
        loop = asyncio.get_running_loop()
        sessions, self.sessions = list(self.sessions.values()), {}
        await asyncio.gather(
            *(loop.run_in_executor(s.endpoint.pool, s.logout) for s in sessions), return_exceptions=True
        )
        for ep in self.endpoints.values():
            if ep.probe is not None:
                ep.probe.stop()
            ep.pool.shutdown(wait=False, cancel_futures=True)
        self.endpoints.clear()
