"""banlieue dev's helpers for supervision and the sample apply order (issue 24); the processes
themselves are exercised by tests/e2e/test_dev_supervision.py."""

from __future__ import annotations

import errno
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from banlieue.cmd.dev import (
    APPLY_ORDER,
    Child,
    Children,
    apply_rank,
    describe_exit,
    rotate_log,
    sample_documents,
)
from banlieue.options import StartupError

REPO = Path(__file__).resolve().parents[3]


def test_rotate_log_keeps_the_newest_five(tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    assert rotate_log(log) is None  # nothing to keep
    log.write_text("")
    assert rotate_log(log) is None and log.exists()  # an empty log is not worth a slot
    for run in range(1, 8):
        log.write_text(f"run {run}\n")
        assert rotate_log(log) == tmp_path / "manager.log.1"
        assert not log.exists()
    assert [(tmp_path / f"manager.log.{n}").read_text() for n in range(1, 6)] == [
        f"run {run}\n" for run in (7, 6, 5, 4, 3)]
    assert not (tmp_path / "manager.log.6").exists()


def test_describe_exit() -> None:
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"


def test_samples_are_applied_in_dependency_order() -> None:
    docs = sorted(sample_documents(REPO / "config/samples"), key=apply_rank)
    kinds = [d["kind"] for d in docs]
    assert kinds.index("VMClass") < kinds.index("VMImage") < kinds.index("VirtualMachine")
    assert max(i for i, k in enumerate(kinds) if k == "Provider") < kinds.index("VMClass")
    assert min(i for i, k in enumerate(kinds) if k == "Secret") < kinds.index("Provider")
    assert kinds[-4:] == ["VirtualMachine"] * 4  # last, after every kind they refer to
    assert set(APPLY_ORDER) >= {"Secret", "Provider", "VMClass", "VMImage"}


def test_restart_keeps_the_log_and_gives_up_on_a_crash_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    children = Children()
    log = tmp_path / "child.log"
    child = children.start("child", [sys.executable, "-c", "print('hello')"], log, restartable=True)
    child.process.wait(timeout=30)
    assert children.exited() == [child]
    assert children.restart(child) == tmp_path / "child.log.1"
    assert (tmp_path / "child.log.1").read_text() == "hello\n"
    child.process.wait(timeout=30)
    assert log.read_text() == "hello\n"  # the new start writes a new log
    monkeypatch.setattr("banlieue.cmd.dev.RESTART_LIMIT", 2)
    children.restart(child)
    child.process.wait(timeout=30)
    with pytest.raises(StartupError, match="child exited 3 times within 120 s; not restarting it"):
        children.restart(child)
    children.stop_all()


def test_a_child_that_printed_go_flag_usage_reports_the_cause(tmp_path: Path) -> None:
    """``--vcsim-arg=-foo=bar``: the simulator prints the cause, then its whole help; the
    StartupError used to end with the help's last lines (seen by a new user)."""
    log = tmp_path / "vcsim.log"
    log.write_text("flag provided but not defined: -foo\nUsage of vcsim:\n  -api-version string\n"
                   "  -vm int\n    \\tVMs per resource pool (default 1)\n", encoding="utf-8")
    child = Child(name="vcsim a", process=None, log=log, argv=[])  # type: ignore[arg-type]
    assert child.tail(5) == "flag provided but not defined: -foo"
    log.write_text("one\ntwo\nthree\n", encoding="utf-8")
    assert child.tail(2) == "two | three"


def test_each_child_has_a_pid_file_for_this_environment_only(tmp_path: Path) -> None:
    """issue 24 3b: ``pgrep -f 'banlieue.cli manager'`` matched any manager on the machine; dev
    writes ``<log stem>.pid`` (``manager.pid``) at every (re)start and removes it at stop."""
    children = Children()
    log = tmp_path / "manager.log"
    child = children.start("banlieue manager", [sys.executable, "-c", "import time; time.sleep(60)"], log, restartable=True)
    pid_file = tmp_path / "manager.pid"
    assert pid_file.read_text() == f"{child.process.pid}\n"
    first = child.process.pid
    child.process.kill()
    child.process.wait(timeout=30)
    children.restart(child)
    assert child.process.pid != first and pid_file.read_text() == f"{child.process.pid}\n"
    children.stop_all()
    assert not pid_file.exists()


class _LowestFreePortOS:
    """A model of the OS's choice for ``bind(port 0)``: the lowest port no socket holds bound.
    Linux picks at random, so two back-to-back one-port choices coincide only sometimes; here
    they always do, which makes the coincidence (and its absence) testable."""

    def __init__(self) -> None:
        self.held: set[int] = set()

    def socket(self, *_args: object) -> _FakeSocket:
        return _FakeSocket(self)

    def module(self) -> SimpleNamespace:
        """Stands for the ``socket`` module in ``banlieue.cmd.dev`` (only that module sees it)."""
        return SimpleNamespace(socket=self.socket, AF_INET=socket.AF_INET, SOCK_STREAM=socket.SOCK_STREAM)


class _FakeSocket:
    def __init__(self, os_model: _LowestFreePortOS) -> None:
        self.os, self.port = os_model, 0

    def bind(self, address: tuple[str, int]) -> None:
        self.port = address[1] or min(set(range(40000, 40100)) - self.os.held)
        self.os.held.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.os.held.discard(self.port)

    def __enter__(self) -> _FakeSocket:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def test_ports_chosen_together_are_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ports one process (or one envtest) needs together come from one ``free_ports(n)``, which
    holds every socket bound until all are chosen: back-to-back ``free_port()`` calls can return
    the same port (the first socket is closed before the second is bound)."""
    import banlieue.cmd.dev as dev

    monkeypatch.delenv(dev.PORT_RANGE_ENV, raising=False)  # the model is of the OS's choice
    monkeypatch.setattr(dev, "socket", _LowestFreePortOS().module())
    assert dev.free_port() == dev.free_port()  # the model reproduces the coincidence
    ports = dev.free_ports(3)
    assert len(set(ports)) == 3, ports
    assert dev.free_ports(0) == []


def test_start_banlieue_probes_and_metrics_ports_are_distinct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """banlieue.testing.stack.start_banlieue gave the probe and the metrics listeners two
    back-to-back one-port choices: the same port under the model above."""
    import banlieue.cmd.dev as dev
    from banlieue.testing import stack

    monkeypatch.delenv(dev.PORT_RANGE_ENV, raising=False)
    monkeypatch.setattr(dev, "socket", _LowestFreePortOS().module())
    started: list[list[str]] = []

    class NoProcess:
        def __init__(self, argv: list[str], **_kw: object) -> None:
            started.append(argv)

    monkeypatch.setattr(stack, "subprocess", SimpleNamespace(Popen=NoProcess, DEVNULL=subprocess.DEVNULL))
    stack.start_banlieue(tmp_path / "kubeconfig", tmp_path / "log")
    [argv] = started
    metrics = argv[argv.index("--metrics-bind-address") + 1]
    probes = argv[argv.index("--health-probe-bind-address") + 1]
    assert metrics != probes, argv


def _released_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("spec", ["20000", "x-y", "200-100", "0-10", "1-65536", "-5"])
def test_a_bad_port_range_names_the_variable(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import banlieue.cmd.dev as dev

    monkeypatch.setenv(dev.PORT_RANGE_ENV, spec)
    with pytest.raises(ValueError, match=rf"^BANLIEUE_PORT_RANGE='{spec}': expected LOW-HIGH"):
        dev.free_ports(1)


def test_ports_are_chosen_in_the_port_range_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """$BANLIEUE_PORT_RANGE (what each parallel `make test` worker gets, tests/parallel_plan.py):
    every port chosen is in it, distinct, and one held elsewhere is never returned."""
    import banlieue.cmd.dev as dev

    monkeypatch.delenv(dev.PORT_RANGE_ENV, raising=False)
    assert dev.port_range() is None
    port = _released_port()
    monkeypatch.setenv(dev.PORT_RANGE_ENV, f"{port}-{port}")
    assert dev.port_range() == range(port, port + 1)
    assert dev.free_ports(1) == [port] and dev.free_port() == port
    with pytest.raises(OSError) as taken:
        dev.free_ports(2)  # one port in the range, two wanted
    assert taken.value.errno == errno.EADDRINUSE and f"BANLIEUE_PORT_RANGE={port}-{port}" in str(taken.value)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        with pytest.raises(OSError):
            dev.free_ports(1)
        with pytest.raises(StartupError, match="no free port"):
            dev.free_port(preferred=port)  # taken, and the range holds no other
    low = 29000
    monkeypatch.setenv(dev.PORT_RANGE_ENV, f"{low}-{low + 99}")
    ports = dev.free_ports(5)
    assert len(set(ports)) == 5 and all(low <= p <= low + 99 for p in ports), ports
