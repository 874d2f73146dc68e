"""End-to-end harness: ``banlieue manager`` as a subprocess against the API-server double (its own
process) and two vcsims, driven with kubectl and plain HTTP. vcsim guests report no address on
their own; the simulators play DHCP and VMware Tools (``start_vcsim(guest_ip=...)``, as
``banlieue dev`` starts them).

``manager_env`` (module scope) installs config/crd, starts the manager with leader election,
waits for ``/readyz``, then applies config/samples with each Provider pointed at its vcsim (the
same rewrite ``banlieue dev`` does). Everything started is stopped at teardown.
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from pyVim.connect import Disconnect, SmartConnect

from banlieue.cmd.dev import find_kubectl, free_port, point_providers_at, sample_documents
from banlieue.options import StartupError
from banlieue.testing.apiserver.fixture import start_subprocess
from banlieue.testing.vcsim import GUEST_IP_RANGES, VcsimProcess, VcsimUnavailable, start_vcsim, vcsim_binary

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def kubectl_path() -> str | None:
    try:
        return find_kubectl()
    except StartupError:
        return None


def requirements_skip() -> pytest.MarkDecorator:
    """Skip (with the reason) when kubectl or vcsim is missing."""
    reasons = []
    if kubectl_path() is None:
        reasons.append("kubectl not installed")
    try:
        vcsim_binary()
    except VcsimUnavailable as err:
        reasons.append(str(err))
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "ok")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    """Poll ``fn`` until it returns a truthy value; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:g} s (last value {last!r})")


def http(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """One request without proxies; returns (status, decoded JSON or text); 0 = no answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass
class ManagerEnv:
    """The running environment of one test module."""

    api_url: str
    kubeconfig: Path
    vcsims: dict[str, VcsimProcess]
    manager: subprocess.Popen[bytes]
    manager_log: Path
    metrics_url: str
    probes_url: str
    kubectl: str
    docs: list[dict[str, Any]]

    def kubectl_run(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args], input=stdin, capture_output=True,
            text=True, timeout=60, check=False,
        )
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def get(self, path: str) -> tuple[int, Any]:
        return http("GET", self.api_url + path)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.manager_log.read_text(errors="replace").splitlines()[-lines:])

    def stop_manager(self, timeout: float = 40.0) -> int:
        if self.manager.poll() is None:
            self.manager.send_signal(signal.SIGTERM)
            try:
                self.manager.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.manager.kill()
                self.manager.wait(timeout=10)
                pytest.fail(f"manager did not exit within {timeout:g} s of SIGTERM:\n{self.log_tail()}")
        return int(self.manager.returncode)


class VcsimClient:
    """pyVmomi session on one vcsim with TLS verified against its CA (the test's own oracle,
    independent of banlieue's backend)."""

    def __init__(self, vc: VcsimProcess) -> None:
        context = ssl.create_default_context(cafile=vc.ca_file)
        self.si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password, sslContext=context)

    def find_by_bios_uuid(self, uuid: str) -> Any:
        return self.si.content.searchIndex.FindByUuid(None, uuid, True, False)

    def close(self) -> None:
        Disconnect(self.si)


def start_manager(kubeconfig: Path, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """``banlieue manager --leader-elect`` on free 127.0.0.1 ports; returns (process, metrics, probes)."""
    metrics, probes = free_port(), free_port()
    argv = [
        sys.executable, "-m", "banlieue.cli", "manager", "--kubeconfig", str(kubeconfig), "--leader-elect",
        "--leader-election-namespace", "default", "--metrics-bind-address", f"127.0.0.1:{metrics}",
        "--health-probe-bind-address", f"127.0.0.1:{probes}", "--log-format", "console", *extra,
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=sink, stdin=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{probes}"


def crd_files() -> list[Path]:
    return sorted(p for p in (REPO / "config/crd").glob("*.yaml")
                  if (yaml.safe_load(p.read_text()) or {}).get("kind") == "CustomResourceDefinition")


@pytest.fixture(scope="module")
def manager_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    """API double + vcsim per sample Provider + ``banlieue manager``, samples applied."""
    kubectl = kubectl_path()
    assert kubectl is not None
    tmp = tmp_path_factory.mktemp("manager-e2e")
    docs = sample_documents(REPO / "config/samples")
    providers = [d["metadata"]["name"] for d in docs if d.get("kind") == "Provider"]
    with ExitStack() as stack:
        api = stack.enter_context(start_subprocess(bookmark_interval=5.0))
        # 4 hosts per cluster: the sample class medium needs 8 GiB free in one cluster.
        vcsims = {name: stack.enter_context(start_vcsim(host=4, guest_ip=GUEST_IP_RANGES[i % len(GUEST_IP_RANGES)]))
                  for i, name in enumerate(providers)}
        kubeconfig = api.kubeconfig_path
        args = [a for p in crd_files() for a in ("-f", str(p))]
        subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "apply", "--validate=false", *args],
                       check=True, capture_output=True, timeout=60)
        log = tmp / "manager.log"
        process, metrics_url, probes_url = start_manager(kubeconfig, log)
        env = ManagerEnv(api.url, kubeconfig, vcsims, process, log, metrics_url, probes_url, kubectl, [])
        stack.callback(env.stop_manager)
        wait_for("manager /readyz 200", lambda: process.poll() is not None or http("GET", probes_url + "/readyz")[0] == 200, 30)
        assert process.poll() is None, f"manager exited with {process.returncode}:\n{env.log_tail()}"
        endpoints = {name: (vc.url, vc.ca_pem) for name, vc in vcsims.items()}
        env.docs = point_providers_at(docs, endpoints)
        env.kubectl_run("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump_all(env.docs))
        yield env
