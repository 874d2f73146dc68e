"""vSphere error mapping (banlieue.backends.vsphere.faults): which failures are TLS trust
problems (``TLSVerifyFailed``: fix the CA bundle) and which are the endpoint being unreachable
right now (``Transient``, reason ``ConnectFailed``: retried with back-off)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.api.provider import ProviderConditionReason
from banlieue.backends.base import AuthFailed, BackendError, Connection, TLSVerifyFailed, Transient, taxonomy
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.faults import map_exception
from banlieue.reconcilers.provider.decide import Failure, reason_of

pytestmark = pytest.mark.timeout(30)

vim_: Any = vim


def cert_verify_error() -> ssl.SSLCertVerificationError:
    err = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    err.verify_message = "unable to get local issuer certificate"
    return err


@pytest.mark.parametrize(
    ("exc", "cls", "reason"),
    [
        pytest.param(cert_verify_error(), TLSVerifyFailed, "TLSVerifyFailed", id="certificate-not-trusted"),
        pytest.param(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), Transient, "ConnectFailed",
                     id="eof-during-handshake"),
        pytest.param(ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed"), Transient, "ConnectFailed",
                     id="tls-closed"),
        pytest.param(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), Transient, "ConnectFailed",
                     id="other-handshake-failure"),
        pytest.param(ConnectionRefusedError(111, "Connection refused"), Transient, "ConnectFailed", id="refused"),
        pytest.param(ConnectionResetError(104, "Connection reset by peer"), Transient, "ConnectFailed", id="reset"),
        pytest.param(TimeoutError("timed out"), Transient, "Timeout", id="timeout"),
        pytest.param(vim_.fault.InvalidLogin(), AuthFailed, "AuthFailed", id="invalid-login"),
    ],
)
def test_map_exception(exc: BaseException, cls: type[BackendError], reason: str) -> None:
    mapped = map_exception(exc)
    assert type(mapped) is cls
    assert mapped.reason == reason


def test_only_certificate_verification_is_a_trust_problem() -> None:
    trust = [type(map_exception(e)) for e in (cert_verify_error(), ssl.SSLEOFError(8, "EOF"), ssl.SSLError(1, "x"))]
    assert trust == [TLSVerifyFailed, Transient, Transient]


@pytest.fixture
def closes_during_handshake() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that reads the TLS ClientHello and closes the connection (as a
    vCenter that is shutting down does). Yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5.0)
                try:
                    conn.recv(4096)
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, name="closes-during-handshake", daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5.0)
        server.close()


async def test_eof_during_handshake_is_transient_and_the_provider_says_connect_failed(closes_during_handshake: int) -> None:
    backend = VSphereBackend(max_workers=1, request_timeout=5.0)
    conn = Connection(provider="ns/eof", endpoint=f"127.0.0.1:{closes_during_handshake}", username="u", password="p")
    try:
        with pytest.raises(BackendError) as info:
            await backend.check_connection(conn)
    finally:
        await backend.close()
    err = info.value
    assert isinstance(err, Transient), f"{type(err).__name__}: {err}"
    assert err.reason == "ConnectFailed"
    assert isinstance(err.__cause__, ssl.SSLError | ConnectionError)
    assert reason_of(Failure("connect", taxonomy(err), str(err))) == ProviderConditionReason.CONNECT_FAILED
