"""``bench/e2e.py`` as a command: bad flags are rejected before anything starts (argparse usage +
one ``error:`` line, exit 2), and an interrupted run ends with one line, exit 130/143, no
process left behind and ``--out`` untouched when nothing was measured."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "e2e.py"
PROG = "bench/e2e.py"


@pytest.fixture(scope="module")
def e2e() -> Iterator[ModuleType]:
    """bench/e2e.py loaded as a module; the sys.path entries it adds (bench/, where runtime.py
    and vsphere.py would shadow other imports) are removed again."""
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_e2e", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    yield module


@pytest.fixture(autouse=True)
def keep_signal_handlers() -> Iterator[None]:
    """main() installs its SIGINT/SIGTERM handlers in this process: put pytest's back."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--vms", "0"], "argument --vms: must be >= 1, got 0"),
        (["--vms", "-5"], "argument --vms: must be >= 1, got -5"),
        (["--vms", "ten"], "argument --vms: must be an integer >= 1, got 'ten'"),
        (["--scales", "0"], "argument --scales: each scale must be an even number >= 2 (split between two vCenters), got 0"),
        (["--scales", "100,3"], "argument --scales: each scale must be an even number >= 2 (split between two vCenters), got 3"),
        (["--scales", "abc"], "argument --scales: must be a comma list of integers (object counts), got 'abc'"),
        (["--scales", ""], "argument --scales: must be a comma list of object counts, e.g. 100,1000; got an empty value"),
        (["--steady-seconds", "-1"], "argument --steady-seconds: must be a number of seconds > 0, got -1"),
        (["--steady-seconds", "0"], "argument --steady-seconds: must be a number of seconds > 0, got 0"),
        (["--isolation-vms", "0"], "argument --isolation-vms: must be >= 1, got 0"),
        (["--vcsim-hosts", "0"], "argument --vcsim-hosts: must be >= 1, got 0"),
        (["--only", "nonsense"], "argument --only: unknown group 'nonsense': must be one of throughput, steady, memory, isolation"),
        (["--only", ""], "argument --only: must be a comma list of throughput, steady, memory, isolation; got an empty name in ''"),
        (["--only", "steady,"], "argument --only: must be a comma list of throughput, steady, memory, isolation; "
                                "got an empty name in 'steady,'"),
        (["--apiserver", "kind"], "argument --apiserver: invalid choice: 'kind' (choose from 'double', 'real')"),
        (["--apiserver", "real", "--only", "steady,memory"],
         "--apiserver real: group 'memory' runs on the double only (bench/e2e_bulk.py writes through its URL)"),
    ],
    ids=["vms-zero", "vms-negative", "vms-word", "scale-zero", "scale-odd", "scales-word", "scales-empty",
         "steady-negative", "steady-zero", "isolation-zero", "hosts-zero", "only-unknown", "only-empty",
         "only-empty-item", "apiserver-unknown", "apiserver-real-memory"],
)
def test_bad_flag_is_rejected_before_anything_runs(e2e: ModuleType, argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e2e.json"
    with pytest.raises(SystemExit) as exit_:
        e2e.main([*argv, "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ")
    assert err.splitlines()[-1] == f"{PROG}: error: {message}"
    assert not out.exists()


def test_bad_flag_as_a_process_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--vms", "-5", "--out", str(tmp_path / "e2e.json")],
                          capture_output=True, text=True, timeout=60, check=False, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"{PROG}: error: argument --vms: must be >= 1, got -5"
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.fixture
def interrupted_run(e2e: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """main() with run_groups replaced: it records the entries in ``record`` (a list the test
    fills), then raises Interrupted(``code``). No process is started; the child-process sweep
    is recorded instead of run (it would signal pytest's own children)."""
    state: dict[str, Any] = {"record": [], "code": 143, "swept": 0}

    def run_groups(args: Any, only: set[str], n: int, work: Path, entries: list[dict[str, Any]]) -> None:
        for name in state["record"]:
            e2e.e2e_run.record(entries, name, 1.0, "u", None, "label")
        raise e2e.Interrupted(state["code"])

    def sweep() -> list[int]:
        state["swept"] += 1
        return []

    monkeypatch.setattr(e2e, "run_groups", run_groups)
    monkeypatch.setattr(e2e, "stop_children", sweep)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix: str(tmp_path / "work"))
    return state


def test_interrupt_with_nothing_measured_leaves_out_as_it_was(e2e: ModuleType, interrupted_run: dict[str, Any],
                                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e2e.json"
    out.write_text('[{"name": "earlier"}]\n')
    assert e2e.main(["--only", "isolation", "--out", str(out)]) == 143
    assert out.read_text() == '[{"name": "earlier"}]\n'
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{PROG}: interrupted; nothing measured; {out} left as it was")
    assert interrupted_run["swept"] == 1
    missing = tmp_path / "none.json"
    assert e2e.main(["--only", "isolation", "--out", str(missing)]) == 143
    assert not missing.exists()


def test_interrupt_after_a_figure_writes_it(e2e: ModuleType, interrupted_run: dict[str, Any], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    interrupted_run.update(record=["vm_ready_throughput"], code=130)
    out = tmp_path / "e2e.json"
    out.write_text('[{"name": "earlier"}]\n')
    assert e2e.main(["--only", "throughput", "--out", str(out)]) == 130
    assert [e["name"] for e in json.loads(out.read_text())] == ["earlier", "vm_ready_throughput"]
    assert capsys.readouterr().err.splitlines()[-1] == f"{PROG}: interrupted; partial results in {out}"


def _stat(pid_dir: Path) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        return (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    return [int(d.name) for d in Path("/proc").glob("[0-9]*") if (f := _stat(d)) and f[1] == str(pid)]


def _in_session(sid: int) -> list[int]:
    return [int(d.name) for d in Path("/proc").glob("[0-9]*") if (f := _stat(d)) and f[3] == str(sid) and f[0] != "Z"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_signal_to_the_process_alone_stops_it_cleanly(sig: signal.Signals, tmp_path: Path) -> None:
    """The signal goes to the script only, once it has started the API double: exit 128+signal,
    one line, no traceback, no process of its session left, --out untouched. SIGINT is ignored
    on entry, as for a script a shell starts with `&`."""
    out = tmp_path / "e2e.json"
    out.write_text("[]\n")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--quick", "--only", "isolation", "--out", str(out)], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while not _children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == f"{PROG}: interrupted; nothing measured; {out} left as it was"
    assert out.read_text() == "[]\n"
    assert _in_session(proc.pid) == []


@pytest.mark.parametrize(("argv", "server", "groups"), [
    ([], "double", {"throughput", "steady", "memory", "isolation"}),
    (["--apiserver", "real"], "real", {"throughput", "steady", "isolation"}),
    (["--apiserver", "real", "--only", "steady"], "real", {"steady"}),
], ids=["default", "real", "real-only-steady"])
def test_apiserver_flag_chooses_the_server_and_its_groups(e2e: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path, argv: list[str], server: str,
                                                          groups: set[str]) -> None:
    """--apiserver sets the server every Env starts (e2e_env.APISERVER); with --apiserver real and
    no --only, the groups run are all but memory. run_groups is replaced: nothing starts."""
    env_module = sys.modules["e2e_env"]  # loaded with bench/e2e.py (e2e_run imports it)
    monkeypatch.setattr(env_module, "APISERVER", env_module.APISERVER)  # main() sets it: restored after
    monkeypatch.setattr(env_module, "MANAGER_ARGS", [])
    seen: dict[str, Any] = {}

    def run_groups(args: Any, only: set[str], n: int, work: Path, entries: list[dict[str, Any]]) -> None:
        seen.update(only=only, server=env_module.APISERVER)
    monkeypatch.setattr(e2e, "run_groups", run_groups)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix: str(tmp_path / "work"))
    assert e2e.main([*argv, "--out", str(tmp_path / "e2e.json")]) == 0
    assert seen == {"only": groups, "server": server}
    assert not (tmp_path / "e2e.json").exists()  # nothing measured, nothing written
