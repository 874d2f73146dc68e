"""``banlieue dev --capi`` as a user runs it (issue 17 item 2): kube-apiserver (envtest), two
vcsims, banlieue installed from ``config/default``, the three real CAPI managers of ``make capi``
as processes, ``banlieue manager`` and a clusterctl local repository. The test runs the lines the
usage text prints (``kubectl create secret …``, ``clusterctl generate cluster … | kubectl apply -f
-``, ``clusterctl describe cluster …``) and sees CAPI and banlieue provision the Cluster; Ctrl-C
then stops every process, and nothing is left in the temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from banlieue.testing.capi import binaries_missing, check_loopback
from banlieue.testing.clusterctl import documents, parse_describe
from banlieue.testing.envtest import envtest_binaries_missing

from .harness import REPO, read_dev_until_ready, requirements_skip

PROVISION_TIMEOUT = 120.0  # seconds for the two worker Machines to get a providerID on a loaded 2-core machine


def dev_argv(state: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "banlieue.cli", "dev", "--state-dir", str(state), "--metrics-bind-address", "127.0.0.1:0",
            "--health-probe-bind-address", "127.0.0.1:0", *extra]


def processes_mentioning(text: str) -> dict[int, str]:
    """pid -> command line of every process whose command line contains ``text``."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found[int(proc.name)] = cmdline
    return found


def sh(line: str, env: dict[str, str], timeout: float = 60) -> str:
    """Run one printed usage line with bash, as a user pastes it; its stdout."""
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", line], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{line}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


def test_dev_capi_without_the_capi_binaries_is_one_line(tmp_path: Path) -> None:
    """Missing ``make capi`` output: exit 1, one line naming the binaries and the fix, before any
    stage starts (so nothing to stop)."""
    state = tmp_path / "state"
    empty = tmp_path / "no-bin"
    empty.mkdir()
    proc = subprocess.run(dev_argv(state, "--capi", "--exit-when-ready"), capture_output=True, text=True, timeout=60, check=False,
                          cwd=REPO, env={**os.environ, "BANLIEUE_CAPI_BIN_DIR": str(empty)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"banlieue: error: CAPI binaries missing (capi-manager, capi-kubeadm-bootstrap-manager, "
                                  f"capi-kubeadm-control-plane-manager, clusterctl in {empty}): run 'make capi'"), proc.stderr
    assert proc.stdout == ""


def test_dev_capi_with_the_api_double_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(dev_argv(tmp_path / "state", "--capi", "--apiserver", "double"), capture_output=True, text=True,
                          timeout=60, check=False, cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == "banlieue: error: --capi needs --apiserver real (CAPI's webhooks and CRD conversion need a real kube-apiserver)\n"


@pytest.mark.vcsim
@pytest.mark.kubectl
@pytest.mark.timeout(420)
@requirements_skip()
@pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing()))
@pytest.mark.skipif(binaries_missing() is not None, reason=str(binaries_missing()))
def test_dev_capi_provisions_the_printed_cluster_then_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    systmp = tmp_path / "tmp"  # dev's TMPDIR: what it or a child leaves in "/tmp" lands here
    systmp.mkdir()
    proc = subprocess.Popen(dev_argv(state, "--capi"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "TMPDIR": str(systmp)})
    try:
        out = read_dev_until_ready(proc)
        assert re.search(r"^\[4/8\] starting Cluster API \(core, kubeadm bootstrap and control plane managers\) \.\.\. ok", out, re.M), out
        kubeconfig = re.search(r"^  export KUBECONFIG=(\S+)$", out, re.M)
        assert kubeconfig is not None and Path(kubeconfig.group(1)).is_file(), out
        start = out.index("Cluster API (logs in")
        usage = [line.removeprefix("  ") for line in out[start:].splitlines()[1:-1]]
        assert len(usage) == 3 and usage[1].endswith(" | kubectl apply -f -"), usage
        running = processes_mentioning(str(state))
        names = " ".join(running.values())
        for binary in ("capi-manager", "capi-kubeadm-bootstrap-manager", "capi-kubeadm-control-plane-manager", "kube-apiserver", "vcsim"):
            assert f"/bin/{binary} " in names, (binary, names)

        env = {**os.environ, "KUBECONFIG": kubeconfig.group(1)}
        sh(usage[0], env)  # the bootstrap Secret
        generate = usage[1].removesuffix(" | kubectl apply -f -")
        check_loopback(documents(sh(generate, env)))  # the network rule, before CAPI sees it
        sh(usage[1], env)

        def machines() -> list[dict[str, object]]:
            return list(json.loads(sh("kubectl get machines.cluster.x-k8s.io -n default -o json", env))["items"])

        deadline = time.monotonic() + PROVISION_TIMEOUT
        while not ((ms := machines()) and len(ms) == 2 and all(m["spec"].get("providerID") for m in ms)):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, f"2 Machines with providerID: {ms}\n{(state / 'manager.log').read_text()[-3000:]}"
            time.sleep(2)
        tree = parse_describe(sh(usage[2], env))
        assert tree[("VSphereCluster", "capi-demo")]["Ready"].status == "True", tree
        # Domains the VSphereCluster leaves out are counted after the advertised ones (status.excludedFailureDomains).
        assert re.search(r"\d+ failure domains from 2 Providers(; \d+ excluded \(status\.excludedFailureDomains\))?$",
                         tree[("Cluster", "capi-demo")]["InfrastructureReady"].message), tree

        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rest.rstrip().endswith("stopped: every child process has exited"), rest
    alive = {pid: cmd for pid, cmd in processes_mentioning(str(state)).items() if pid in running}
    assert alive == {}, alive
    assert not (state / "tmp").exists()
    assert list(systmp.iterdir()) == []
