"""End-to-end harness: ``banlieue manager`` as a subprocess against an API server (the double in
its own process, or envtest's kube-apiserver: :mod:`banlieue.testing.apiservers`) and two vcsims, driven with kubectl and plain HTTP. vcsim guests report no address on
their own; the simulators play DHCP and VMware Tools (``start_vcsim(guest_ip=...)``, as
``banlieue dev`` starts them).

``manager_env`` (module scope, parametrized over :func:`banlieue.testing.apiservers.kinds`: the
double and the real server unless ``$BANLIEUE_TEST_APISERVER`` picks one) installs config/crd
(on the real server all of config/default but the Deployment, server-side, and the manager runs
with a ServiceAccount token bound only to config/rbac), starts the manager with leader election,
waits for ``/readyz``, then applies config/samples with each Provider pointed at its vcsim (the
same rewrite ``banlieue dev`` does). Everything started is stopped at teardown. The process
harness itself (``start_banlieue``, ``http``, ``wait_for``, ``condition``, ``crd_files``) is
:mod:`banlieue.testing.stack`, re-exported here.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyVim.connect import Disconnect, SmartConnect

from banlieue.cmd.dev import find_kubectl, point_providers_at, sample_documents
from banlieue.options import StartupError
from banlieue.testing.apiservers import ApiServerUnderTest, kinds, start_api_server
from banlieue.testing.stack import BanlieueProcess, condition, crd_files, http, start_banlieue, wait_for
from banlieue.testing.vcsim import GUEST_IP_RANGES, VcsimProcess, VcsimUnavailable, start_vcsim, vcsim_binary

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "ManagerEnv", "VcsimClient", "apply_flags", "condition", "crd_files", "http", "kubectl_path", "manager_env",
           "requirements_skip", "start_manager_env", "wait_for"]


DEV_READY_LINE = "Ctrl-C stops everything."
"""The line ``banlieue dev`` prints once everything it started is ready."""


def read_dev_until_ready(proc: subprocess.Popen[str]) -> str:
    """What ``banlieue dev`` (``proc``, stdout a text pipe) printed up to its ready line. Fails
    the test with that output (and stderr, when dev has exited) if stdout ends before it;
    bounded by the test timeout."""
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(DEV_READY_LINE):
            break
    out = "".join(lines)
    if not (lines and lines[-1].startswith(DEV_READY_LINE)):
        pytest.fail(out + (proc.stderr.read() if proc.poll() is not None and proc.stderr else ""))
    return out


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


@dataclass
class ManagerEnv:
    """The running environment of one test module: the API server (``api``: double or real), its
    vcsims (by Provider name) and ``banlieue manager`` (:class:`~banlieue.testing.stack.BanlieueProcess`).
    ``kubeconfig`` has all rights (kubectl of the tests); the manager's may have fewer."""

    api: ApiServerUnderTest
    kubeconfig: Path
    vcsims: dict[str, VcsimProcess]
    manager: BanlieueProcess
    kubectl: str
    docs: list[dict[str, Any]]

    @property
    def api_url(self) -> str:
        return self.api.url

    @property
    def metrics_url(self) -> str:
        """The manager's ``http://127.0.0.1:<port>/metrics``."""
        return self.manager.metrics_url

    @property
    def probes_url(self) -> str:
        """The manager's ``http://127.0.0.1:<port>`` (``/healthz``, ``/readyz``)."""
        return self.manager.probes_url

    def kubectl_run(self, *args: str, stdin: str | None = None, timeout: float = 90) -> str:
        """``kubectl --kubeconfig <all rights> ARGS`` (``timeout`` s); asserts exit 0, returns stdout."""
        proc = subprocess.run(
            [self.kubectl, "--kubeconfig", str(self.kubeconfig), *args], input=stdin, capture_output=True,
            text=True, timeout=timeout, check=False,
        )
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}\nmanager log:\n{self.log_tail()}"
        return proc.stdout

    def get(self, path: str) -> tuple[int, Any]:
        return self.api.request("GET", path, timeout=10.0)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request to the API server with all rights: ``(status, decoded body)``."""
        return self.api.request(method, path, body)

    def log_tail(self, lines: int = 40) -> str:
        return self.manager.tail(lines)

    def stop_manager(self, timeout: float = 40.0) -> int:
        """SIGTERM the manager; fails the test when it needs SIGKILL after ``timeout`` s. Returns
        its exit status."""
        if not self.manager.stop(timeout):
            pytest.fail(f"manager did not exit within {timeout:g} s of SIGTERM:\n{self.log_tail()}")
        return int(self.manager.process.returncode)


def apply_flags(env: ManagerEnv) -> tuple[str, ...]:
    """``kubectl apply`` flags for test documents: ``--validate=false`` on the double (it serves
    no OpenAPI v3 for kubectl's field validation); none on the real server (strict validation)."""
    return ("--validate=false",) if env.api.kind == "double" else ()


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


def start_manager_env(stack: ExitStack, tmp: Path, api: ApiServerUnderTest,
                      vcsims: dict[str, VcsimProcess]) -> ManagerEnv:
    """Install banlieue's API into the running API server ``api`` with kubectl
    (:meth:`~banlieue.testing.apiservers.ApiServerUnderTest.install`), start ``banlieue manager
    --leader-elect`` with :meth:`~banlieue.testing.apiservers.ApiServerUnderTest.manager_kubeconfig`
    (console logs into ``tmp/manager.log``) and wait (30 s) for its ``/readyz``. The manager is
    stopped (SIGTERM) when ``stack`` closes, before what was entered into ``stack`` earlier."""
    kubectl = kubectl_path()
    assert kubectl is not None
    api.install(kubectl)
    manager = start_banlieue(api.manager_kubeconfig(kubectl, tmp), tmp / "manager.log", log_format="console")
    env = ManagerEnv(api, api.kubeconfig_path, vcsims, manager, kubectl, [])
    stack.callback(env.stop_manager)
    manager.wait_ready(30)
    return env


@pytest.fixture(scope="module", params=kinds(both_by_default=True))
def manager_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    """API server (``request.param``: double or real) + vcsim per sample Provider + ``banlieue
    manager``, samples applied."""
    yield from samples_env(request.param, tmp_path_factory)


def samples_env(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    """The body of ``manager_env`` on the API server ``kind``, for modules that choose their own
    servers."""
    kubectl = kubectl_path()
    assert kubectl is not None
    tmp = tmp_path_factory.mktemp("manager-e2e")
    docs = sample_documents(REPO / "config/samples")
    providers = [d["metadata"]["name"] for d in docs if d.get("kind") == "Provider"]
    with ExitStack() as stack:
        api = stack.enter_context(start_api_server(kind, tmp, bookmark_interval=5.0))
        # 4 hosts per cluster: the sample class medium needs 8 GiB free in one cluster.
        vcsims = {name: stack.enter_context(start_vcsim(host=4, guest_ip=GUEST_IP_RANGES[i % len(GUEST_IP_RANGES)]))
                  for i, name in enumerate(providers)}
        env = start_manager_env(stack, tmp, api, vcsims)
        endpoints = {name: (vc.url, vc.ca_pem) for name, vc in vcsims.items()}
        env.docs = point_providers_at(docs, endpoints)
        env.kubectl_run("apply", *apply_flags(env), "-f", "-", stdin=yaml.safe_dump_all(env.docs))
        yield env
