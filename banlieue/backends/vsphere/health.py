"""vCenter reachability in seconds: a ``CurrentTime`` probe per vCenter, off the worker pool.

Why: the worker pool's requests time out after the request timeout (120 s) and the change watch's
long poll after ``max_wait + 60`` s, so a vCenter that hangs (accepts connections, never answers:
a frozen VM, a SIGSTOPped vcsim) was noticed after minutes, during which the scheduler kept
placing VMs on it (issue 21).

What: one daemon thread per vCenter endpoint (``ReachabilityProbe``), started when the first
session on it has logged in, sends ``ServiceInstance.CurrentTime`` every ``interval`` seconds
(default ``PROBE_INTERVAL``, 5 s) on its own HTTP connection, opened for each probe and closed
after it (its own ``SoapStubAdapter``, not the sessions' stubs, whose pooled connections may all
be stuck in hung requests; never kept alive, so a replaced certificate is verified again) with a socket
timeout of ``timeout`` seconds (default ``PROBE_TIMEOUT``, 5 s). No session is needed: a SOAP
fault (``NotAuthenticated``) is an answer too, and so is a TLS certificate that does not verify
(the server spoke; the sessions report ``TLSVerifyFailed``). A vCenter that does not answer is
therefore noticed within ``interval + timeout`` (10 s) of freezing, and one that answers again
within ``interval`` (5 s).

A probe is skipped while the vCenter answers anyway (``answered_at``: the monotonic time the
sessions' last round trip got an answer; issue 22, no request that only repeats what another
request just showed): the probe waits until ``interval`` seconds after that answer, and probes
then if no other answer came meanwhile. A vCenter that freezes answers nothing from then on, so
the first probe is still sent within ``interval`` of the last answer, and the freeze noticed
within ``interval + timeout`` as before. While ``down_since`` is set every probe is sent (the
sessions' requests are held back then; the probe is how the return is noticed).

``down_since`` (wall-clock seconds since the epoch, or None while it answers) is the send time of
the first probe it did not answer: the moment it stopped answering, to within one interval. The
Provider reconciler reports it as ``ProviderReachable``'s ``lastTransitionTime`` and, while it is
set, does not send the Provider's own requests (which would hang for the request timeout).
Transitions call ``on_down(label)`` / ``on_back(label)`` from the probe thread (they must not
block): the session pool's reachability listeners. Each probe is counted by ``record(method,
outcome, seconds)`` when given (the session pool counts it in ``banlieue_vsphere_requests_total``
and the endpoint's request counters, outcome ``success``, ``fault`` or ``error`` as for any call).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl
from pyVmomi.SoapAdapter import SoapStubAdapter as _SoapStubAdapter

vim: Any = _vim
vmodl: Any = _vmodl
SoapStubAdapter: Any = _SoapStubAdapter

log = structlog.get_logger("banlieue.backends.vsphere")

PROBE_INTERVAL = 5.0
"""Seconds between two probes of one vCenter: issue 22's ceiling for an idle vCenter (at most one
health request every 5 s); with ``PROBE_TIMEOUT`` a hung vCenter is still noticed within 10 s (issue
21 asks 15 s)."""
PROBE_TIMEOUT = 5.0
"""Socket timeout of one probe (connect, TLS handshake, answer), seconds."""


class ReachabilityProbe:
    """Probes one vCenter (module docstring). ``make_stub()`` returns a fresh SOAP stub with its
    own connection and a ``timeout``-second socket timeout; ``clock`` is the wall clock
    (seconds since the epoch) of ``down_since``."""

    def __init__(
        self,
        label: str,
        make_stub: Callable[[], Any],
        on_down: Callable[[str], None],
        on_back: Callable[[str], None],
        interval: float = PROBE_INTERVAL,
        clock: Callable[[], float] = time.time,
        record: Callable[[str, str, float], None] | None = None,
        answered_at: Callable[[], float] | None = None,
    ) -> None:
        self.label = label
        self.interval = interval
        self._make_stub = make_stub
        self._on_down = on_down
        self._on_back = on_back
        self._clock = clock
        self._record = record
        self._answered_at = answered_at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.down_since: float | None = None
        """Wall-clock send time of the first unanswered probe; None while the vCenter answers."""
        self.probes = 0
        """Probes sent so far (tests and debugging)."""
        self.skipped = 0
        """Probes not sent because another request had just been answered (module docstring)."""

    def answered(self) -> bool:
        """Send one ``CurrentTime`` and say whether the vCenter answered (any SOAP answer, a
        fault included, or a TLS handshake that failed verification). Never raises."""
        self.probes += 1
        start = time.monotonic()
        outcome = self._send()
        if self._record is not None:
            try:
                self._record("CurrentTime", outcome, time.monotonic() - start)
            except Exception:  # counting must never stop the probe
                log.exception("reachability probe not counted", vcenter=self.label)
        return outcome != "error"

    def _send(self) -> str:
        """One ``CurrentTime`` on a fresh connection: ``success``, ``fault`` (a SOAP fault, or a
        certificate that did not verify: the server spoke) or ``error`` (no answer)."""
        # A fresh connection per probe, closed after it: a kept-alive one would carry CurrentTime
        # to a server whose certificate was replaced since the handshake (the certificate check
        # promises that nothing is sent through such a connection), and each probe's handshake
        # verifies the certificate again. One handshake per interval per vCenter is the cost.
        stub: Any = None
        try:
            stub = self._make_stub()
            vim.ServiceInstance("ServiceInstance", stub).CurrentTime()
            return "success"
        except vmodl.MethodFault:
            return "fault"
        except ssl.SSLCertVerificationError:
            return "fault"
        except Exception:  # no answer: timeout, refused, reset
            return "error"
        finally:
            if stub is not None:
                try:
                    stub.DropConnections()
                except Exception:  # closing a dead socket: nothing left to do
                    pass

    def probe_once(self) -> None:
        """One probe and its transition (``down_since``, listeners). Never raises."""
        sent = self._clock()
        ok = self.answered()
        if ok and self.down_since is not None:
            since, self.down_since = self.down_since, None
            log.info("vcenter answering again", vcenter=self.label, silent_seconds=round(self._clock() - since, 1))
            self._notify(self._on_back)
        elif not ok and self.down_since is None:
            self.down_since = sent
            log.info("vcenter not answering", vcenter=self.label, probe="CurrentTime")
            self._notify(self._on_down)

    def _notify(self, callback: Callable[[str], None]) -> None:
        try:
            callback(self.label)
        except Exception:  # a listener's bug must not stop the probe
            log.exception("reachability listener failed", vcenter=self.label)

    def quiet_for(self) -> float | None:
        """Seconds since the sessions' last answered request (``answered_at``), None without it."""
        if self._answered_at is None:
            return None
        return time.monotonic() - self._answered_at()

    def _run(self) -> None:
        while not self._stop.is_set():
            quiet = self.quiet_for() if self.down_since is None else None
            if quiet is not None and quiet < self.interval:
                # Answered within the interval: no probe before ``interval`` after that answer.
                self.skipped += 1
                self._stop.wait(self.interval - quiet)
                continue
            started = time.monotonic()
            self.probe_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        """Start the probe thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"vsphere-probe-{self.label}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop probing; a probe in flight ends within its timeout (the thread is a daemon)."""
        self._stop.set()


def stub_factory(protocol: str, host: str, port: int, version: str, ssl_context: ssl.SSLContext | None,
                 timeout: float = PROBE_TIMEOUT) -> Callable[[], Any]:
    """A ``make_stub`` for ``ReachabilityProbe``: a new ``SoapStubAdapter`` to ``host:port``
    (``protocol`` https or http: pyVmomi takes a negative port for plain http) speaking
    ``version``, with a ``timeout``-second socket timeout and no idle-connection expiry."""

    def make() -> Any:
        return SoapStubAdapter(
            host=host,
            port=port if protocol == "https" else -port,
            version=version,
            sslContext=ssl_context,
            httpConnectionTimeout=timeout,
            connectionPoolTimeout=-1,
            poolSize=1,
        )

    return make
