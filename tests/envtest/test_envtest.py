"""envtest (banlieue.testing.envtest): real kube-apiserver + etcd + kube-controller-manager on loopback.

Checked through real interfaces: the CLI's one ready line, its cleanup on SIGTERM and its one-line
failures (binary missing, etcd exiting); the served version; every listening socket of the three
processes on 127.0.0.1; RBAC enforced for a TokenRequest token; the controllers the API relies on
(garbage collector, namespace deletion, default ServiceAccount) running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from banlieue.testing.envtest import Envtest, bin_dir, envtest_binaries_missing
from banlieue.testing.stack import wait_for

pytestmark = [pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing()))]

CLI = [sys.executable, "-m", "banlieue.testing.envtest"]


def _sockets(pid: int) -> list[tuple[str, str, str]]:
    """``(state, local ip:port, remote ip:port)`` of every TCP socket held by ``pid`` (from /proc;
    state ``0A`` is LISTEN, ``01`` ESTABLISHED)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])

    def address(field: str, v6: bool) -> str:
        hexip, hexport = field.split(":")
        if v6:
            return f"[{hexip}]:{int(hexport, 16)}"
        return ".".join(str(int(hexip[i:i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(hexport, 16)}"

    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                out.append((fields[3], address(fields[1], v6), address(fields[2], v6)))
    return out


def test_version_is_stamped(envtest: Envtest) -> None:
    status, version = envtest.request("GET", "/version")
    assert status == 200 and version["gitVersion"] == "v1.34.4", version
    assert (version["major"], version["minor"]) == ("1", "34")


def test_every_listener_and_every_connection_is_on_loopback(envtest: Envtest) -> None:
    """The network rule: etcd, kube-apiserver and kube-controller-manager listen on 127.0.0.1
    only and every connection they hold goes to 127.0.0.0/8 (nothing dials the service range)."""
    envtest.request("GET", "/api/v1/namespaces")  # some traffic first
    assert len(envtest.procs) == 3
    for proc in envtest.procs:
        sockets = _sockets(proc.process.pid)
        listening = [local for state, local, _ in sockets if state == "0A"]
        assert listening, f"{proc.name} listens nowhere?"
        assert all(a.startswith("127.0.0.1:") for a in listening), (proc.name, listening)
        remotes = [remote for state, _, remote in sockets if state != "0A"]
        assert remotes, f"{proc.name} holds no connection?"
        assert all(r.startswith("127.") for r in remotes), (proc.name, remotes)


def test_a_token_request_token_is_subject_to_rbac(envtest: Envtest) -> None:
    envtest.ensure_service_account("rbac-probe", "nobody")
    token = envtest.token_for("rbac-probe", "nobody")
    status, review = envtest.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                     {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                                     token=token)
    assert status == 201 and review["status"]["userInfo"]["username"] == "system:serviceaccount:rbac-probe:nobody"
    status, denied = envtest.request("GET", "/api/v1/namespaces/rbac-probe/secrets", token=token)
    assert status == 403 and denied["reason"] == "Forbidden", denied
    wait_for("the 403 in the audit log",
             lambda: any("/namespaces/rbac-probe/secrets" in e["requestURI"] for e in envtest.forbidden()), 10)


def test_the_garbage_collector_follows_owner_references(envtest: Envtest) -> None:
    ns = "default"
    status, owner = envtest.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gc-owner"}})
    assert status == 201, owner
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": owner["metadata"]["uid"]}
    status, _ = envtest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gc-dependent", "ownerReferences": [ref]}})
    assert status == 201
    assert envtest.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/gc-owner")[0] == 200
    wait_for("dependent collected", lambda: envtest.request("GET", f"/api/v1/namespaces/{ns}/configmaps/gc-dependent")[0] == 404,
             30)


def test_namespaces_get_a_default_service_account_and_can_be_deleted(envtest: Envtest) -> None:
    ns = "ns-lifecycle"
    assert envtest.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}})[0] == 201
    wait_for("default ServiceAccount", lambda: envtest.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200, 30)
    assert envtest.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})[0] == 201
    assert envtest.request("DELETE", f"/api/v1/namespaces/{ns}")[0] == 200
    wait_for("namespace gone", lambda: envtest.request("GET", f"/api/v1/namespaces/{ns}")[0] == 404, 60)


def test_up_prints_one_line_when_ready_and_leaves_nothing_behind(tmp_path: Path) -> None:
    kubectl = subprocess.run(["which", "kubectl"], capture_output=True, text=True, check=False).stdout.strip()
    started = time.monotonic()
    proc = subprocess.Popen([*CLI, "up", "--dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert re.fullmatch(r"envtest ready in [\d.]+ s: https://127\.0\.0\.1:\d+ kubeconfig=\S+\n", line), line
        elapsed = time.monotonic() - started
        print(f"envtest up: ready after {elapsed:.1f} s")
        if kubectl:
            out = subprocess.run([kubectl, "--kubeconfig", str(tmp_path / "kubeconfig"), "auth", "whoami", "-o",
                                  "jsonpath={.status.userInfo.groups}"], capture_output=True, text=True, check=False)
            assert out.returncode == 0 and "system:masters" in out.stdout, out.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert list(tmp_path.iterdir()) == []


def test_a_missing_binary_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = subprocess.run([*CLI, "up", "--dir", str(tmp_path / "d")], capture_output=True, text=True, check=False,
                          env={**os.environ, "BANLIEUE_ENVTEST_BIN": str(tmp_path)}, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (f"envtest: envtest binaries missing (etcd, kube-apiserver, kube-controller-manager in "
                           f"{tmp_path}): run 'make envtest'\n")


def test_etcd_not_starting_names_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("kube-apiserver", "kube-controller-manager"):
        (fake / name).symlink_to(bin_dir() / name)
    (fake / "etcd").write_text("#!/bin/sh\necho 'etcd: cannot listen' >&2\nexit 3\n")
    (fake / "etcd").chmod(0o755)
    proc = subprocess.run([*CLI, "up", "--dir", str(tmp_path / "d")], capture_output=True, text=True, check=False,
                          env={**os.environ, "BANLIEUE_ENVTEST_BIN": str(fake)}, timeout=60)
    log = tmp_path / "d" / "logs" / "etcd.log"
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"envtest: etcd exited with status 3 before etcd serving; see {log}\n"
    assert log.read_text() == "etcd: cannot listen\n"


def test_a_port_in_use_is_one_line_naming_the_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*CLI, "up", "--dir", str(tmp_path), "--port", str(port)], capture_output=True,
                              text=True, check=False, timeout=90)
    log = tmp_path / "logs" / "kube-apiserver.log"
    assert proc.returncode == 1 and proc.stdout == ""
    assert re.fullmatch(f"envtest: kube-apiserver exited with status 1 before [^;]+; see {re.escape(str(log))}\n",
                        proc.stderr), proc.stderr
    assert "address already in use" in log.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # the logs stay, nothing else


def test_a_controller_manager_port_taken_meanwhile_is_chosen_again(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-controller-manager's port is chosen before etcd and kube-apiserver start; when it is
    taken by then (an outgoing connection's ephemeral port, on a loaded machine), envtest starts
    it on another free port instead of failing the test that asked for an envtest."""
    import banlieue.testing.envtest as envtest_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        real_free_ports = envtest_module.free_ports
        calls = iter(range(1000))

        def first_choice_has_kcm_taken(count: int) -> list[int]:
            # _launch draws etcd's, etcd peer's, kube-controller-manager's (and kube-apiserver's)
            # ports together: the third of that first choice is the taken one; later ones are real.
            ports = real_free_ports(count)
            return [*ports[:2], port, *ports[3:]] if next(calls) == 0 else ports

        monkeypatch.setattr(envtest_module, "free_ports", first_choice_has_kcm_taken)
        with envtest_module.start_envtest(tmp_path / "d", keep_logs=True) as env:
            assert env.kcm_url != f"https://127.0.0.1:{port}"
            status, _ = env.request("GET", "/api/v1/namespaces/default/serviceaccounts/default", timeout=5)
            assert status == 200
    assert "address already in use" in (tmp_path / "d" / "logs" / "kube-controller-manager.log").read_text()
