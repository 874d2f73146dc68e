"""banlieue side by side with cluster-api-provider-vsphere (CAPV) on the same work, in one run
(issue 22); results go to ``bench/results/capv.json`` and the table in ``docs/performance.md``.

    make envtest capi capv vcsim && .venv/bin/python bench/capv.py --machines 100

What runs (every listener and every endpoint on 127.0.0.1; the Cluster's controlPlaneEndpoint is
127.22.0.1, where nobody listens):

- envtest's kube-apiserver (``banlieue.testing.envtest``; its audit log counts API requests) and
  real Cluster API v1.14.2 core + kubeadm managers (``banlieue.testing.capi``);
- banlieue's CRDs/RBAC (``config/default``) and CAPV v1.16.1's (``hack/capv``'s module
  ``config/default`` rendered by ``kubectl kustomize``, webhooks rewritten to
  ``https://127.0.0.1:PORT`` with a generated CA, as ``banlieue.testing.capi`` does for CAPI);
- per provider, one after the other: one vcsim created identically (1 datacenter, 1 cluster of 4
  hosts, template ``ubuntu-22.04`` of 10 GiB, guests report an address from 198.18.0.0/16, batch
  PropertyCollector), a counting proxy in front of it (``bench/soap_proxy.py``: SOAP requests by
  method), the provider's manager as a process with its own ServiceAccount token (banlieue:
  ``banlieue manager``; CAPV: ``bin/capv-manager``; both without leader election), a Cluster with
  the provider's infrastructure cluster, a pre-created bootstrap data Secret and one
  MachineDeployment of N Machines.

Same bar for both: a Machine is done when CAPI shows ``status.initialization.infrastructureProvisioned``
and an address (CAPI copies both from the infrastructure machine). CAPV's workers wait for the
Cluster's ControlPlaneInitialized, which nothing here can give (no workload cluster): the
MachineDeployment's template carries the ``cluster.x-k8s.io/control-plane`` label for *both*
providers, so CAPV treats the Machines as control-plane ones and does not wait.

Figures per provider (entries ``{name, banlieue, capv, unit, better, ...}``): time to provisioned,
deletion time, provider CPU seconds per machine (``/proc/<pid>/stat`` of the provider's process
tree) during the wave, peak RSS (``VmHWM``), API requests per machine by verb and resource (audit
log, the provider's ServiceAccount only), SOAP requests per machine by method (the proxy), vCenter
sessions (Login calls + vAPI session creations), idle API and SOAP requests per minute in a window
after the wave settled (each by verb and resource / by method in ``idle_by_*`` of ``--solo-out``),
API writes that changed nothing (``noop_writes_per_machine``: a create/update/patch whose
response carries a resourceVersion the object already had; write bodies are audited at level
RequestResponse, Secrets and ConfigMaps at Metadata only), and restart-to-reconciled time (a restart, then controller-runtime's
``controller_runtime_reconcile_total`` of the provider's machine controller reaching N again).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import math
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from banlieue.cmd.dev import free_ports  # noqa: E402
from banlieue.testing import capi as capi_testing  # noqa: E402
from banlieue.testing.envtest import Envtest, iter_audit_events, start_envtest  # noqa: E402
from banlieue.testing.vcsim import VcsimProcess, start_vcsim  # noqa: E402

RESULTS = HERE / "results" / "capv.json"
CAPV_MODULE = "sigs.k8s.io/cluster-api-provider-vsphere"
CAPV_MODULE_DIR = REPO / "hack" / "capv"
CAPV_NS, CAPV_SA = "capv-system", "capv-manager"
BANLIEUE_NS, BANLIEUE_SA = "banlieue-system", "banlieue-manager"
CLUSTER = "bench"
PROBE_METHOD = "CurrentTime"  # banlieue's per-vCenter reachability probe (banlieue.backends.vsphere.health)
ENDPOINT = "127.22.0.1"  # the Cluster's control-plane endpoint: loopback, nobody listens (network rule)
TEMPLATE = "ubuntu-22.04"
VCSIM_OPTS: dict[str, Any] = {"dc": 1, "cluster": 1, "host": 4, "templates": [TEMPLATE], "batch_collector": True,
                              "guest_ip": "198.18.0.0/16"}
"""One vCenter per provider, created identically. ``guest_ip``: RFC 2544's benchmarking range, only
reported as strings (never dialled); a /16 holds the 1,000-machine run."""
MACHINE = {"numCPUs": 2, "memoryMiB": 64, "diskGiB": 10}  # 10 GiB: the vcsim template's own disk
CAPI_GROUP = "cluster.x-k8s.io"
LABEL_CLUSTER = "cluster.x-k8s.io/cluster-name"
LABEL_CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
LABEL_DEPLOYMENT = "cluster.x-k8s.io/deployment-name"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "resources": [{"group": "", "resources": ["secrets", "configmaps"]}]},
        {"level": "RequestResponse", "verbs": ["create", "update", "patch"]},
        {"level": "Metadata"},
    ],
}
"""The run's audit policy: the response of every write (its resourceVersion tells a write that
changed nothing), never a Secret's or ConfigMap's body (credentials, bootstrap data)."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as recorded next to every figure."""
    return str(Path("/proc/loadavg").read_text().split(" ", 3)[0:3])


# -- processes ------------------------------------------------------------------------------------


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/*/stat`` parent links)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    out, todo = [pid], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``'s process tree, seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def peak_rss_mib(pid: int) -> float:
    """``VmHWM`` summed over ``pid``'s process tree, MiB."""
    total = 0.0
    for p in tree_pids(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
    return total


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise RuntimeError(f"{what}: not within {timeout:g} s (last: {str(last)[:500]})")


def http_text(url: str) -> str:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as r:
        return str(r.read().decode())


def reconcile_total(metrics_url: str, controller_substr: str) -> float:
    """Sum of ``controller_runtime_reconcile_total`` over controllers whose name contains
    ``controller_substr`` (0 when the endpoint does not answer)."""
    try:
        text = http_text(metrics_url)
    except OSError:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith("controller_runtime_reconcile_total{") and f'controller="{controller_substr}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def reconciles_by_controller(metrics_url: str) -> Counter[str]:
    """controller-runtime's ``controller_runtime_reconcile_total`` summed over results, by
    controller (both providers export it); empty when the endpoint does not answer."""
    try:
        text = http_text(metrics_url)
    except OSError:
        return Counter()
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("controller_runtime_reconcile_total{") and 'controller="' in line:
            name = line.split('controller="', 1)[1].split('"', 1)[0]
            out[name] += int(float(line.rsplit(" ", 1)[1]))
    return out


# -- the SOAP proxy -------------------------------------------------------------------------------


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def task_log_path(self) -> Path:
        return self.log_path.parent / "tasks.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def lines(self, detailed: bool = False) -> list[tuple[float, str]]:
        """(time, operation) per request; ``detailed``: the operation with the proxy's detail
        column appended (``RetrievePropertiesEx Task``: what a property read was about)."""
        out = []
        with contextlib.suppress(FileNotFoundError), self.log_path.open() as fh:
            for line in fh:
                t, _, rest = line.rstrip("\n").partition("\t")
                op, _, extra = rest.partition("\t")
                if detailed and extra:
                    op = f"{op} {extra}"
                with contextlib.suppress(ValueError):
                    out.append((float(t), op))
        return out

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 5 s (open WaitForUpdatesEx long polls keep aiohttp's graceful
        shutdown waiting)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_proxy(vc: VcsimProcess, workdir: Path) -> Proxy:
    tls = Path(vc.ca_file).parent
    port_file, log_path = workdir / "proxy.port", workdir / "soap.log"
    proc = subprocess.Popen([sys.executable, str(HERE / "soap_proxy.py"), "--upstream", f"https://127.0.0.1:{vc.port}",
                             "--ca", vc.ca_file, "--cert", str(tls / "server.pem"), "--key", str(tls / "server-key.pem"),
                             "--port-file", str(port_file), "--log", str(log_path), "--task-log", str(workdir / "tasks.log")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(workdir / "proxy.err").open("wb"))
    wait_for(lambda: port_file.exists() and port_file.read_text(), 20, "the SOAP proxy's port", 0.1)
    time.sleep(0.1)
    return Proxy(proc, int(port_file.read_text()), log_path)


class TaskSampler:
    """How many vCenter tasks the provider has running at once (the 0 -> N storm's figure,
    cluster-api #4022 / CAPV #1070). Every ``interval`` seconds it reads the proxy's task log (each
    task a ``*_Task`` operation started) and asks vcsim *directly* (not through the counting
    proxy) for ``info.state`` of every task not yet seen ended; a task is running from its start
    until it is ``success`` or ``error`` (or gone). ``peak`` is the largest number seen running
    at once, overall and by operation (``peak_by_op``); one vCenter per provider, so per vCenter.
    vcsim keeps every Task object, so a task's end is never missed (``recentTask``, capped at 200
    as in vCenter, would be)."""

    def __init__(self, vc: VcsimProcess, task_log: Path, interval: float = 1.0, *, from_now: bool = False) -> None:
        """``from_now``: only tasks started from now on (the log's earlier lines are skipped)."""
        self.vc, self.task_log, self.interval = vc, task_log, interval
        self.open: dict[str, str] = {}  # moref -> operation
        self.peak = 0
        self.peak_by_op: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self._offset = task_log.stat().st_size if from_now and task_log.exists() else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-sampler", daemon=True)
        self.errors = 0

    def start(self) -> TaskSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(30)
        return {"peak_concurrent_tasks": self.peak, "peak_concurrent_tasks_by_operation": dict(self.peak_by_op),
                "tasks_started": dict(self.started), "sampler_interval_s": self.interval, "sampler_errors": self.errors}

    def _new_tasks(self) -> None:
        with contextlib.suppress(FileNotFoundError), self.task_log.open() as fh:
            fh.seek(self._offset)
            while True:
                line = fh.readline()
                if not line.endswith("\n"):
                    break  # a line the proxy has not finished writing: read it next time
                self._offset = fh.tell()
                _, op, ref = line.rstrip("\n").split("\t")
                self.open[ref] = op
                self.started[op] += 1

    def _run(self) -> None:
        from pyVim import connect as _connect
        from pyVmomi import vim as _vim
        from pyVmomi import vmodl as _vmodl

        connect: Any = _connect  # pyVmomi's partial stubs: untyped calls
        vim: Any = _vim
        vmodl: Any = _vmodl
        si: Any = connect.SmartConnect(host="127.0.0.1", port=self.vc.port, user=self.vc.username, pwd=self.vc.password,
                                       sslContext=ssl.create_default_context(cafile=self.vc.ca_file))
        pc = si.content.propertyCollector
        try:
            while not self._stop.wait(self.interval):
                self._new_tasks()
                if not self.open:
                    continue
                try:
                    spec = vmodl.query.PropertyCollector.FilterSpec(
                        objectSet=[vmodl.query.PropertyCollector.ObjectSpec(obj=vim.Task(ref, si._stub)) for ref in self.open],
                        propSet=[vmodl.query.PropertyCollector.PropertySpec(type=vim.Task, pathSet=["info.state"])])
                    states: dict[str, str] = {}
                    result = pc.RetrievePropertiesEx([spec], vmodl.query.PropertyCollector.RetrieveOptions())
                    while result is not None:
                        for oc in result.objects:
                            states[oc.obj._moId] = str(oc.propSet[0].val) if oc.propSet else ""
                        result = pc.ContinueRetrievePropertiesEx(result.token) if result.token else None
                except Exception:  # a task vcsim no longer knows: drop the tasks one by one next time
                    self.errors += 1
                    states = {}
                    for ref in list(self.open):
                        try:
                            states[ref] = str(vim.Task(ref, si._stub).info.state)
                        except Exception:
                            states[ref] = "gone"
                for ref, state in states.items():
                    if state in ("success", "error", "gone"):
                        self.open.pop(ref, None)
                running = Counter(self.open.values())
                self.peak = max(self.peak, len(self.open))
                for op, n in running.items():
                    self.peak_by_op[op] = max(self.peak_by_op[op], n)
        finally:
            connect.Disconnect(si)


def thumbprint_sha256(pem_path: Path) -> str:
    der = ssl.PEM_cert_to_DER_cert(pem_path.read_text())
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


# -- the API server ---------------------------------------------------------------------------------


class Api:
    def __init__(self, env: Envtest) -> None:
        self.env = env

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        status, out = self.env.request(method, path, body, timeout=60,
                                       content_type="application/merge-patch+json" if method == "PATCH" else "application/json")
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {str(out)[:800]}")
        return out

    def create(self, obj: dict[str, Any]) -> Any:
        capi_testing.check_loopback([obj])  # the network rule, before anything reaches the API server
        group_version = obj["apiVersion"]
        ns = obj["metadata"].get("namespace")
        plural = {"Cluster": "clusters", "MachineDeployment": "machinedeployments", "Secret": "secrets", "Namespace": "namespaces",
                  "VSphereCluster": "vsphereclusters", "VSphereMachineTemplate": "vspheremachinetemplates",
                  "Provider": "providers"}[obj["kind"]]
        base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
        return self.call("POST", path, obj)

    def items(self, path: str) -> list[dict[str, Any]]:
        return list(self.call("GET", path).get("items") or [])


def machines_path(ns: str) -> str:
    return f"/apis/{CAPI_GROUP}/v1beta2/namespaces/{ns}/machines"


def done_machines(api: Api, ns: str) -> tuple[int, int]:
    """(Machines, Machines infrastructure-provisioned with an address) in ``ns``."""
    ms = api.items(machines_path(ns))
    done = 0
    for m in ms:
        st = m.get("status") or {}
        if (st.get("initialization") or {}).get("infrastructureProvisioned") and st.get("addresses") and m["spec"].get("providerID"):
            done += 1
    return len(ms), done


# -- the two providers ------------------------------------------------------------------------------


def install_capv(env: Envtest, workdir: Path) -> dict[str, Any]:
    """Render CAPV's ``config/default`` (kubectl kustomize over the module in the shared module
    cache), rewrite its webhooks to 127.0.0.1 (``banlieue.testing.capi.rewrite``), check the network
    rule and apply it server-side. Returns {webhook_port, cert_dir}."""
    proc = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", CAPV_MODULE], cwd=CAPV_MODULE_DIR,
                          env={**os.environ, **capi_testing.GO_ENV}, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"go list -m {CAPV_MODULE} in {CAPV_MODULE_DIR}: {proc.stderr.strip()}")
    cert_dir = workdir / "capv-certs"
    ca_pem = capi_testing.generate_serving_cert(cert_dir)
    [port] = free_ports(1)
    docs = capi_testing.rewrite(capi_testing.kustomize(Path(proc.stdout.strip()) / "config" / "default"), port, ca_pem)
    # The manager runs as a process with an identity Secret per cluster: no credentials file Secret.
    docs = [d for d in docs if not (d["kind"] == "Secret" and d["metadata"]["name"].endswith("bootstrap-credentials"))]
    capi_testing.check_loopback(docs)
    (workdir / "capv.yaml").write_text(yaml.safe_dump_all(docs))
    capi_testing.kubectl(env.kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-f", str(workdir / "capv.yaml"))
    crds = [f"crd/{d['metadata']['name']}" for d in docs if d["kind"] == "CustomResourceDefinition"]
    capi_testing.kubectl(env.kubeconfig_path, "wait", "--for=condition=Established", "--timeout=60s", *crds)
    return {"webhook_port": port, "cert_dir": cert_dir}


@dataclass
class Provider:
    """One side of the comparison: how its manager starts and what it is given."""

    name: str
    user: str  # the audit log's user.username of its ServiceAccount
    machine_controller: str  # controller_runtime_reconcile_total's controller label of its machine reconciler
    workdir: Path
    env: Envtest
    extra: dict[str, Any] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    metrics_url: str = ""
    health_url: str = ""
    log_path: Path = Path(os.devnull)

    def start(self) -> float:
        """Start the manager; returns the monotonic start time after /readyz answered 200."""
        kubeconfig = capi_testing.token_kubeconfig(self.env.kubeconfig_path, *self._sa(), self.workdir / f"{self.name}.kubeconfig")
        metrics, health = free_ports(2)  # distinct: two one-port choices can coincide
        self.metrics_url, self.health_url = f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{health}/readyz"
        if self.name == "banlieue":
            args = [sys.executable, "-m", "banlieue.cli", "manager", "--kubeconfig", str(kubeconfig),
                    "--metrics-bind-address", f"127.0.0.1:{metrics}", "--health-probe-bind-address", f"127.0.0.1:{health}",
                    "--log-format", "json", "--log-level", "warning", "--leader-elect", "false"]
            environ = dict(os.environ)
        else:
            args = [str(capi_testing.REPO_ROOT / "bin" / "capv-manager"), "--kubeconfig", str(kubeconfig),
                    "--leader-elect=false", "--webhook-port", str(self.extra["webhook_port"]),
                    "--webhook-cert-dir", str(self.extra["cert_dir"]), "--health-addr", f"127.0.0.1:{health}",
                    "--diagnostics-address", f"127.0.0.1:{metrics}", "--insecure-diagnostics",
                    "--credentials-file", str(self.workdir / "no-credentials.yaml"), "--v", "0"]
            environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            # Credentials come from each VSphereCluster's identity Secret; an empty file keeps the
            # manager's watcher of its default credentials quiet.
            (self.workdir / "no-credentials.yaml").touch()
        self.log_path = self.workdir / f"{self.name}.log"
        with self.log_path.open("ab") as sink:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=environ,
                                            start_new_session=True, cwd=REPO)
        proc = self.process

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {proc.returncode}:\n{self.tail()}")
            try:
                return http_text(self.health_url) is not None
            except OSError:
                return False
        wait_for(ready, 120, f"{self.name} /readyz", 0.2)
        return time.monotonic()

    def _sa(self) -> tuple[str, str]:
        return (BANLIEUE_NS, BANLIEUE_SA) if self.name == "banlieue" else (CAPV_NS, CAPV_SA)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(45)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def cluster_objects(provider: str, ns: str, vc: VcsimProcess, proxy: Proxy, machines: int,
                    deployments: int = 1) -> list[dict[str, Any]]:
    """Everything one provider's run creates, in order: the namespace, the identity Secret, (banlieue:
    the Provider), the infrastructure cluster, the Cluster, the machine template, the bootstrap data
    Secret and, last, ``deployments`` MachineDeployments (``md-0`` ...) sharing ``machines``
    replicas (labelled control-plane, see the module docstring). The vCenter URL is the proxy's."""
    meta = {"namespace": ns}
    user_data = "#cloud-config\nhostname: bench\n"
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vcenter-credentials", **meta},
         "stringData": {"username": vc.username, "password": vc.password}},
    ]
    if provider == "banlieue":
        group = "infrastructure.banlieue.io"
        objs.append({"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": "vcenter", **meta},
                     "spec": {"providerClassRef": {"name": "vsphere"},
                              "connection": {"endpoint": proxy.url + "/sdk", "credentialsRef": {"name": "vcenter-credentials"},
                                             "caBundle": {"inline": vc.ca_pem}},
                              "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "LocalDS_0"}}],
                                               "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}}})
        infra_cluster = {"apiVersion": f"{group}/v1alpha1", "kind": "VSphereCluster", "metadata": {"name": CLUSTER, **meta},
                         "spec": {"controlPlaneEndpoint": {"host": ENDPOINT, "port": 6443}, "providerRefs": [{"name": "vcenter"}]}}
        template_spec = {"template": TEMPLATE, "numCPUs": MACHINE["numCPUs"], "memoryMiB": MACHINE["memoryMiB"],
                         "disks": [{"name": "os", "sizeGiB": MACHINE["diskGiB"], "storageClass": "standard"}],
                         "network": {"devices": [{"name": "eth0", "networkClass": "default", "dhcp4": True}]},
                         "powerOffMode": "hard"}
        template = {"apiVersion": f"{group}/v1alpha1", "kind": "VSphereMachineTemplate", "metadata": {"name": "workers", **meta},
                    "spec": {"template": {"spec": template_spec}}}
    else:
        group = "infrastructure.cluster.x-k8s.io"
        tls = Path(vc.ca_file).parent
        infra_cluster = {"apiVersion": f"{group}/v1beta2", "kind": "VSphereCluster", "metadata": {"name": CLUSTER, **meta},
                         "spec": {"server": proxy.url, "thumbprint": thumbprint_sha256(tls / "server.pem"),
                                  "controlPlaneEndpoint": {"host": ENDPOINT, "port": 6443},
                                  "identityRef": {"kind": "Secret", "name": "vcenter-credentials"}}}
        template_spec = {"template": TEMPLATE, "cloneMode": "fullClone", "server": proxy.url,
                         "thumbprint": thumbprint_sha256(tls / "server.pem"), "datacenter": "DC0",
                         "datastore": "LocalDS_0", "folder": "/DC0/vm", "resourcePool": "/DC0/host/DC0_C0/Resources",
                         "numCPUs": MACHINE["numCPUs"], "memoryMiB": MACHINE["memoryMiB"], "diskGiB": MACHINE["diskGiB"],
                         "network": {"devices": [{"networkName": "VM Network", "dhcp4": True}]}, "powerOffMode": "hard"}
        template = {"apiVersion": f"{group}/v1beta2", "kind": "VSphereMachineTemplate", "metadata": {"name": "workers", **meta},
                    "spec": {"template": {"spec": template_spec}}}
    objs += [
        infra_cluster,
        {"apiVersion": f"{CAPI_GROUP}/v1beta2", "kind": "Cluster", "metadata": {"name": CLUSTER, **meta},
         "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                  "infrastructureRef": {"apiGroup": group, "kind": "VSphereCluster", "name": CLUSTER}}},
        template,
        {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
         "metadata": {"name": "bench-bootstrap", "labels": {LABEL_CLUSTER: CLUSTER}, **meta},
         "data": {"value": base64.b64encode(user_data.encode()).decode(), "format": base64.b64encode(b"cloud-config").decode()}},
    ]
    for i in range(deployments):
        md = f"md-{i}" if deployments > 1 else "md"
        replicas = machines // deployments + (1 if i < machines % deployments else 0)
        objs.append({"apiVersion": f"{CAPI_GROUP}/v1beta2", "kind": "MachineDeployment", "metadata": {"name": md, **meta},
                     "spec": {"clusterName": CLUSTER, "replicas": replicas, "selector": {"matchLabels": {LABEL_DEPLOYMENT: md}},
                              "template": {"metadata": {"labels": {LABEL_DEPLOYMENT: md, LABEL_CONTROL_PLANE: ""}},
                                           "spec": {"clusterName": CLUSTER, "bootstrap": {"dataSecretName": "bench-bootstrap"},
                                                    "infrastructureRef": {"apiGroup": group, "kind": "VSphereMachineTemplate",
                                                                          "name": "workers"}}}}})
    return objs


# -- counting ---------------------------------------------------------------------------------------


def audit_counts(env: Envtest, user: str, start: float, end: float) -> Counter[str]:
    """API requests of ``user`` received in [start, end) (wall clock), keyed ``verb resource``
    (``resource/subresource``); watches are counted when they were opened."""
    out: Counter[str] = Counter()
    for e in iter_audit_events(env.audit_log):
        if (e.get("user") or {}).get("username") != user or e.get("stage") not in ("ResponseComplete", "ResponseStarted", "Panic"):
            continue
        if e.get("stage") == "ResponseComplete" and e.get("verb") == "watch":
            continue  # a watch is counted once, when its response started
        t = parse_ts(e["requestReceivedTimestamp"])
        if start <= t < end:
            ref = e.get("objectRef") or {}
            res = ref.get("resource", e.get("requestURI", "?"))
            if ref.get("subresource"):
                res += "/" + ref["subresource"]
            out[f"{e['verb']} {res}"] += 1
    return out


def machines_deleted(audit_log: Path, ns: str, start: float, end: float) -> int:
    """CAPI Machines of ``ns`` deleted (answered 2xx) in [start, end), by anyone: each asks the
    provider to destroy its VM."""
    n = 0
    for e in iter_audit_events(audit_log):
        ref = e.get("objectRef") or {}
        if (e.get("verb") == "delete" and e.get("stage") == "ResponseComplete" and ref.get("resource") == "machines"
                and ref.get("namespace") == ns and 200 <= int((e.get("responseStatus") or {}).get("code") or 0) < 300
                and start <= parse_ts(e["requestReceivedTimestamp"]) < end):
            n += 1
    return n


def noop_writes(env: Envtest, user: str, start: float, end: float) -> Counter[str]:
    """Writes (create/update/patch answered 2xx) of ``user`` received in [start, end) that changed
    nothing, keyed like :func:`audit_counts`: kube-apiserver answers a write that leaves the object
    as stored with the object unchanged, resourceVersion included, so a response resourceVersion
    that an earlier write response (of any user) already carried for the same object is a write
    that changed nothing. Needs :data:`AUDIT_POLICY` (responses audited); objects audited at
    Metadata (Secrets, ConfigMaps) are not counted."""
    seen: dict[tuple[str, str, str, str], set[str]] = {}
    out: Counter[str] = Counter()
    for e in iter_audit_events(env.audit_log):
        if e.get("stage") != "ResponseComplete" or e.get("verb") not in ("create", "update", "patch"):
            continue
        if not 200 <= int((e.get("responseStatus") or {}).get("code") or 0) < 300:
            continue
        obj = e.get("responseObject") or {}
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if not rv or obj.get("kind") == "Status" or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
            continue  # (the last finalizer removed: the object is deleted, answered as it was)
        ref = e.get("objectRef") or {}
        key = (ref.get("apiGroup", ""), ref.get("resource", ""), meta.get("namespace", ""), meta.get("name", ""))
        rvs = seen.setdefault(key, set())
        if rv in rvs and (e.get("user") or {}).get("username") == user and start <= parse_ts(e["requestReceivedTimestamp"]) < end:
            res = ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
            out[f"{e['verb']} {res}"] += 1
        rvs.add(rv)
    return out


def parse_ts(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def soap_counts(proxy: Proxy, start: float, end: float, detailed: bool = False) -> Counter[str]:
    return Counter(op for t, op in proxy.lines(detailed) if start <= t < end)


def sessions(c: Counter[str]) -> int:
    """vCenter logins: SOAP ``Login*`` plus vAPI session creations (``POST .../session`` without
    ``~action``; ``?~action=get`` only checks the current session)."""
    return sum(v for k, v in c.items() if k in ("Login", "LoginByToken", "LoginExtensionByCertificate")
               or (k.startswith("REST POST") and k.endswith("/session")))


def vm_count(vc: VcsimProcess) -> int:
    env = {**os.environ, **vc.govc_env}
    out = subprocess.run([str(REPO / "bin" / "govc"), "find", "/", "-type", "m"], env=env, capture_output=True, text=True, check=True)
    return len([line for line in out.stdout.splitlines() if line.strip()])


# -- one provider's run -----------------------------------------------------------------------------


def git_head() -> str | None:
    """The checkout's commit when a provider's run starts (``--gate`` lets it move between
    providers), ``+dirty`` when tracked files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD"]).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def run_provider(name: str, env: Envtest, api: Api, workdir: Path, machines: int, *, settle: float, idle: float,
                 timeout: float, idle_long: float = 0.0, capv: dict[str, Any], profile: Path | None = None, deployments: int = 1,
                 clone_seconds: float = 0.0) -> dict[str, Any]:
    """One provider's whole run (see the module docstring); the raw figures, also written to
    ``<workdir>/<name>/raw.json`` as soon as they are complete (a long run keeps the first
    provider's figures if the second fails)."""
    pdir = workdir / name
    pdir.mkdir()
    ns = f"bench-{name}"
    user = f"system:serviceaccount:{BANLIEUE_NS}:{BANLIEUE_SA}" if name == "banlieue" else f"system:serviceaccount:{CAPV_NS}:{CAPV_SA}"
    res: dict[str, Any] = {"provider": name, "machines": machines, "deployments": deployments, "clone_seconds": clone_seconds,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": git_head()}
    with contextlib.ExitStack() as stack:
        opts: dict[str, Any] = dict(VCSIM_OPTS)
        if clone_seconds:
            # hack/vcsim's --task-delay, by vcsim's task name. LockHandoff=0: vcsim otherwise holds
            # the template's lock through the delay, which makes every clone of it wait for the one
            # before (simulator/task.go), as no vCenter does.
            opts["task_delay"] = {"CloneVm": int(clone_seconds * 1000), "LockHandoff": 0}
        vc = start_vcsim(**opts)
        stack.callback(vc.stop)
        baseline_vms = vm_count(vc)
        proxy = start_proxy(vc, pdir)
        stack.callback(proxy.stop)
        prov = Provider(name, user, "", pdir, env, extra=capv)
        stack.callback(prov.stop)
        prov.start()
        assert prov.process is not None
        pid = prov.process.pid
        objs = cluster_objects(name, ns, vc, proxy, machines, deployments)
        mds, objs = objs[-deployments:], objs[:-deployments]
        # Listing every Machine each second costs the API server (and the providers) much at
        # 1,000 machines: poll at most 200 machines' worth per second.
        poll = max(1.0, machines / 200)
        for obj in objs:
            api.create(obj)

        def cluster_ready() -> bool:
            c = api.call("GET", f"/apis/{CAPI_GROUP}/v1beta2/namespaces/{ns}/clusters/{CLUSTER}")
            return bool(((c.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned"))
        try:
            wait_for(cluster_ready, 120, f"{name}: Cluster infrastructureProvisioned")
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{prov.tail()}") from None
        log(f"{name}: cluster provisioned; creating MachineDeployment of {machines} (load {loadavg()})")
        spy = None
        if profile is not None and name == "banlieue":
            # CPU samples of the manager while the wave runs (py-spy skips idle threads by default).
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--format", "raw",
                                    "--rate", "50", "--nonblocking", "--output", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sampler = TaskSampler(vc, proxy.task_log_path).start()
        rec0 = reconciles_by_controller(prov.metrics_url)
        cpu0, wall0, mono0 = cpu_seconds(pid), time.time(), time.monotonic()
        for md in mds:
            api.create(md)
        last_report = 0.0

        def all_done() -> bool:
            nonlocal last_report
            total, done = done_machines(api, ns)
            if time.monotonic() - last_report > 15:
                log(f"{name}: {done}/{machines} provisioned ({total} Machines) after {time.monotonic() - mono0:.0f} s, load {loadavg()}")
                last_report = time.monotonic()
            return done == machines and total == machines
        try:
            wait_for(all_done, timeout, f"{name}: {machines} Machines provisioned with an address", poll)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{prov.tail()}") from None
        res["provision_seconds"] = time.monotonic() - mono0
        wall1 = time.time()
        res.update(sampler.stop())
        res["reconciles_provision"] = dict(reconciles_by_controller(prov.metrics_url) - rec0)
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
            spy.wait(60)
        res["provision_load"] = loadavg()
        res["cpu_seconds_per_machine"] = (cpu_seconds(pid) - cpu0) / machines
        res["api_provision"] = dict(audit_counts(env, user, wall0, wall1))
        res["api_noop_provision"] = dict(noop_writes(env, user, wall0, wall1))
        res["soap_provision"] = dict(soap_counts(proxy, wall0, wall1))
        res["soap_provision_detail"] = dict(soap_counts(proxy, wall0, wall1, detailed=True))
        res["vms_created"] = vm_count(vc) - baseline_vms
        log(f"{name}: {machines} provisioned in {res['provision_seconds']:.1f} s; settling {settle:g} s then idle window {idle:g} s")

        time.sleep(settle)
        i0 = time.time()
        time.sleep(idle)
        i1 = time.time()
        res["idle_window_seconds"] = idle
        res["idle_settle_seconds"] = settle
        res["idle_load"] = loadavg()
        res["api_idle"] = dict(audit_counts(env, user, i0, i1))
        res["api_noop_idle"] = dict(noop_writes(env, user, i0, i1))
        res["soap_idle"] = dict(soap_counts(proxy, i0, i1))
        if idle_long > idle:
            # The long window starts with the idle window and outlasts a periodic resync (CAPV's
            # --sync-period, 10 minutes by default), which the 5-minute one may miss.
            log(f"{name}: idle window done; the long one goes on to {idle_long:g} s")
            time.sleep(idle_long - idle)
            i2 = time.time()
            res["idle_long_window_seconds"] = idle_long
            res["api_idle_long"] = dict(audit_counts(env, user, i0, i2))
            res["soap_idle_long"] = dict(soap_counts(proxy, i0, i2))
        res["peak_rss_mib"] = peak_rss_mib(pid)

        # Restart: every machine reconciled once by the provider's machine controller.
        prov.stop()
        r0 = time.monotonic()
        prov.start()
        controller = "vspheremachine"
        res["restart_load"] = loadavg()
        try:
            wait_for(lambda: reconcile_total(prov.metrics_url, controller) >= machines, timeout,
                     f"{name}: {machines} reconciles of {controller} after restart", 0.5)
            res["restart_seconds"] = time.monotonic() - r0
        except RuntimeError as e:
            log(f"{name}: restart measure failed: {str(e)[:300]}")
            res["restart_seconds"] = None
        assert prov.process is not None
        pid = prov.process.pid

        # Deletion: the MachineDeployments go; done when no Machine is left and the VMs are gone.
        time.sleep(5)
        d_wall0, d0 = time.time(), time.monotonic()
        # Nobody asked for a VM to be destroyed before this point but CAPI core, for a Machine it
        # deleted (a MachineSet that created one too many under load deletes the surplus): the
        # wave, the idle window and the restart must not have destroyed any other (a duplicate
        # clone cleaned up would show here too).
        before_delete = Counter(op for t, op in proxy.lines() if wall0 <= t < d_wall0)
        res["vms_destroyed"] = before_delete["Destroy_Task"] + before_delete["UnregisterVM"]
        res["machines_deleted_by_capi"] = machines_deleted(env.audit_log, ns, wall0, d_wall0)
        res["vms_destroyed_unasked"] = max(0, res["vms_destroyed"] - res["machines_deleted_by_capi"])
        res["vms_after_restart"] = vm_count(vc) - baseline_vms
        cpu_d0 = cpu_seconds(pid)
        d_sampler = TaskSampler(vc, proxy.task_log_path, from_now=True).start()
        for md in mds:
            api.call("DELETE", f"/apis/{CAPI_GROUP}/v1beta2/namespaces/{ns}/machinedeployments/{md['metadata']['name']}")
        try:
            wait_for(lambda: not api.items(machines_path(ns)) and vm_count(vc) == baseline_vms, timeout, f"{name}: Machines and VMs deleted",
                     poll)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{prov.tail()}") from None
        res["delete_seconds"] = time.monotonic() - d0
        res["delete_tasks"] = d_sampler.stop()
        res["delete_load"] = loadavg()
        res["delete_cpu_seconds_per_machine"] = (cpu_seconds(pid) - cpu_d0) / machines
        d_wall1 = time.time()
        res["api_delete"] = dict(audit_counts(env, user, d_wall0, d_wall1))
        res["soap_delete"] = dict(soap_counts(proxy, d_wall0, d_wall1))
        res["soap_sessions_total"] = sessions(Counter(op for _, op in proxy.lines()))
        res["vms_left"] = vm_count(vc) - baseline_vms
        api.call("DELETE", f"/apis/{CAPI_GROUP}/v1beta2/namespaces/{ns}/clusters/{CLUSTER}", ok=(200, 202))
        with contextlib.suppress(RuntimeError):
            wait_for(lambda: not api.items(f"/apis/{CAPI_GROUP}/v1beta2/namespaces/{ns}/clusters"), 120, f"{name}: Cluster deleted")
    (pdir / "raw.json").write_text(json.dumps(res, indent=1))
    return res


def recount(workdir: Path, providers: list[str]) -> dict[str, Any]:
    """The API figures of a kept run (``--keep``) counted again from every audit log file, the
    rotated ones included (runs before that fix read only the current ``audit.log``, and a
    1,000-machine run rotates it every 100 MB). Windows come from the audit log itself: the
    wave from the first ``create machinedeployments`` in the provider's namespace for
    ``provision_seconds``, the idle window ``idle_settle_seconds`` after it for
    ``idle_window_seconds``, the deletion from the first ``delete machinedeployments`` for
    ``delete_seconds`` (all from ``<workdir>/<provider>/raw.json``). Rewrites those raw.json files
    (the earlier counts kept under ``*_before_recount``) and returns the raw results by provider."""
    class _Log:  # what audit_counts/noop_writes need of an Envtest
        audit_log = workdir / "envtest" / "logs" / "audit.log"

    results: dict[str, Any] = {}
    for name in providers:
        raw_path = workdir / name / "raw.json"
        res = json.loads(raw_path.read_text())
        ns = f"bench-{name}"
        starts: dict[str, float] = {}
        for e in iter_audit_events(_Log.audit_log):
            ref = e.get("objectRef") or {}
            if ref.get("resource") == "machinedeployments" and ref.get("namespace") == ns and e.get("stage") == "ResponseComplete":
                verb = e.get("verb")
                if verb in ("create", "delete") and verb not in starts:
                    starts[verb] = parse_ts(e["requestReceivedTimestamp"])
        w0 = starts["create"]
        w1 = w0 + res["provision_seconds"]
        i0 = w1 + res["idle_settle_seconds"]
        i1 = i0 + res["idle_window_seconds"]
        d0 = starts["delete"]
        d1 = d0 + res["delete_seconds"]
        user = f"system:serviceaccount:{BANLIEUE_NS}:{BANLIEUE_SA}" if name == "banlieue" else f"system:serviceaccount:{CAPV_NS}:{CAPV_SA}"
        env: Any = _Log
        windows = [("api_provision", w0, w1), ("api_idle", i0, i1), ("api_delete", d0, d1)]
        if res.get("idle_long_window_seconds"):
            windows.append(("api_idle_long", i0, i0 + res["idle_long_window_seconds"]))
        for key, a, b in windows:
            res.setdefault(f"{key}_before_recount", res.get(key))
            res[key] = dict(audit_counts(env, user, a, b))
        for key, a, b in (("api_noop_provision", w0, w1), ("api_noop_idle", i0, i1)):
            res.setdefault(f"{key}_before_recount", res.get(key))
            res[key] = dict(noop_writes(env, user, a, b))
        res["recounted_windows"] = {"provision": [w0, w1], "idle": [i0, i1], "delete": [d0, d1]}
        if "vms_destroyed_unasked" in res:
            res.setdefault("vms_destroyed", res["vms_destroyed_unasked"])  # runs before the split counted every destroy
            res["machines_deleted_by_capi"] = machines_deleted(_Log.audit_log, ns, w0, d0)
            res["vms_destroyed_unasked"] = max(0, res["vms_destroyed"] - res["machines_deleted_by_capi"])
        raw_path.write_text(json.dumps(res, indent=1))
        log(f"{name}: recounted; API requests per machine {per_machine(res['api_provision'], res['machines']):.2f}")
        results[name] = res
    return results


# -- figures ----------------------------------------------------------------------------------------


def per_machine(c: dict[str, int], n: int, pred: Callable[[str], bool] = lambda k: True) -> float:
    return sum(v for k, v in c.items() if pred(k)) / n


def is_write(key: str) -> bool:
    return key.split(" ", 1)[0] in WRITES


def entries(b: dict[str, Any], c: dict[str, Any], n: int) -> list[dict[str, Any]]:
    def e(name: str, key: Callable[[dict[str, Any]], Any], unit: str, better: str = "lower") -> dict[str, Any]:
        return {"name": name, "banlieue": key(b), "capv": key(c), "unit": unit, "better": better, "machines": n}

    def idle_rate(r: dict[str, Any], which: str, window: str = "idle_window_seconds") -> float:
        return float(sum(r[which].values()) / (r[window] / 60))

    def beyond_probe(r: dict[str, Any]) -> float:
        # banlieue's per-vCenter reachability probe is CurrentTime (backends.vsphere.health); CAPV
        # sends none, so for CAPV this is every request.
        return float(sum(v for k, v in r["soap_idle"].items() if k != PROBE_METHOD) / (r["idle_window_seconds"] / 60))

    long_window = all(r.get("idle_long_window_seconds") for r in (b, c))
    longer = [
        e(f"idle_long_api_requests_per_minute_{n}", lambda r: round(idle_rate(r, "api_idle_long", "idle_long_window_seconds"), 1),
          "API requests/min from the idle window's start over --idle-long seconds (longer than CAPV's 10-minute sync period)"),
        e(f"idle_long_soap_requests_per_minute_{n}", lambda r: round(idle_rate(r, "soap_idle_long", "idle_long_window_seconds"), 1),
          "vCenter requests/min, same long window"),
    ] if long_window else []

    figures = [
        e(f"provision_seconds_{n}", lambda r: round(r["provision_seconds"], 1), "s (MachineDeployment created -> every Machine infrastructureProvisioned with an address)"),
        e(f"delete_seconds_{n}", lambda r: round(r["delete_seconds"], 1), "s (MachineDeployment deleted -> no Machine, no VM)"),
        e(f"cpu_seconds_per_machine_{n}", lambda r: round(r["cpu_seconds_per_machine"], 3), "CPU s per machine provisioned (provider process tree)"),
        e(f"delete_cpu_seconds_per_machine_{n}", lambda r: round(r["delete_cpu_seconds_per_machine"], 3), "CPU s per machine deleted"),
        e(f"peak_rss_{n}", lambda r: round(r["peak_rss_mib"], 1), "MiB (VmHWM after the wave and the idle window)"),
        e(f"api_requests_per_machine_{n}", lambda r: round(per_machine(r["api_provision"], n), 2), "API requests per machine provisioned"),
        e(f"api_writes_per_machine_{n}", lambda r: round(per_machine(r["api_provision"], n, is_write), 2), "API writes per machine provisioned"),
        e(f"noop_writes_per_machine_{n}", lambda r: round(per_machine(r.get("api_noop_provision") or {}, n), 2),
          "API writes per machine provisioned that changed nothing (response resourceVersion already seen)"),
        e(f"soap_requests_per_machine_{n}", lambda r: round(per_machine(r["soap_provision"], n), 2), "vCenter requests (SOAP + vAPI) per machine provisioned"),
        e(f"delete_soap_requests_per_machine_{n}", lambda r: round(per_machine(r["soap_delete"], n), 2), "vCenter requests per machine deleted"),
        e(f"delete_api_requests_per_machine_{n}", lambda r: round(per_machine(r["api_delete"], n), 2), "API requests per machine deleted"),
        e(f"vcenter_sessions_{n}", lambda r: r["soap_sessions_total"], "vCenter logins over the whole run (incl. one restart)"),
        e(f"idle_api_requests_per_minute_{n}", lambda r: round(idle_rate(r, "api_idle"), 1), "API requests/min with every machine provisioned, nothing changing"),
        e(f"idle_soap_requests_per_minute_{n}", lambda r: round(idle_rate(r, "soap_idle"), 1), "vCenter requests/min, same window"),
        e(f"idle_soap_beyond_probe_per_minute_{n}", lambda r: round(beyond_probe(r), 1),
          "vCenter requests/min, same window, but the reachability probe's CurrentTime (the issue's one per 5 s aside)"),
        e(f"restart_seconds_{n}", lambda r: None if r["restart_seconds"] is None else round(r["restart_seconds"], 1),
          "s from a restart (process start) to every machine reconciled once"),
        e(f"reconciles_per_machine_{n}",
          lambda r: None if r.get("reconciles_provision") is None else round(sum(r["reconciles_provision"].values()) / n, 1),
          "reconciles per machine provisioned, every controller of the provider (controller_runtime_reconcile_total)"),
        e(f"peak_concurrent_tasks_{n}", lambda r: r.get("peak_concurrent_tasks"),
          f"vCenter tasks running at once, most seen (sampled every second; one vCenter; the 0 -> {n} scale-up)"),
        e(f"peak_concurrent_clones_{n}", lambda r: (r.get("peak_concurrent_tasks_by_operation") or {}).get("CloneVM_Task"),
          "CloneVM_Task tasks running at once, most seen (same sampling)"),
        e(f"vms_destroyed_unasked_{n}", lambda r: r.get("vms_destroyed_unasked"),
          "VMs destroyed (Destroy_Task, UnregisterVM) between the scale-up and the deletion, beyond the Machines CAPI deleted: must be 0"),
        e(f"duplicate_vms_{n}", lambda r: None if r.get("vms_after_restart") is None else r["vms_after_restart"] - n,
          "VMs beyond one per Machine after the wave, idle window and restart: must be 0"),
    ]
    return figures + longer


def write_results(out: Path, results: dict[str, Any], n: int) -> None:
    """Merge both providers' entries for ``n`` machines (and ``raw_<n>``) into ``out``."""
    new = entries(results["banlieue"], results["capv"], n)
    for entry in new:
        entry["load"] = {"banlieue": results["banlieue"]["provision_load"], "capv": results["capv"]["provision_load"]}
    old = json.loads(out.read_text()) if out.exists() else []
    names = {x["name"] for x in new}
    merged = [x for x in old if x["name"] not in names] + new
    raw = {"name": f"raw_{n}", "banlieue": results["banlieue"], "capv": results["capv"], "unit": "raw per-provider counts",
           "better": "lower", "machines": n}
    merged = [x for x in merged if x["name"] != raw["name"]] + [raw]
    out.write_text(json.dumps(merged, indent=1) + "\n")
    log(f"wrote {out}")
    for x in new:
        print(f"{x['name']:45} banlieue={x['banlieue']!s:>10} capv={x['capv']!s:>10}  {x['unit']}")


def write_solo(path: Path, label: str, r: dict[str, Any], n: int) -> None:
    """Merge banlieue's per-machine counts of one run into ``path`` as ``soap_per_machine_<label>_<n>``
    (the results schema: ``name``, ``banlieue``, ``capv`` None, ``unit``, ``better``; the count by
    method in ``by_method``) and ``api_per_machine_<label>_<n>``."""
    def by_key(c: dict[str, int]) -> dict[str, float]:
        return {k: round(v / n, 2) for k, v in sorted(c.items(), key=lambda kv: -kv[1])}

    def per_minute(c: dict[str, int]) -> dict[str, float]:
        return {k: round(v / (r["idle_window_seconds"] / 60), 2) for k, v in sorted(c.items(), key=lambda kv: -kv[1])}

    new = [
        {"name": f"soap_per_machine_{label}_{n}", "banlieue": round(per_machine(r["soap_provision"], n), 2), "capv": None,
         "unit": "vCenter requests (SOAP + vAPI) per machine provisioned, banlieue alone", "better": "lower", "machines": n,
         "by_method": by_key(r["soap_provision"]), "by_method_and_object": by_key(r.get("soap_provision_detail") or {}),
         "provision_seconds": round(r["provision_seconds"], 1),
         "cpu_seconds_per_machine": round(r["cpu_seconds_per_machine"], 3), "load": r["provision_load"],
         "delete_by_method": by_key(r["soap_delete"]), "idle_per_minute": round(sum(r["soap_idle"].values()) / (r["idle_window_seconds"] / 60), 1),
         "idle_by_method": per_minute(r["soap_idle"])},
        {"name": f"api_per_machine_{label}_{n}", "banlieue": round(per_machine(r["api_provision"], n), 2), "capv": None,
         "unit": "API requests per machine provisioned, banlieue alone", "better": "lower", "machines": n,
         "by_verb_resource": by_key(r["api_provision"]), "writes": round(per_machine(r["api_provision"], n, is_write), 2),
         "noop_writes": round(per_machine(r["api_noop_provision"], n), 2), "noop_by_verb_resource": by_key(r["api_noop_provision"]),
         "idle_per_minute": round(sum(r["api_idle"].values()) / (r["idle_window_seconds"] / 60), 1),
         "idle_by_verb_resource": per_minute(r["api_idle"]), "idle_noop_writes": r["api_noop_idle"]},
    ]
    old = json.loads(path.read_text()) if path.exists() else []
    names = {x["name"] for x in new}
    path.write_text(json.dumps([x for x in old if x["name"] not in names] + new, indent=1) + "\n")
    log(f"wrote {path}")
    for x in new:
        print(json.dumps(x))


def table(path: Path) -> str:
    """The Markdown table of docs/performance.md from a results file (every entry but the raw ones)."""
    rows = ["| figure | machines | banlieue | CAPV | unit | better |", "|---|---:|---:|---:|---|---|"]
    for x in json.loads(path.read_text()):
        if not x["name"].startswith("raw_"):
            rows.append(f"| {x['name'].rsplit('_', 1)[0]} | {x['machines']:,} | {x['banlieue']} | {x['capv']} | {x['unit']} | {x['better']} |")
    return "\n".join(rows)


class OneLineErrors(argparse.ArgumentParser):
    """A refused command line is one line on stderr and exit 2, as banlieue's own CLI does
    (argparse prints the whole usage before it; a new-user review counted 7 lines)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrors(prog="bench/capv.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", type=int, default=100, help="Machines in the MachineDeployment (default 100)")
    p.add_argument("--settle", type=float, default=120.0, help="seconds after the wave before the idle window (default 120: the issue's minute 2)")
    p.add_argument("--idle", type=float, default=300.0, help="idle window, seconds (default 300: with --settle's 120, minutes 2-7)")
    p.add_argument("--idle-long", type=float, default=0.0,
                   help="also count a window from the idle window's start over this many seconds, longer than --idle "
                        "(e.g. 720: past CAPV's 10-minute sync period); 0 (default): none")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for each wave (default 1800)")
    p.add_argument("--clone-seconds", type=float, default=0.0,
                   help="each clone task runs this long in vcsim (its --task-delay; default 0: vcsim's instant clones). "
                        "Tasks pile up only when they take time: the 0 -> N storm's peak concurrent tasks needs it")
    p.add_argument("--deployments", type=int, default=1,
                   help="MachineDeployments sharing --machines, all created at once (default 1; CAPI's MachineSet creates its Machines one by one)")
    p.add_argument("--providers", default="banlieue,capv", help="comma list, in run order (default banlieue,capv)")
    p.add_argument("--out", type=Path, help=f"side-by-side results of both providers (default {RESULTS.relative_to(REPO)})")
    p.add_argument("--gate", type=Path, metavar="FILE",
                   help="before each provider after the first, wait until FILE exists (a change to measure can land in the "
                        "checkout while the first provider runs); the wait is logged and lies outside every measured window")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit log)")
    p.add_argument("--profile", type=Path, help="py-spy raw CPU profile of banlieue's manager during the wave (pip install -e '.[bench]')")
    p.add_argument("--table", action="store_true", help="print the Markdown table of --out and exit")
    p.add_argument("--solo-out", type=Path, help="with --providers banlieue: merge banlieue's per-machine counts into this file")
    p.add_argument("--solo-label", help="with --solo-out: the entry's name suffix (e.g. the commit measured)")
    p.add_argument("--recount", type=Path, metavar="WORKDIR",
                   help="count the API figures of a kept run (--keep) again from all its audit log files, then write --out as a run does")
    args = p.parse_args(argv)
    out_given = args.out is not None
    args.out = args.out if out_given else RESULTS
    if args.table:
        print(table(args.out))
        return 0
    if args.recount is not None:
        if not (args.recount / "envtest" / "logs").is_dir():
            p.error(f"--recount {args.recount}: not a kept work directory (no envtest/logs)")
        done = [x for x in ("banlieue", "capv") if (args.recount / x / "raw.json").exists()]
        recounted = recount(args.recount, done)
        if set(done) == {"banlieue", "capv"}:
            write_results(args.out, recounted, recounted["banlieue"]["machines"])
        return 0
    if args.machines < 1:
        p.error("--machines must be >= 1")
    if not 1 <= args.deployments <= args.machines:
        p.error("--deployments must be between 1 and --machines")
    for flag, value, low in (("--clone-seconds", args.clone_seconds, 0.0), ("--settle", args.settle, 0.0),
                             ("--idle", args.idle, 1.0), ("--idle-long", args.idle_long, 0.0), ("--timeout", args.timeout, 1.0)):
        if not (math.isfinite(value) and value >= low):
            p.error(f"{flag} must be a finite number of seconds >= {low:g}, got {value}")
    if args.idle_long and args.idle_long <= args.idle:
        p.error(f"--idle-long must be 0 or longer than --idle ({args.idle:g} s), got {args.idle_long:g}")
    providers = [x.strip() for x in args.providers.split(",")]
    if not set(providers) <= {"banlieue", "capv"} or len(set(providers)) != len(providers):
        p.error("--providers: a comma list of banlieue, capv")
    # A results file this run would not write is refused rather than silently ignored.
    if out_given and set(providers) != {"banlieue", "capv"}:
        p.error("--out is the side-by-side results file, written when both providers run: with one, use --solo-out FILE")
    if args.solo_out is not None and providers != ["banlieue"]:
        p.error("--solo-out FILE is for --providers banlieue alone; both providers write --out")
    if args.solo_label is not None and args.solo_out is None:
        p.error("--solo-label names an entry of --solo-out FILE: give --solo-out too")
    if args.gate is not None:
        # Refused rather than ignored or waited on forever.
        if len(providers) < 2:
            p.error("--gate FILE waits before the second provider: give two in --providers")
        if not args.gate.absolute().parent.is_dir():
            p.error(f"--gate {args.gate}: its directory {args.gate.parent} does not exist (the wait would never end)")
    for b in ("capv-manager", "capi-manager", "kube-apiserver", "vcsim", "govc"):
        if b == "capv-manager" and "capv" not in providers:
            continue  # banlieue alone (its per-machine counts) needs no CAPV build
        if not (REPO / "bin" / b).exists():
            p.error(f"bin/{b} is missing: run `make envtest capi capv vcsim govc`")
    workdir = Path(tempfile.mkdtemp(prefix="bench-capv-"))
    log(f"work directory {workdir}; load {loadavg()}")
    results: dict[str, Any] = {}
    with start_envtest(workdir / "envtest", keep_logs=args.keep, audit_policy=AUDIT_POLICY) as env:
        capi = capi_testing.CapiEnvironment(kubeconfig=env.kubeconfig_path, workdir=workdir / "capi")
        capi.start()
        try:
            capi_testing.install_banlieue(env.kubeconfig_path)
            capv = install_capv(env, workdir) if "capv" in providers else {}
            api = Api(env)
            for i, name in enumerate(providers):
                if i and args.gate is not None and not args.gate.exists():
                    log(f"waiting for {args.gate} before {name}")
                    while not args.gate.exists():
                        time.sleep(5)
                    log(f"{args.gate} is there: {name} starts")
                log(f"--- {name}: {args.machines} machines (load {loadavg()})")
                results[name] = run_provider(name, env, api, workdir, args.machines, settle=args.settle, idle=args.idle,
                                             idle_long=args.idle_long,
                                             timeout=args.timeout, capv=capv, profile=args.profile, deployments=args.deployments,
                                             clone_seconds=args.clone_seconds)
                log(f"{name}: {json.dumps({k: v for k, v in results[name].items() if not isinstance(v, dict)})}")
        finally:
            capi.stop()
    (workdir / "raw.json").write_text(json.dumps(results, indent=1))
    log(f"raw results in {workdir / 'raw.json'}")
    if set(providers) == {"banlieue", "capv"}:
        write_results(args.out, results, args.machines)
    elif providers == ["banlieue"] and args.solo_out is not None:
        # banlieue alone: its per-machine counts (SOAP by method, API by verb and resource), for a
        # before/after of a banlieue change; the side-by-side table keeps its own run.
        write_solo(args.solo_out, args.solo_label or "banlieue", results["banlieue"], args.machines)
    if not args.keep:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
