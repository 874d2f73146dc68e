"""``python -m banlieue.testing.apiserver --state-file FILE`` (``banlieue dev --keep-state``): the
objects outlive the process, as real processes over HTTP. Checked: a custom resource with its
status, UID, resourceVersion and generation comes back after SIGTERM and after SIGKILL (saved
every ``--save-interval``); its CRD is served again before anything is applied; new writes get
higher resourceVersions; a watch from the old process's revision gets 410 (compacted); an
unreadable file is one error line, exit 1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from banlieue.testing.stack import REPO_ROOT

VMS = "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines"


class Double:
    def __init__(self, state: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "banlieue.testing.apiserver", "--state-file", str(state), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.proc.stderr.read() if self.proc.stderr else ""

    def request(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def stop(self, sig: int = signal.SIGTERM) -> str:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def _vm(name: str) -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": "default"},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}}}


def test_objects_outlive_the_process(tmp_path: Path) -> None:
    state = tmp_path / "apiserver-state.json"
    first = Double(state, "--crd-dir", str(REPO_ROOT / "config/crd"))
    try:
        code, created = first.request("POST", VMS, _vm("kept"))
        assert code == 201
        code, with_status = first.request("PATCH", f"{VMS}/kept/status", {"status": {"observedPowerState": "PoweredOn"}},
                                          "application/merge-patch+json")
        assert code == 200
        code, _ = first.request("PATCH", f"{VMS}/kept", {"spec": {"desiredPowerState": "PoweredOff"}},
                                "application/merge-patch+json")
        assert code == 200
        _, before = first.request("GET", f"{VMS}/kept")
    finally:
        first.stop()
    assert state.is_file()

    # No --crd-dir: the CRD comes from the file, so the VM is served at once.
    second = Double(state, "--save-interval", "0.5")
    try:
        code, after = second.request("GET", f"{VMS}/kept")
        assert code == 200, after
        assert after == before
        assert after["metadata"]["uid"] == created["metadata"]["uid"] and after["metadata"]["generation"] == 2
        assert after["status"] == {"observedPowerState": "PoweredOn"} and with_status["metadata"]["uid"] == created["metadata"]["uid"]
        code, watch = second.request("GET", f"{VMS}?watch=true&resourceVersion={before['metadata']['resourceVersion']}&timeoutSeconds=1")
        assert code == 410 or (watch.get("object") or {}).get("code") == 410, watch
        code, other = second.request("POST", VMS, _vm("new"))
        assert code == 201 and int(other["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
        time.sleep(1.5)  # --save-interval 0.5 s: saved within it, so a SIGKILL loses nothing
        killed = second.stop(signal.SIGKILL)
    finally:
        if second.proc.poll() is None:
            second.stop()
    assert killed.splitlines()[0] == f"restored 13 objects from {state}", killed  # 4 namespaces, 8 CRDs, the VM

    third = Double(state)
    try:
        code, listed = third.request("GET", VMS)
        assert code == 200 and sorted(i["metadata"]["name"] for i in listed["items"]) == ["kept", "new"]
    finally:
        third.stop()


def test_an_unreadable_state_file_is_one_line_exit_1(tmp_path: Path) -> None:
    state = tmp_path / "apiserver-state.json"
    state.write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "banlieue.testing.apiserver", "--state-file", str(state)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"python -m banlieue.testing.apiserver: error: cannot restore --state-file {state}: ")
    assert proc.stderr.count("\n") == 1
