"""vCenter reachability per endpoint (``session.Endpoint.record``): down after a round trip that
got no answer, back (listeners told once) at the next answer, success or fault."""

from __future__ import annotations

import pytest

from banlieue.backends.vsphere import session
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
