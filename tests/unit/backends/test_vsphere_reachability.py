"""vCenter reachability per endpoint (``session.Endpoint.record``): down after a round trip that
got no answer, back (listeners told once) at the next answer, success or fault."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from banlieue.backends.vsphere import session
from banlieue.backends.vsphere.health import ReachabilityProbe
from banlieue.backends.vsphere.session import Endpoint, SessionPool


def test_back_is_reported_once_after_an_error_then_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[str] = []
    ep = Endpoint("vc:443", 1, on_back=heard.append)
    try:
        ep.record("RetrieveServiceContent", "success", 0.01, "ns/p")
        ep.record("Login", "fault", 0.01, "ns/p")  # InvalidLogin is an answer: never down
        assert heard == [] and not ep.down
        ep.record("WaitForUpdatesEx", "error", 0.01, "ns/p")
        ep.record("Login", "error", 0.01, "ns/p")
        assert ep.down and heard == []
        ep.record("CreatePropertyCollector", "fault", 0.01, "ns/p")  # NotAuthenticated after a restart: it answers
        assert heard == ["vc:443"] and not ep.down
        ep.record("CurrentTime", "success", 0.01, "ns/p")
        assert heard == ["vc:443"], "reported once per outage"
        # A flapping vCenter within RECONNECT_NOTIFY_SECONDS stays down until the window passed.
        ep.record("CurrentTime", "error", 0.01, "ns/p")
        ep.record("CurrentTime", "success", 0.01, "ns/p")
        assert heard == ["vc:443"] and ep.down
        monkeypatch.setattr(session, "RECONNECT_NOTIFY_SECONDS", 0.0)
        ep.record("CurrentTime", "success", 0.01, "ns/p")
        assert heard == ["vc:443", "vc:443"] and not ep.down
    finally:
        ep.pool.shutdown()


def test_pool_listeners_hear_their_endpoint_and_a_failing_listener_is_contained() -> None:
    pool = SessionPool(max_workers=1)
    heard: list[str] = []

    def broken(label: str) -> None:
        raise RuntimeError("listener bug")

    pool.add_reconnect_listener(broken)
    remove = pool.add_reconnect_listener(heard.append)
    pool._back("vc:443")
    assert heard == ["vc:443"]
    remove()
    pool._back("vc:443")
    assert heard == ["vc:443"]


def test_down_is_reported_once_per_outage() -> None:
    downs: list[str] = []
    ep = Endpoint("vc:443", 1, on_down=downs.append)
    try:
        ep.record("CurrentTime", "success", 0.01, "ns/p")
        ep.record("Login", "fault", 0.01, "ns/p")  # an answer: never down
        assert downs == []
        ep.record("WaitForUpdatesEx", "error", 0.01, "ns/p")
        ep.record("CurrentTime", "error", 0.01, "ns/p")  # still the same outage
        assert downs == ["vc:443"] and ep.down
        ep.record("CurrentTime", "success", 0.01, "ns/p")  # back
        ep.record("CurrentTime", "error", 0.01, "ns/p")  # a new outage
        assert downs == ["vc:443", "vc:443"]
    finally:
        ep.pool.shutdown()


def test_pool_unreachable_listeners_hear_their_endpoint_and_can_be_removed() -> None:
    pool = SessionPool(max_workers=1)
    heard: list[str] = []

    def broken(label: str) -> None:
        raise RuntimeError("listener bug")

    pool.add_unreachable_listener(broken)
    remove = pool.add_unreachable_listener(heard.append)
    pool._down("vc:443")
    assert heard == ["vc:443"]
    remove()
    pool._down("vc:443")
    assert heard == ["vc:443"]


class _Stub:
    """A SOAP stub whose CurrentTime answers (or, ``hung``, raises like a socket timeout)."""

    def __init__(self, sent: list[float], hung: bool = False) -> None:
        self.sent, self.hung = sent, hung

    def InvokeMethod(self, mo: object, info: object, args: object, outerStub: object = None) -> object:
        self.sent.append(time.monotonic())
        if self.hung:
            raise TimeoutError("timed out")
        return datetime.now(UTC)

    def DropConnections(self) -> None:
        pass


def test_the_probe_is_skipped_while_other_requests_are_answered_and_sent_an_interval_after_the_last() -> None:
    """Issue 22: no CurrentTime while the sessions' requests are answered within the interval; once
    they stop (a frozen vCenter answers nothing), the probe goes out ``interval`` after the last
    answer, so the freeze is noticed within ``interval + timeout`` as without the skipping."""
    sent: list[float] = []
    last = [time.monotonic()]
    downs: list[str] = []
    probe = ReachabilityProbe("vc:443", lambda: _Stub(sent, hung=True), on_down=downs.append, on_back=lambda _: None,
                              interval=0.5, answered_at=lambda: last[0])
    probe.start()
    try:
        busy_until = time.monotonic() + 1.0
        while time.monotonic() < busy_until:  # answers every 0.05 s: no probe
            last[0] = time.monotonic()
            time.sleep(0.05)
        assert sent == [] and probe.skipped >= 1
        stopped = last[0]
        deadline = time.monotonic() + 3
        while not downs and time.monotonic() < deadline:
            time.sleep(0.02)
        assert downs == ["vc:443"] and sent, "the silence is probed and noticed"
        # One interval after the last answer (not two: a skip waits for the rest of the interval only).
        assert 0.45 <= sent[0] - stopped < 0.95, sent[0] - stopped
        # Down: every probe is sent whatever the answered_at (the sessions' requests are held back).
        last[0] = time.monotonic() + 60
        count = len(sent)
        time.sleep(1.2)
        assert len(sent) >= count + 2
    finally:
        probe.stop()
