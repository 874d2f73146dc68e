"""The role processes: fail-fast startup errors, one role alone, ``--namespace`` and ``--watch-filter``

Each test runs ``python -m banlieue.cli <role>`` as a subprocess; the API-server double runs in its
own process with the CRDs preloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from banlieue.cmd.dev import free_port
from banlieue.reconcilers.kinds import LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE
from banlieue.testing.apiserver.fixture import ApiServerProcess, start_subprocess, write_kubeconfig

from .harness import REPO, http, wait_for

pytestmark = pytest.mark.timeout(60)


def banlieue(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "banlieue.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL, env=env if env is not None else dict(os.environ),
    )


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s: {err[-2000:]}")
    return proc.returncode, err


@pytest.fixture(scope="module")
def double() -> Iterator[ApiServerProcess]:
    with start_subprocess(crd_dir=REPO / "config/crd", bookmark_interval=5.0) as api:
        yield api


def test_unreachable_api_server_fails_fast_in_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    code, err = finish(banlieue("manager", "--kubeconfig", str(kubeconfig), "--metrics-bind-address", "0",
                                "--health-probe-bind-address", "0"))
    assert code == 1
    assert err.startswith(f"banlieue: error: API server http://127.0.0.1:{port} unreachable") and err.count("\n") == 1
    assert time.monotonic() - started < 20


def test_no_kubeconfig_anywhere(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    code, err = finish(banlieue("controller", env=env))
    assert code == 1
    assert err == ("banlieue: error: no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod "
                   "(in-cluster config)\n")


def test_probe_port_in_use(double: ApiServerProcess) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = finish(banlieue("controller", "--kubeconfig", str(double.kubeconfig_path),
                                    "--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{port}"))
    assert code == 1
    last = err.splitlines()[-1]  # the lines before are the JSON logs of the start
    assert last.startswith("banlieue: error: cannot serve probes/metrics:") and "address already in use" in last


def create(api: ApiServerProcess, path: str, body: dict[str, object]) -> None:
    status, answer = http("POST", api.url + path, body)
    assert status in (201, 409), answer


def setup_objects(api: ApiServerProcess, vms: dict[tuple[str, str], dict[str, str]]) -> None:
    """Namespaces, the VMClass ``small`` and VirtualMachines ``{(namespace, name): labels}``
    whose image does not exist (the controller answers with Scheduled=False ImageNotFound)."""
    for ns in sorted({ns for ns, _ in vms}):
        create(api, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    create(api, "/apis/banlieue.io/v1alpha1/vmclasses", {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "small"},
        "spec": {"hardware": {"cpus": 1, "memoryMiB": 1024}}})
    for (ns, name), labels in vms.items():
        create(api, f"/apis/banlieue.io/v1alpha1/namespaces/{ns}/virtualmachines", {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "missing-image"}}})


def vm_status(api: ApiServerProcess, ns: str, name: str) -> dict[str, Any] | None:
    code, body = http("GET", f"{api.url}/apis/banlieue.io/v1alpha1/namespaces/{ns}/virtualmachines/{name}")
    assert code == 200
    return body.get("status") or None  # type: ignore[no-any-return]


@contextlib.contextmanager
def controller(api: ApiServerProcess, *flags: str) -> Iterator[str]:
    """``banlieue controller FLAGS`` until the block ends; yields its probe URL; then SIGTERM
    and the exit code must be 0."""
    probes = free_port()
    proc = banlieue("controller", "--kubeconfig", str(api.kubeconfig_path), "--metrics-bind-address", "0",
                    "--health-probe-bind-address", f"127.0.0.1:{probes}", *flags)
    try:
        yield f"http://127.0.0.1:{probes}"
    finally:
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc, timeout=40)
    assert code == 0, err[-2000:]


def test_controller_role_alone_in_one_namespace(double: ApiServerProcess) -> None:
    api = double
    setup_objects(api, {("team-a", "a1"): {}, ("team-b", "b1"): {}})
    leases = f"{api.url}/apis/coordination.k8s.io/v1/namespaces/team-a/leases"
    with controller(api, "--namespace", "team-a", "--leader-elect", "--leader-election-namespace", "team-a") as probes:
        status = wait_for("team-a/a1 reconciled", lambda: vm_status(api, "team-a", "a1"), 20)
        reasons = {c["type"]: c.get("reason") for c in status["conditions"]}
        assert reasons["Scheduled"] == "ImageNotFound"
        assert http("GET", probes + "/readyz")[0] == 200
        time.sleep(1.0)  # b1 had the same chance: outside --namespace it stays untouched
        assert vm_status(api, "team-b", "b1") is None
        code, lease = http("GET", f"{leases}/{LEASE_CONTROLLER}")
        assert code == 200 and lease["spec"]["holderIdentity"]
        assert http("GET", f"{leases}/{LEASE_PROVIDER_VSPHERE}")[0] == 404  # the provider role is not running
    assert http("GET", f"{leases}/{LEASE_CONTROLLER}")[1]["spec"]["holderIdentity"] == ""  # released on SIGTERM


def test_watch_filter_leaves_unlabelled_vms_alone(double: ApiServerProcess) -> None:
    api = double
    setup_objects(api, {("team-c", "labelled"): {"cluster.x-k8s.io/watch-filter": "blue"}, ("team-c", "unlabelled"): {}})
    with controller(api, "--namespace", "team-c", "--watch-filter", "blue"):
        wait_for("team-c/labelled reconciled", lambda: vm_status(api, "team-c", "labelled"), 20)
        time.sleep(1.0)
        assert vm_status(api, "team-c", "unlabelled") is None


async def test_first_contact_reports_refused_credentials_and_silence_without_secrets() -> None:
    from aiohttp import web

    from banlieue.cmd.roles import first_contact
    from banlieue.options import StartupError
    from banlieue.runtime.config import config_for_url

    async def unauthorized(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "reason": "Unauthorized", "message": "nope", "code": 401}, status=401)

    async def silent(_: web.Request) -> web.Response:
        await asyncio.sleep(2)  # longer than the 0.5 s allowed; short so that cleanup is quick
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/version", unauthorized)
    app.router.add_get("/slow/version", silent)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        secret = "s3cr3t-token"
        with pytest.raises(StartupError) as refused:
            await first_contact(config_for_url(f"http://127.0.0.1:{port}", token=secret), timeout=5)
        assert str(refused.value) == f"API server http://127.0.0.1:{port} refused the credentials (401 Unauthorized)"
        started = time.monotonic()
        with pytest.raises(StartupError) as silence:
            await first_contact(config_for_url(f"http://user:{secret}@127.0.0.1:{port}/slow"), timeout=0.5)
        assert time.monotonic() - started < 5
        assert "did not answer GET /version within 0.5 s" in str(silence.value)
        assert secret not in str(silence.value) and "user" not in str(silence.value)
    finally:
        await runner.cleanup()


def leader_status(metrics_url: str) -> float | None:
    status, text = http("GET", metrics_url)
    if status != 200:
        return None
    for line in str(text).splitlines():
        if line.startswith(f'leader_election_master_status{{name="{LEASE_CONTROLLER}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_standby_replica_takes_over_once_the_leader_releases_on_sigterm(double: ApiServerProcess) -> None:
    api = double
    create(api, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ha"}})
    replicas = []
    for _ in range(2):
        metrics = free_port()
        proc = banlieue("controller", "--kubeconfig", str(api.kubeconfig_path), "--leader-elect",
                        "--leader-election-namespace", "ha", "--metrics-bind-address", f"127.0.0.1:{metrics}",
                        "--health-probe-bind-address", "0")
        replicas.append((proc, f"http://127.0.0.1:{metrics}/metrics"))
        if len(replicas) == 1:  # the first one leads before the second starts
            wait_for("first replica leads", lambda: leader_status(replicas[0][1]) == 1.0, 20)
    (first, first_metrics), (second, second_metrics) = replicas
    try:
        wait_for("second replica campaigning", lambda: leader_status(second_metrics) == 0.0, 20)
        time.sleep(1.0)
        assert leader_status(second_metrics) == 0.0  # standby while the first holds the Lease
        first.send_signal(signal.SIGTERM)
        code, err = finish(first, timeout=40)
        assert code == 0, err[-2000:]
        # Released (holder "", 1 s duration): the standby takes over within a retry period or two,
        # long before the 15 s lease duration would have expired.
        wait_for("second replica leads", lambda: leader_status(second_metrics) == 1.0, 10)
        assert leader_status(first_metrics) is None and second.poll() is None
    finally:
        for proc, _ in replicas:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                finish(proc, timeout=40)
