"""``banlieue dev --keep-state`` (``make dev KEEP_STATE=1``), as processes: a VirtualMachine a
user created in one run is back in the next, with its UID; the simulators start empty, so dev
deletes the VSphereMachines the VirtualMachines own and the controllers clone new VMs (a new
VSphereMachine UID, the VM found in the simulator by it); a run without the flag starts from an
empty API again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import REPO, http, requirements_skip, wait_for
from .test_dev_supervision import VM_API, VSM_API, DevProcess, ready


def _start(state: Path, tmpdir: Path, *flags: str) -> tuple[DevProcess, str]:
    dev = DevProcess(state, tmpdir, *flags)
    dev.wait_line("Ctrl-C stops everything.", 150)
    api = next(line for line in dev.lines if line.startswith("[1/7]")).rsplit(": ", 1)[1]
    return dev, api


def _stop(dev: DevProcess) -> None:
    dev.proc.send_signal(signal.SIGINT)
    dev.wait_line("stopped: every child process has exited", 90)
    assert dev.proc.wait(timeout=30) == 0


def _get(api: str, path: str) -> Any:
    status, body = http("GET", api + path)
    return body if status == 200 else None


@pytest.mark.vcsim
@pytest.mark.kubectl
@pytest.mark.timeout(420)
@requirements_skip()
def test_keep_state_brings_back_the_objects_and_clones_their_vms_again(tmp_path: Path) -> None:
    state, tmpdir = tmp_path / "state", tmp_path / "tmp"
    tmpdir.mkdir()
    dev, api = _start(state, tmpdir)
    try:
        mine = json.loads(json.dumps(_get(api, f"{VM_API}/web-1")))
        mine["metadata"] = {"name": "mine", "namespace": "default", "labels": {"kept": "yes"}}
        mine.pop("status", None)
        assert http("POST", api + VM_API, mine)[0] == 201
        wait_for("mine Ready", lambda: ready(_get(api, f"{VM_API}/mine")), 90)
        before = _get(api, f"{VM_API}/mine")
        old_machine = _get(api, f"{VSM_API}/mine")["metadata"]["uid"]
        _stop(dev)
    finally:
        if dev.proc.poll() is None:
            dev.proc.kill()
    assert (state / "apiserver-state.json").is_file()

    dev, api = _start(state, tmpdir, "--keep-state")
    try:
        line = next(line for line in dev.lines if line.startswith("[3/7]"))
        assert f"kept API state from {state.absolute() / 'apiserver-state.json'}" in line, line
        assert "the simulators start empty: 5 VMs will be cloned again" in line, line
        wait_for("mine Ready again", lambda: ready(_get(api, f"{VM_API}/mine")), 90)
        after = _get(api, f"{VM_API}/mine")
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"]["labels"] == {"kept": "yes"}
        machine = _get(api, f"{VSM_API}/mine")
        assert machine["metadata"]["uid"] != old_machine
        listed = subprocess.run([sys.executable, "-m", "banlieue.cli", "dev", "vms", "--state-dir", str(state), "-o", "json"],
                                capture_output=True, text=True, timeout=60, check=True, cwd=REPO)
        cloned = [r for r in json.loads(listed.stdout) if r["identity"].get("banlieue.uid") == machine["metadata"]["uid"]]
        assert len(cloned) == 1 and cloned[0]["powerState"] == "poweredOn", listed.stdout
        assert not [r for r in json.loads(listed.stdout) if r["identity"].get("banlieue.uid") == old_machine]
        _stop(dev)
    finally:
        if dev.proc.poll() is None:
            dev.proc.kill()

    dev, api = _start(state, tmpdir)  # no --keep-state: a fresh API
    try:
        assert _get(api, f"{VM_API}/mine") is None
        assert not any(line.startswith("[3/7]") and "kept API state" in line for line in dev.lines)
        _stop(dev)
    finally:
        if dev.proc.poll() is None:
            dev.proc.kill()
