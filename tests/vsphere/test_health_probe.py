"""The reachability probe (``backends/vsphere/health``) against real servers: vcsim answers, a
socket that accepts connections and never answers (a hung vCenter) does not; transitions are
heard once each and ``down_since`` is the send time of the first unanswered probe."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from banlieue.backends.base import Connection
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.health import ReachabilityProbe, stub_factory
from banlieue.backends.vsphere.session import parse_endpoint, ssl_context
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]


def test_probe_hears_silence_then_answers(vcsim: VcsimProcess, conn: Connection, silent_port: int) -> None:
    protocol, host, port = parse_endpoint(conn.endpoint)
    answering = stub_factory(protocol, host, port, "vim.version.version8", ssl_context(conn), timeout=1.0)
    hung = stub_factory("http", "127.0.0.1", silent_port, "vim.version.version8", None, timeout=0.5)
    target = [answering]
    downs: list[str] = []
    backs: list[str] = []
    counted: list[tuple[str, str]] = []
    probe = ReachabilityProbe("vc:1", lambda: target[0](), on_down=downs.append, on_back=backs.append,
                              record=lambda method, outcome, _seconds: counted.append((method, outcome)))

    probe.probe_once()
    assert probe.down_since is None and downs == [] and backs == []

    target[0] = hung
    probe._stub = None  # the next probe opens a connection to the hung server
    sent = time.time()
    probe.probe_once()
    waited = time.time() - sent
    assert probe.down_since is not None and sent - 0.01 <= probe.down_since <= sent + 0.01
    assert 0.4 <= waited < 3.0, "the probe gives up after its own timeout, not the request timeout"
    first = probe.down_since
    probe.probe_once()
    assert probe.down_since == first and downs == ["vc:1"], "one transition per outage"

    target[0] = answering
    probe.probe_once()
    assert probe.down_since is None and backs == ["vc:1"]
    # Every probe is counted as a SOAP request with its outcome (vcsim answers a session-less
    # CurrentTime with NotAuthenticated: a fault, an answer all the same).
    assert counted == [("CurrentTime", "fault"), ("CurrentTime", "error"), ("CurrentTime", "error"), ("CurrentTime", "fault")]


def current_times(provider: str) -> float:
    """``banlieue_vsphere_requests_total`` of method CurrentTime for ``provider``, any outcome."""
    return sum(REGISTRY.get_sample_value("banlieue_vsphere_requests_total",
                                         {"provider": provider, "method": "CurrentTime", "outcome": o}) or 0.0
               for o in ("success", "fault", "error"))


async def test_backend_starts_one_probe_per_vcenter_after_login(conn: Connection) -> None:
    backend = VSphereBackend(max_workers=2, probe_interval=0.2)
    before = current_times(conn.provider)
    try:
        assert backend.unreachable_since(conn) is None
        await backend.check_connection(conn)
        ep = backend.sessions.endpoint_for(conn)
        assert ep.probe is not None
        deadline = time.monotonic() + 10
        while ep.probe.probes < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert ep.probe.probes >= 2 and backend.unreachable_since(conn) is None
        # The probes are in the SOAP request metrics, under the Provider that logged in.
        probes = ep.probe.probes
        sent = current_times(conn.provider)
        assert sent >= before + 1 + probes - 1, (sent, before, probes)  # check_connection's own CurrentTime + the probes
        assert ep.probe_requests >= probes - 1
    finally:
        await backend.close()
