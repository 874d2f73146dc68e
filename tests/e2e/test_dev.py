"""``banlieue dev`` as a user runs it (a subprocess), plus its helpers.

``--exit-when-ready`` must bring up the API double, two vcsims and the manager, get every sample
VirtualMachine Ready, print the table and a closing line saying everything was Ready and has been
stopped, exit 0 and leave no simulator behind.
A stage that cannot start names itself and exits 1, stopping what it had started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from banlieue.cmd.dev import point_providers_at, sample_documents
from banlieue.testing.envtest import envtest_binaries_missing
from banlieue.testing.guestnet import static_address

from .harness import REPO, http, read_dev_until_ready, requirements_skip


def run_dev(state: Path, *extra: str, env: dict[str, str] | None = None, timeout: float = 110,
            cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "banlieue.cli", "dev", "--state-dir", str(state), *extra],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.vcsim
@pytest.mark.kubectl
@pytest.mark.timeout(120)
@requirements_skip()
def test_dev_exit_when_ready(tmp_path: Path) -> None:
    # A relative --state-dir (as `make dev` uses .banlieue) from another working directory:
    # the children run elsewhere, so every path handed to them must be absolute.
    state = tmp_path / "state"
    proc = run_dev(Path("state"), "--exit-when-ready", "--metrics-bind-address", "127.0.0.1:0",
                   "--health-probe-bind-address", "127.0.0.1:0", "--vcsim-arg=-datastores=dev-extra-ds",
                   "--vcsim-arg=--method-delay=CloneVM_Task=50", cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr}\nmanager.log:\n{(state / 'manager.log').read_text()[-3000:]}"
    for stage in range(1, 8):
        assert re.search(rf"^\[{stage}/7\] .* ok \(\d+\.\d s\)", out, re.M), f"stage {stage} line missing:\n{out}"
    # The kubectl table: the three kinds by their short names, every sample VM Ready.
    for vm in ("web-1", "db-0", "db-1", "app-1"):
        assert re.search(rf"^virtualmachine\.banlieue\.io/{vm} .* True ", out, re.M), out
        assert re.search(rf"^vspheremachine\.infrastructure\.banlieue\.io/{vm} .*vsphere://", out, re.M), out
    assert re.search(r"^provider\.banlieue\.io/vcenter-a .* True ", out, re.M), out
    # Nothing is left running, so no "in another terminal" hints: the table, then one closing line.
    assert "export KUBECONFIG" not in out and "In another terminal" not in out and "metrics:" not in out
    assert re.fullmatch(r"banlieue dev: all 4 VirtualMachines were Ready after \d+\.\d s; everything has been stopped "
                        r"\(--exit-when-ready\)", out.splitlines()[-1]), out
    assert out.splitlines()[-2].startswith("provider.banlieue.io/"), out  # right after the table
    # Everything it started is gone: both simulators (pids in their info files) and the API double.
    infos = [json.loads(p.read_text()) for p in state.glob("vcsim-*/info.json")]
    assert len(infos) == 2
    # --vcsim-arg reached both simulators.
    assert all("dev-extra-ds" in i["datastores"]["DC0"] for i in infos), infos
    assert not [i["pid"] for i in infos if process_alive(int(i["pid"]))]
    api_url = re.search(r"^\[1/7\] .* ok \(.*\): (http://127\.0\.0\.1:\d+)$", out, re.M)
    assert api_url is not None
    assert http("GET", api_url.group(1) + "/version")[0] == 0
    assert "shutdown complete" in (state / "manager.log").read_text()


@pytest.mark.vcsim
@pytest.mark.kubectl
@pytest.mark.timeout(180)
@requirements_skip()
@pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing()))
def test_dev_on_the_real_apiserver(tmp_path: Path) -> None:
    """``banlieue dev --apiserver real``: the same seven stages on kube-apiserver from ``make
    envtest``; everything (etcd and kube-apiserver too) stopped at the end, their files removed."""
    state = tmp_path / "state"
    proc = run_dev(state, "--apiserver", "real", "--exit-when-ready", "--metrics-bind-address", "127.0.0.1:0",
                   "--health-probe-bind-address", "127.0.0.1:0", timeout=170)
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr}\nenvtest.log:\n{(state / 'envtest.log').read_text()}"
    api_url = re.search(r"^\[1/7\] starting kube-apiserver \(envtest\) \.\.\. ok \(.*\): (https://127\.0\.0\.1:\d+)$", out, re.M)
    assert api_url is not None, out
    for vm in ("web-1", "db-0", "db-1", "app-1"):
        assert re.search(rf"^virtualmachine\.banlieue\.io/{vm} .* True ", out, re.M), out
    assert out.splitlines()[-1].startswith("banlieue dev: all 4 VirtualMachines were Ready after"), out
    assert http("GET", api_url.group(1).replace("https", "http") + "/version")[0] == 0, "kube-apiserver left running"
    assert list((state / "envtest").iterdir()) == [], "envtest left files behind"


@pytest.mark.timeout(60)
def test_dev_names_the_failed_stage_and_stops_what_it_started(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # What a dev killed with SIGKILL leaves (new-user finding): pid files whose numbers may be
    # other processes' by now (here this test's own). The next dev removes them first.
    (state / "capi").mkdir(parents=True)
    for stale in (state / "manager.pid", state / "capi" / "capi-core.pid"):
        stale.write_text(f"{os.getpid()}\n", encoding="utf-8")
    proc = run_dev(state, "--exit-when-ready", env={"BANLIEUE_VCSIM": str(tmp_path / "no-such-vcsim")}, timeout=50)
    assert not list(state.rglob("*.pid")), list(state.rglob("*.pid"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[2/7] starting vcsim" in proc.stdout and "failed" in proc.stdout
    assert proc.stderr.startswith("banlieue: error: stage 2/7 (starting vcsim")
    assert "no-such-vcsim is missing: run `make vcsim`" in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line
    api_url = re.search(r"^\[1/7\] .* ok \(.*\): (http://127\.0\.0\.1:\d+)$", proc.stdout, re.M)
    assert api_url is not None, proc.stdout
    assert http("GET", api_url.group(1) + "/version")[0] == 0, "API double left running"


def test_samples_point_each_provider_at_its_simulator() -> None:
    docs = sample_documents(REPO / "config/samples")
    rewritten = point_providers_at(docs, {"vcenter-a": ("https://127.0.0.1:1234/sdk", "PEM-A")})
    providers = {d["metadata"]["name"]: d for d in rewritten if d["kind"] == "Provider"}
    connection = providers["vcenter-a"]["spec"]["connection"]
    assert connection["endpoint"] == "https://127.0.0.1:1234/sdk"
    assert connection["caBundle"] == {"inline": "PEM-A"} and "insecureSkipTLSVerify" not in connection
    # Untouched: a Provider without a simulator, every other document, and the input itself.
    original = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Provider"}
    assert providers["vcenter-b"] == original["vcenter-b"]
    assert original["vcenter-a"]["spec"]["connection"]["endpoint"] != connection["endpoint"]
    assert [d for d in rewritten if d["kind"] != "Provider"] == [d for d in docs if d["kind"] != "Provider"]
    # Only the top level of config/samples: capi/ needs CAPI's CRDs.
    assert not any(d["apiVersion"].startswith("cluster.x-k8s.io/") for d in docs)
    assert list(yaml.safe_load_all(yaml.safe_dump_all(rewritten))) == rewritten  # what kubectl gets


@pytest.mark.vcsim
@pytest.mark.kubectl
@pytest.mark.timeout(120)
@requirements_skip()
def test_dev_runs_until_ctrl_c_then_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-m", "banlieue.cli", "dev", "--state-dir", str(state), "--metrics-bind-address",
         "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        out = read_dev_until_ready(proc)
        # The simulators report guest addresses (--guest-ip), from documentation ranges only.
        addresses = re.findall(r"\s(\d+\.\d+\.\d+\.\d+)\s", out)
        assert addresses and all(a.startswith(("192.0.2.", "198.51.100.")) for a in addresses), out
        probes = re.search(r"probes: (http://127\.0\.0\.1:\d+)/readyz", out)
        assert probes is not None
        assert http("GET", probes.group(1) + "/readyz")[0] == 200  # still serving after ready
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped: every child process has exited" in out
    assert http("GET", probes.group(1) + "/readyz")[0] == 0
    infos = [json.loads(p.read_text()) for p in state.glob("vcsim-*/info.json")]
    assert infos and not [i["pid"] for i in infos if process_alive(int(i["pid"]))]


def test_simulated_guest_reports_its_static_address_else_none() -> None:
    import base64

    def extra(md: object) -> dict[str, str]:
        return {"guestinfo.metadata": base64.b64encode(json.dumps(md).encode()).decode(),
                "guestinfo.metadata.encoding": "base64"}

    static = {"network": {"version": 2, "ethernets": {
        "id0": {"dhcp4": True}, "id1": {"dhcp4": False, "addresses": ["10.0.0.5/24", "10.0.0.6/24"]}}}}
    assert static_address(extra(static)) == "10.0.0.5"
    assert static_address(extra({"network": {"ethernets": {"id0": {"dhcp4": True}}}})) is None
    assert static_address({}) is None
    assert static_address({"guestinfo.metadata": "not base64 json"}) is None


@pytest.mark.timeout(60)
def test_one_dev_environment_per_state_dir(tmp_path: Path) -> None:
    import fcntl

    state = tmp_path / "state"
    state.mkdir()
    with (state / "dev.lock").open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `banlieue dev` holds it
        proc = run_dev(state, "--exit-when-ready", timeout=50)
    assert proc.returncode == 1
    assert proc.stderr == f"banlieue: error: another banlieue dev is running with --state-dir {state}\n"
    assert proc.stdout == "" and not (state / "kubeconfig").exists()
