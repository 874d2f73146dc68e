"""Issue F4: a vCenter watch that keeps failing (refused credentials, a port that drops every
connection) is restarted with a growing pause, not every ``WATCH_RESTART_SECONDS`` forever.

Real processes: vcsim (plain HTTP) behind a loopback TCP proxy that counts the SOAP ``Login``
requests going through it; the reconciler's ``VMWatch._pump`` runs against it with the pauses
scaled down (module constants) so a few seconds cover several steps of the schedule."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from banlieue.backends.base import Connection
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.vspheremachine import sources
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]

WINDOW = 3.0
"""Seconds the watch runs in each test."""


class LoginCounter:
    """A 127.0.0.1 TCP proxy to ``target`` counting SOAP ``<Login`` requests (plain HTTP only) and
    accepted connections; ``target=None`` closes each connection at once (a port that drops)."""

    def __init__(self, target: tuple[str, int] | None) -> None:
        self.target = target
        self.logins = 0
        self.connections = 0
        self.port = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool) -> None:
        tail = b""
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if count:
                    buf = tail + data
                    self.logins += buf.count(b"<Login ") + buf.count(b"<Login>")
                    tail = data[-8:]
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.target is None:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer, True), self._pipe(up_reader, writer, False))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LoginCounter]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()


@pytest.fixture
def fast_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The production schedule scaled by 1/50 (5 s -> 0.1 s, 300 s -> 6 s, 60 s -> 1.2 s)."""
    monkeypatch.setattr(sources, "WATCH_RESTART_SECONDS", 0.1)
    monkeypatch.setattr(sources, "WATCH_RESTART_MAX_SECONDS", 6.0, raising=False)
    monkeypatch.setattr(sources, "WATCH_AUTH_FAILED_SECONDS", 6.0, raising=False)
    monkeypatch.setattr(sources, "WATCH_HEALTHY_SECONDS", 1.2, raising=False)


async def pump_for(conn: Connection, seconds: float, retry: asyncio.Event | None = None) -> None:
    backend = VSphereBackend(max_workers=2, task_timeout=10.0, request_timeout=5.0, watch_max_wait=1.0)
    watch = sources.VMWatch(backend, None, None, None)  # type: ignore[arg-type]  # _pump uses only the backend
    queue: asyncio.Queue[Any] = asyncio.Queue()
    task = asyncio.create_task(watch._pump(conn, queue, retry))
    try:
        await asyncio.sleep(seconds)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await backend.close()


@pytest.fixture
def plain_vcsim(vcsim_factory: Callable[..., VcsimProcess]) -> VcsimProcess:
    return vcsim_factory(dc=1, cluster=1, tls=False)


async def test_refused_credentials_are_tried_once_per_auth_pause(fast_schedule: None, plain_vcsim: VcsimProcess) -> None:
    async with LoginCounter((plain_vcsim.host, plain_vcsim.port)).running() as proxy:
        conn = Connection(provider="default/vc", endpoint=f"http://127.0.0.1:{proxy.port}",
                          username=plain_vcsim.username, password="wrong-password")
        await pump_for(conn, WINDOW)
    # One attempt, then WATCH_AUTH_FAILED_SECONDS (6 s scaled) > WINDOW: no second Login.
    # Before the fix: one Login every 0.1 s, about 20 in the window.
    assert proxy.logins >= 1, "the watch never tried to log in: the proxy counted nothing"
    assert proxy.logins <= 2, f"{proxy.logins} Login requests in {WINDOW} s with refused credentials"


async def test_right_credentials_through_the_proxy_log_in_once(fast_schedule: None, plain_vcsim: VcsimProcess) -> None:
    # The counter itself: a healthy watch logs in once and keeps its session.
    async with LoginCounter((plain_vcsim.host, plain_vcsim.port)).running() as proxy:
        conn = Connection(provider="default/vc", endpoint=f"http://127.0.0.1:{proxy.port}",
                          username=plain_vcsim.username, password=plain_vcsim.password)
        await pump_for(conn, 2.0)
    assert proxy.logins == 1


async def test_a_port_that_drops_connections_is_retried_with_a_growing_pause(fast_schedule: None) -> None:
    async with LoginCounter(None).running() as dropper:
        conn = Connection(provider="default/vc", endpoint=f"http://127.0.0.1:{dropper.port}",
                          username="u", password="p")
        await pump_for(conn, WINDOW)
        attempts = dropper.connections
    # Pauses 0.1, 0.2, 0.4, 0.8, 1.6 s: at most 6 watch starts in 3 s. A start may open more
    # than one connection (the session's own retries); the fixed 0.1 s pause made 20+ starts.
    assert attempts >= 2, f"{attempts} connection attempts: the watch was not restarted at all"
    assert attempts <= 6 * 3, f"{attempts} connection attempts in {WINDOW} s"


async def test_the_retry_event_ends_a_long_pause_at_once(fast_schedule: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # VMWatch sets a watch's event when the backend reports its vCenter answering again.
    monkeypatch.setattr(sources, "WATCH_RESTART_SECONDS", 30.0)
    retry = asyncio.Event()
    async with LoginCounter(None).running() as dropper:
        conn = Connection(provider="default/vc", endpoint=f"http://127.0.0.1:{dropper.port}",
                          username="u", password="p")
        pumping = asyncio.create_task(pump_for(conn, 3.0, retry))
        async with asyncio.timeout(2):
            while dropper.connections == 0:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the first attempt failed; the watch pauses 30 s
        before = dropper.connections
        retry.set()
        async with asyncio.timeout(1.5):
            while dropper.connections == before:
                await asyncio.sleep(0.05)
        await pumping
