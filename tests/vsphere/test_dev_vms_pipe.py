"""``banlieue dev vms | head``: a reader that stops early is not an error of ours (new-user finding:
a ``BrokenPipeError`` traceback). The command stops quietly the way a Go CLI such as kubectl does
when SIGPIPE kills it: no output on stderr, exit status 141 (128 + SIGPIPE)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from banlieue.testing.vcsim import VcsimProcess


@pytest.mark.parametrize("output", ["text", "json"])
def test_dev_vms_into_a_closed_pipe_exits_quietly(vcsim: VcsimProcess, tmp_path: Path, output: str) -> None:
    state = tmp_path / "state"
    (state / "vcsim-vcenter-a").mkdir(parents=True)
    shutil.copy(vcsim.workdir / "info.json", state / "vcsim-vcenter-a" / "info.json")
    with (state / "dev.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the running dev holds it
        proc = subprocess.Popen([sys.executable, "-m", "banlieue.cli", "dev", "vms", "-o", output, "--state-dir", str(state)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        # The reader goes away before the command writes anything (it first logs in to vcsim),
        # as `head -1` does after its line.
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert (code, err) == (141, "")
