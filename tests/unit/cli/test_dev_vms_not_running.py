"""``banlieue dev vms`` against a state directory whose dev is not running (issue 24 3c): one
line naming the simulator's URL and how to start dev, exit 1 (it said ``ConnectionRefusedError``)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

URL = "https://127.0.0.1:1/sdk"  # loopback port 1: nothing listens, the connection is refused
LINE = f"banlieue: error: dev is not running (no simulator at {URL}); start it with `make dev`\n"


def _state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (state / "vcsim-vcenter-a").mkdir(parents=True)
    (state / "vcsim-vcenter-a" / "info.json").write_text(json.dumps({
        "url": URL, "host": "127.0.0.1", "port": 1, "username": "u", "password": "p", "tls": False}))
    return state


def _vms(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "banlieue.cli", "dev", "vms", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_stopped_dev_is_one_line_and_exit_1(tmp_path: Path) -> None:
    state = _state(tmp_path)
    (state / "dev.lock").touch()  # left by a dev that has exited: nobody holds it
    proc = _vms(state)
    assert (proc.returncode, proc.stderr, proc.stdout) == (1, LINE, "")


def test_a_simulator_that_refuses_while_dev_holds_its_lock_says_the_same(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with (state / "dev.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running (stopping) dev holds it
        proc = _vms(state)
    assert (proc.returncode, proc.stderr, proc.stdout) == (1, LINE, "")
