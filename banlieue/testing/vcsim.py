"""pytest fixtures that start vcsim processes (``bin/vcsim``, built from ``hack/vcsim``) on free ports.

Public API:

- ``start_vcsim(**opts) -> VcsimProcess``: starts one simulator and waits (up to
  ``startup_timeout`` seconds) for its info file; use it as a context manager (or call
  ``stop()``) so the process is always killed.
- fixture ``vcsim`` (module scope): 2 datacenters x 3 clusters x 2 hosts, one template
  ``ubuntu-22.04`` per datacenter, TLS with a generated CA (``ca_file``), user ``user``/``pass``.
- fixture ``vcsim_factory`` (function scope): ``vcsim_factory(**opts) -> VcsimProcess``; every
  process it started is stopped at teardown.
- fixture ``si`` (function scope): a pyVmomi ServiceInstance logged in to ``vcsim``, independent
  of the code under test (to read what it did and to act behind its back); logged out after.
- ``wait_task(task) -> result``: wait for a pyVmomi task (vcsim's run asynchronously).
- ``govc_binary() -> Path``: ``bin/govc`` (built on demand like ``bin/vcsim``);
  ``VcsimProcess.govc_env`` the ``GOVC_*`` variables that point it at a simulator.

Options (keyword -> ``bin/vcsim`` flag): ``dc``, ``cluster``, ``host`` (per cluster),
``standalone_host``, ``vm`` (per resource pool), ``pool``, ``pod``, ``pg``, ``ds``, ``autostart``,
``templates`` (list of names), ``datastores`` / ``portgroups`` (lists of extra names),
``datastore_clusters`` (``{"gold": "ds1+ds2"}``: StoragePods made of existing datastores),
``username``, ``password``, ``password_file`` (a path: the login password is read from it at every
Login, so a test can rotate it; the info file's ``password`` is its content at start), ``tls`` (bool), ``method_delay`` (``{"CloneVM_Task": 5000}``, ms),
``delay`` (ms, every method), ``delay_jitter``, ``task_delay`` (``{"CloneVm": 3000}``, ms, by vcsim's
task name: the task runs that much later, after the call returned it), ``fault``
(``["CloneVM_Task:InsufficientResourcesFault:1"]``: the call answers that fault, at most N times;
``hack/vcsim/faults.go``), ``guest_ip`` (an IPv4 CIDR, e.g.
``GUEST_IP_RANGES[0]``: the simulator plays DHCP and VMware Tools, so a VM that powers on
reports its static guestinfo address, else one leased from the range, as ``guest.ipAddress`` /
``guest.net``; without it vcsim guests report no address; see ``hack/vcsim/guestnet.go``),
``batch_collector`` (bool: ``WaitForUpdatesEx`` collects once per tick, ``hack/vcsim/collector.go``;
the benchmarks use it), ``cpuprofile`` (a file for a Go CPU profile).

The binary is ``$BANLIEUE_VCSIM`` or ``<repo>/bin/vcsim``; when missing (or older than any
``hack/vcsim/*.go``, ``go.mod`` or ``go.sum``) it is built on demand if ``go`` is on PATH (the
module's dependencies come from the module cache or the Go module proxy), else the requesting
test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from banlieue.testing.guestnet import (
    GUEST_IP_RANGES as GUEST_IP_RANGES,  # re-exported: start_vcsim(guest_ip=...)
)

REPO_ROOT = Path(__file__).resolve().parents[2]
VCSIM_MODULE = REPO_ROOT / "hack" / "vcsim"
"""The Go module ``bin/vcsim`` is built from (govmomi's simulator, pinned in its go.mod)."""


class VcsimUnavailable(RuntimeError):
    """bin/vcsim is missing and cannot be built here (no ``go``, or the build failed)."""


def _go_binary(name: str, package: str, sources: list[Path]) -> Path:
    """``<repo>/bin/<name>``, built from ``package`` (relative to the hack/vcsim module) when
    missing or older than any of ``sources`` and ``go`` is on PATH; as the Makefile builds it.

    Raises VcsimUnavailable when it is missing and cannot be built.
    """
    binary = REPO_ROOT / "bin" / name
    sources = [*sources, VCSIM_MODULE / "go.mod", VCSIM_MODULE / "go.sum"]
    go = shutil.which("go")
    if binary.exists() and (go is None or all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources)):
        return binary
    if go is None:
        raise VcsimUnavailable(f"bin/{name} is missing and cannot be built (no go on PATH: run `make {name}`)")
    # Module mode with the default (shared) GOCACHE and GOMODCACHE, as the Makefile builds it.
    env = dict(os.environ, GOTOOLCHAIN="local", GO111MODULE="on", GOFLAGS="-mod=readonly -buildvcs=false")
    proc = subprocess.run(
        [go, "build", "-o", str(binary), package],
        cwd=VCSIM_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise VcsimUnavailable(f"building bin/{name} failed: {proc.stderr[-2000:]}")
    return binary


def vcsim_binary() -> Path:
    """``$BANLIEUE_VCSIM`` or ``<repo>/bin/vcsim`` (built when missing or older than any of
    ``hack/vcsim/*.go``, ``go.mod``, ``go.sum``). Raises VcsimUnavailable."""
    env_path = os.environ.get("BANLIEUE_VCSIM")
    if env_path:
        return Path(env_path)
    return _go_binary("vcsim", ".", list(VCSIM_MODULE.glob("*.go")))


def govc_binary() -> Path:
    """``<repo>/bin/govc`` (``make govc``: govmomi's CLI from the same module), built when missing
    or stale. Raises VcsimUnavailable."""
    return _go_binary("govc", "./govc", list((VCSIM_MODULE / "govc").glob("*.go")))


def wait_task(task: Any, timeout: float = 60.0) -> Any:
    """Wait for a pyVmomi ``vim.Task``; return ``info.result``; raise its fault on error.

    Not pyVim's ``WaitForTask``: vcsim runs tasks asynchronously and names them after its own
    functions (``info.name`` "CloneVm", not vCenter's "CloneVM_Task"), which pyVim's progress
    report fails on while a task is running. Raises TimeoutError after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        info = task.info
        if info.state == "success":
            return info.result
        if info.state == "error":
            raise info.error
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task._moId} still {info.state} after {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _flags(opts: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(f"{flag}={'true' if value else 'false'}")
        elif isinstance(value, dict):
            out.append(f"{flag}={','.join(f'{k}={v}' for k, v in value.items())}")
        elif isinstance(value, list | tuple):
            out.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            out.append(f"{flag}={value}")
    return out


@dataclass
class VcsimProcess:
    """A running vcsim: connection details (from its info file) and the process handle.

    ``url`` is the SDK URL (``https://127.0.0.1:<port>/sdk``); ``ca_file`` is the PEM path of
    the CA that signed the server certificate (empty without TLS); ``info`` is the whole info
    file (datacenters, clusters, templates, datastores and networks per datacenter).
    """

    process: subprocess.Popen[bytes]
    workdir: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return str(self.info["url"])

    @property
    def host(self) -> str:
        return str(self.info["host"])

    @property
    def port(self) -> int:
        return int(self.info["port"])

    @property
    def endpoint(self) -> str:
        """``host:port``, the form a Provider's ``connection.endpoint`` takes."""
        return f"{self.host}:{self.port}"

    @property
    def username(self) -> str:
        return str(self.info["username"])

    @property
    def password(self) -> str:
        return str(self.info["password"])

    @property
    def tls(self) -> bool:
        return bool(self.info["tls"])

    @property
    def guest_ip(self) -> str:
        """The ``guest_ip`` range the simulator leases guest addresses from ("" when off)."""
        return str(self.info.get("guest_ip") or "")

    @property
    def ca_file(self) -> str:
        return str(self.info.get("ca_file") or "")

    @property
    def ca_pem(self) -> str:
        """The CA bundle as PEM text (what a Provider's ``caBundle.inline`` holds)."""
        return Path(self.ca_file).read_text() if self.ca_file else ""

    @property
    def govc_env(self) -> dict[str, str]:
        """``GOVC_*`` environment for ``bin/govc`` against this simulator (no session file kept)."""
        env = {"GOVC_URL": self.url, "GOVC_USERNAME": self.username, "GOVC_PASSWORD": self.password,
               "GOVC_PERSIST_SESSION": "false"}
        if self.ca_file:
            env["GOVC_TLS_CA_CERTS"] = self.ca_file
        return env

    def stop(self) -> None:
        """Terminate (then kill after 5 s) and remove the work directory. Idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> VcsimProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_vcsim(startup_timeout: float = 30.0, **opts: Any) -> VcsimProcess:
    """Start ``bin/vcsim`` on a free 127.0.0.1 port and wait for its info file.

    Defaults: 2 datacenters x 3 clusters, template ``ubuntu-22.04``, TLS on. Raises
    VcsimUnavailable (binary) or RuntimeError (the process exited or did not report within
    ``startup_timeout`` seconds; its stderr is in the message).
    """
    binary = vcsim_binary()
    opts = {"dc": 2, "cluster": 3, "templates": ["ubuntu-22.04"], "tls": True, **opts}
    workdir = Path(tempfile.mkdtemp(prefix="banlieue-vcsim-"))
    info_file = workdir / "info.json"
    args = [str(binary), "--listen=127.0.0.1:0", f"--info-file={info_file}", "--exit-on-stdin-eof", *_flags(opts)]
    if opts.get("tls"):
        args.append(f"--tls-dir={workdir / 'tls'}")
    stderr = (workdir / "stderr.log").open("wb")
    # stdin stays an open pipe: if this (test) process dies, the pipe closes and vcsim exits.
    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, cwd=workdir)
    stderr.close()
    vc = VcsimProcess(process=process, workdir=workdir)
    deadline = time.monotonic() + startup_timeout
    while not info_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            err = (workdir / "stderr.log").read_text(errors="replace")[-2000:]
            vc.stop()
            raise RuntimeError(f"vcsim did not start ({' '.join(args)}): {err}")
        time.sleep(0.05)
    vc.info = json.loads(info_file.read_text())
    return vc


def _skip_if_unavailable() -> None:
    try:
        vcsim_binary()
    except VcsimUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def vcsim() -> Iterator[VcsimProcess]:
    """One vcsim per test module: 2 DC x 3 clusters, template ``ubuntu-22.04``, TLS."""
    _skip_if_unavailable()
    with start_vcsim() as vc:
        yield vc


@pytest.fixture
def si(vcsim: VcsimProcess) -> Iterator[Any]:
    """A pyVmomi ServiceInstance logged in to ``vcsim`` (TLS verified against its CA), independent
    of the code under test; logged out after."""
    from pyVim import connect as _connect

    pyvim: Any = _connect  # pyVmomi's partial stubs: untyped calls
    s = pyvim.SmartConnect(host=vcsim.host, port=vcsim.port, user=vcsim.username, pwd=vcsim.password,
                     sslContext=ssl.create_default_context(cafile=vcsim.ca_file))
    yield s
    pyvim.Disconnect(s)


@pytest.fixture
def vcsim_factory() -> Iterator[Callable[..., VcsimProcess]]:
    """``vcsim_factory(**opts)`` starts another vcsim; all are stopped at teardown."""
    _skip_if_unavailable()
    started: list[VcsimProcess] = []

    def factory(**opts: Any) -> VcsimProcess:
        vc = start_vcsim(**opts)
        started.append(vc)
        return vc

    yield factory
    for vc in started:
        vc.stop()
