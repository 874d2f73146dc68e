"""Helpers for the adapter tests: a Connection to a VcsimProcess and a fresh backend per test."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from banlieue.backends.base import Connection
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.testing.vcsim import VcsimProcess


def connection_for(vc: VcsimProcess, provider: str = "default/vc", **overrides: object) -> Connection:
    """A verified-TLS Connection to ``vc`` (CA bundle inline, as a Provider would carry it)."""
    fields: dict[str, object] = {
        "provider": provider,
        "endpoint": vc.endpoint if vc.tls else f"http://{vc.endpoint}",
        "username": vc.username,
        "password": vc.password,
        "ca_bundle": vc.ca_pem or None,
    }
    fields.update(overrides)
    return Connection(**fields)  # type: ignore[arg-type]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A 127.0.0.1 port that completes TCP handshakes (kernel backlog) and never answers a byte:
    a vCenter (or the load balancer in front of it) that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@pytest.fixture
def make_conn() -> Callable[..., Connection]:
    """``make_conn(vcsim_process, provider="ns/name", **field_overrides) -> Connection``."""
    return connection_for


@pytest.fixture
def conn(vcsim: VcsimProcess) -> Connection:
    return connection_for(vcsim)


@pytest.fixture
async def backend() -> AsyncIterator[VSphereBackend]:
    b = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=30.0, watch_max_wait=5.0)
    try:
        yield b
    finally:
        await b.close()
