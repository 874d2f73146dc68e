"""pytest fixtures that start the API-server double in-process on a free port, and a subprocess runner.

Fixtures (registered through ``tests/conftest.py``'s ``pytest_plugins``):

- ``apiserver`` -> :class:`ApiServerHandle` with ``.url``, ``.server`` (the :class:`ApiServer`:
  ``faults``, ``drop_watches()``, ``compact()``, ``request_log()``, ``store``, ``load_crd()``),
  ``.kubeconfig_path``. Watch bookmarks every 1 s.
- ``apiserver_factory`` -> ``await start(crd_dir=None, bookmark_interval=1.0, history_size=10000)``
  for extra servers (restarts, preloaded CRDs); all stopped after the test.
- ``kubeconfig_writer`` -> ``write(url) -> Path`` writing a kubeconfig into the test's tmp dir.

For benchmarks, :func:`start_subprocess` runs ``python -m banlieue.testing.apiserver`` in its
own process (context manager yielding an :class:`ApiServerProcess`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from banlieue.testing.processes import terminate

from .server import ApiServer
from .store import DEFAULT_HISTORY

TEST_BOOKMARK_INTERVAL = 1.0  # seconds


def write_kubeconfig(path: str | Path, url: str, *, context: str = "double", namespace: str = "default") -> Path:
    """Write a kubeconfig pointing at ``url`` (plain HTTP, no auth); returns the path."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    p = Path(path)
    p.write_text(yaml.safe_dump(cfg))
    return p


@dataclass
class ApiServerHandle:
    """A running in-process double."""

    server: ApiServer
    url: str
    kubeconfig_path: Path


@contextlib.asynccontextmanager
async def running_double(tmp_path: Path) -> AsyncIterator[ApiServerHandle]:
    """An in-process API-server double on a free 127.0.0.1 port, its kubeconfig at
    ``tmp_path/kubeconfig``; stopped on exit."""
    server = ApiServer(bookmark_interval=TEST_BOOKMARK_INTERVAL)
    url = await server.start("127.0.0.1", 0)
    try:
        yield ApiServerHandle(server, url, write_kubeconfig(tmp_path / "kubeconfig", url))
    finally:
        await server.stop()


@pytest_asyncio.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[ApiServerHandle]:
    """An in-process API-server double on a free 127.0.0.1 port (stopped after the test)."""
    async with running_double(tmp_path) as handle:
        yield handle


@pytest_asyncio.fixture
async def apiserver_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[ApiServerHandle]]]:
    """``await start(crd_dir=None, bookmark_interval=1.0, history_size=10000)`` -> a new in-process
    double (several per test allowed, e.g. to simulate a restart); all are stopped after the test."""
    started: list[ApiServer] = []

    async def start(crd_dir: str | Path | None = None, bookmark_interval: float = TEST_BOOKMARK_INTERVAL,
                    history_size: int = DEFAULT_HISTORY) -> ApiServerHandle:
        server = ApiServer(bookmark_interval=bookmark_interval, history_size=history_size)
        if crd_dir is not None:
            server.load_crd_dir(crd_dir)
        url = await server.start("127.0.0.1", 0)
        started.append(server)
        return ApiServerHandle(server, url, write_kubeconfig(tmp_path / f"kubeconfig-{len(started)}", url))

    try:
        yield start
    finally:
        for server in started:
            await server.stop()


@pytest.fixture
def kubeconfig_writer(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """A function ``(url) -> Path`` writing a kubeconfig into the test's tmp dir."""
    counter = iter(range(1_000_000))

    def write(url: str) -> Path:
        return write_kubeconfig(tmp_path / f"kubeconfig-{next(counter)}", url)

    yield write


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ApiServerProcess:
    """A double running as ``python -m banlieue.testing.apiserver``."""

    process: subprocess.Popen[str]
    url: str
    kubeconfig_path: Path


@contextlib.contextmanager
def start_subprocess(port: int | None = None, crd_dir: str | Path | None = None, *,
                     bookmark_interval: float = 60.0, startup_timeout: float = 30.0,
                     request_log_size: int = 100_000) -> Iterator[ApiServerProcess]:
    """Run the double in a child process; yields once it prints its URL; SIGTERM (then kill) on exit.
    ``request_log_size``: requests its request log keeps (the oldest are dropped beyond).

    Raises RuntimeError when the process exits or stays silent past ``startup_timeout`` seconds.
    """
    cmd = [sys.executable, "-m", "banlieue.testing.apiserver", "--port", str(port or 0),
           "--bookmark-interval", str(bookmark_interval), "--request-log-size", str(request_log_size)]
    if crd_dir is not None:
        cmd += ["--crd-dir", str(crd_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    tmp = tempfile.TemporaryDirectory(prefix="apiserver-double-")
    try:
        assert proc.stdout is not None
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=startup_timeout):
            raise RuntimeError("apiserver double did not start in time")
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"apiserver double failed to start (exit code {proc.poll()})")
        yield ApiServerProcess(proc, url, write_kubeconfig(Path(tmp.name) / "kubeconfig", url))
    finally:
        terminate(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        tmp.cleanup()
