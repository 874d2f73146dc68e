"""Sessions, TLS, error mapping and per-vCenter isolation against vcsim."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

import pytest
from pyVim.connect import Disconnect, SmartConnect

from banlieue.backends.base import AuthFailed, Capabilities, Connection, TLSVerifyFailed, Transient
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.testing.vcsim import VcsimProcess, start_vcsim

MakeConn = Callable[..., Connection]

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]


async def test_terminated_session_is_reestablished_without_a_failed_operation(
    backend: VSphereBackend, conn: Connection, vcsim: VcsimProcess
) -> None:
    await backend.check_connection(conn)
    [sess] = backend.sessions.sessions.values()
    key = await asyncio.to_thread(lambda: sess.content.sessionManager.currentSession.key)
    admin = SmartConnect(host=vcsim.host, port=vcsim.port, user=vcsim.username, pwd=vcsim.password,
                         sslContext=ssl.create_default_context(cafile=vcsim.ca_file))
    try:
        admin.content.sessionManager.TerminateSession([key])
    finally:
        Disconnect(admin)
    generation = sess.generation
    # Several operations at once after the session died: all succeed, one re-login.
    results = await asyncio.gather(*(backend.find_template(conn, "DC0", "ubuntu-22.04") for _ in range(4)))
    assert all(t is not None for t in results)
    assert sess.generation == generation + 1
    new_key = await asyncio.to_thread(lambda: sess.content.sessionManager.currentSession.key)
    assert new_key != key


async def test_one_session_per_provider_and_a_new_one_when_credentials_change(
    backend: VSphereBackend, vcsim: VcsimProcess, make_conn: MakeConn
) -> None:
    a = make_conn(vcsim, provider="ns/a")
    b = make_conn(vcsim, provider="ns/b")
    await asyncio.gather(backend.check_connection(a), backend.check_connection(a), backend.check_connection(b))
    assert len(backend.sessions.sessions) == 2
    assert len(backend.sessions.endpoints) == 1  # one pool per vCenter, shared by Providers
    a2 = make_conn(vcsim, provider="ns/a", ca_bundle=vcsim.ca_pem + "\n")
    await backend.check_connection(a2)
    assert a.session_key not in backend.sessions.sessions
    assert a2.session_key in backend.sessions.sessions


async def test_tls_verification(
    backend: VSphereBackend, vcsim_factory: Callable[..., VcsimProcess], make_conn: MakeConn
) -> None:
    vc = vcsim_factory(dc=1, cluster=1)
    other = vcsim_factory(dc=1, cluster=1)  # its CA did not sign vc's certificate
    assert await backend.check_connection(make_conn(vc, provider="t/right")) == "6.5"
    with pytest.raises(TLSVerifyFailed):
        await backend.check_connection(make_conn(vc, provider="t/wrong", ca_bundle=other.ca_pem))
    with pytest.raises(TLSVerifyFailed):
        await backend.check_connection(make_conn(vc, provider="t/system-roots", ca_bundle=None))
    insecure = make_conn(vc, provider="t/insecure", ca_bundle=None, insecure_skip_tls_verify=True)
    assert await backend.check_connection(insecure) == "6.5"


async def test_wrong_password_and_refused_connection(
    backend: VSphereBackend, vcsim: VcsimProcess, make_conn: MakeConn
) -> None:
    with pytest.raises(AuthFailed):
        await backend.check_connection(make_conn(vcsim, provider="t/pw", password="wrong"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Transient):
        await backend.check_connection(make_conn(vcsim, provider="t/down", endpoint=f"127.0.0.1:{port}"))


def _logins(provider: str, outcome: str) -> float:
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value("banlieue_vsphere_requests_total",
                                     {"provider": provider, "method": "Login", "outcome": outcome}) or 0.0


async def test_refused_credentials_are_not_sent_again_for_a_minute_unless_they_change(
    backend: VSphereBackend, vcsim: VcsimProcess, make_conn: MakeConn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vCenter SSO locks an account after 5 refused logins in 180 s: a wrong password is sent
    once per REFUSED_LOGIN_RETRY_SECONDS, however often machines retry; a fixed one at once."""
    from banlieue.backends.vsphere import session as session_mod

    wrong = make_conn(vcsim, provider="t/lock", password="wrong")
    for _ in range(6):
        with pytest.raises(AuthFailed):
            await backend.check_connection(wrong)
    assert _logins("t/lock", "fault") == 1
    # The fixed password is tried at once, and works.
    assert await backend.check_connection(make_conn(vcsim, provider="t/lock")) == "6.5"
    # Once the hold is over, the wrong one is sent again (once).
    monkeypatch.setattr(session_mod, "REFUSED_LOGIN_RETRY_SECONDS", 0.0)
    with pytest.raises(AuthFailed):
        await backend.check_connection(wrong)
    assert _logins("t/lock", "fault") == 2


async def test_a_slow_vcenter_does_not_delay_another(
    vcsim_factory: Callable[..., VcsimProcess], make_conn: MakeConn
) -> None:
    slow_vc = vcsim_factory(dc=1, cluster=1, method_delay={"RetrievePropertiesEx": 5000})
    fast_vc = vcsim_factory(dc=1, cluster=2)
    backend = VSphereBackend(max_workers=2)
    try:
        slow, fast = make_conn(slow_vc, provider="t/slow"), make_conn(fast_vc, provider="t/fast")
        await asyncio.gather(backend.check_connection(slow), backend.check_connection(fast))
        # Fill every worker of the slow vCenter's pool with 5 s calls.
        pending = [asyncio.create_task(backend.inventory(slow, Capabilities())) for _ in range(2)]
        await asyncio.sleep(0.2)
        for _ in range(5):
            inv = await backend.inventory(fast, Capabilities())
            assert len(inv.failure_domains) == 2
            assert await backend.find_template(fast, "DC0", "ubuntu-22.04") is not None
        # Ten calls on the fast vCenter finished while the slow ones are still waiting.
        assert not any(t.done() for t in pending)
        slow_results = await asyncio.gather(*pending)
        assert all(len(r.failure_domains) == 1 for r in slow_results)
    finally:
        await backend.close()


async def test_requests_and_sessions_are_exported_as_prometheus_metrics(
    backend: VSphereBackend, conn: Connection
) -> None:
    from prometheus_client import REGISTRY

    label = conn.provider  # namespace/name: the Provider, not the endpoint (issue 24)
    assert label.count("/") == 1
    before = REGISTRY.get_sample_value(
        "banlieue_vsphere_requests_total", {"provider": label, "method": "RetrievePropertiesEx", "outcome": "success"}
    ) or 0.0
    await backend.inventory(conn, Capabilities())
    after = REGISTRY.get_sample_value(
        "banlieue_vsphere_requests_total", {"provider": label, "method": "RetrievePropertiesEx", "outcome": "success"}
    )
    assert after == before + 1
    assert (REGISTRY.get_sample_value("banlieue_vsphere_sessions", {"provider": label}) or 0) >= 1
    count = REGISTRY.get_sample_value(
        "banlieue_vsphere_request_duration_seconds_count", {"provider": label, "method": "RetrievePropertiesEx"}
    )
    assert count is not None and count >= 1


async def test_vcenter_back_after_a_restart_is_reported_and_its_inventory_re_read(
    backend: VSphereBackend, make_conn: MakeConn
) -> None:
    """vcsim killed and restarted on the same port: calls fail (Transient) meanwhile; the first
    answer afterwards tells the reconnect listeners (once, with the endpoint label) and drops
    the cached inventory (a restarted vcsim regenerates it)."""
    first = start_vcsim(tls=False)
    port = first.port
    heard: list[str] = []
    backend.add_reconnect_listener(heard.append)
    conn = make_conn(first, provider="t/restart")
    try:
        await backend.check_connection(conn)
        await backend.inventory(conn, Capabilities())
        label = backend.endpoint_label(conn)
        assert label == f"127.0.0.1:{port}" and label in backend._indexes
        first.stop()
        with pytest.raises(Transient):
            await backend.check_connection(conn)
        assert heard == []
        second = start_vcsim(tls=False, listen=f"127.0.0.1:{port}")
        try:
            await backend.check_connection(conn)  # NotAuthenticated on the old session, then a login
            assert heard == [label]
            assert label not in backend._indexes, "the old inventory index was kept"
        finally:
            second.stop()
    finally:
        first.stop()


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_login_to_a_vcenter_that_never_answers_gives_up_after_the_request_timeout(
    silent_port: int, scheme: str
) -> None:
    """The login's first round trip (API version discovery, ``GET /sdk/vimServiceVersions.xml``;
    for https its TLS handshake first) is bounded by the request timeout like every other one.
    pyVmomi's ``SmartConnect`` sends it without any timeout: a vCenter that accepted the
    connection and never answered held the Provider's login (and a worker of the vCenter's pool)
    forever, so the Provider never even reported ConnectFailed."""
    backend = VSphereBackend(max_workers=2, request_timeout=1.0, probe_interval=0)
    conn = Connection(provider="ns/hung", endpoint=f"{scheme}://127.0.0.1:{silent_port}", username="u", password="p")
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(Transient) as err:
            await asyncio.wait_for(backend.check_connection(conn), timeout=15)
        took = asyncio.get_running_loop().time() - started
        assert took < 5, f"gave up after {took:.1f} s, request timeout 1 s"
        assert err.value.reason == "Timeout", err.value
    finally:
        await backend.close()
