"""The processes of the end-to-end benchmark (``bench/e2e.py``): an API server, vcsims and
``banlieue manager``, each its own process on 127.0.0.1 free ports, plus the fixtures every
figure needs (CRDs, Providers + Secrets, VMClass ``bench``, VMImage).

The API server is one of two (``Env.apiserver``, default :data:`APISERVER`; ``bench/e2e.py
--apiserver``):

- ``double``: the in-repo API-server double (``python -m banlieue.testing.apiserver``, plain
  HTTP, no authentication); CRDs from ``config/crd``; the manager uses the double's kubeconfig;
  requests are counted from the double's request log (``/debug/requests``).
- ``real``: envtest's kube-apiserver + etcd (``banlieue.testing.envtest``, TLS); banlieue
  installed as an operator does (``banlieue.testing.capi.install_banlieue``: CRDs, RBAC, admission
  policies); the manager runs as ServiceAccount ``banlieue-system/banlieue-manager`` with a
  TokenRequest token (:data:`MANAGER_USER`); requests are counted from the audit log, the
  manager's user only. The benchmark's own requests use the cluster-admin client certificate;
  the write ceiling's bare client uses a token of its own ServiceAccount
  (:data:`CEILING_SA`, bound to ``cluster-admin``), so both sides go through the same token
  authentication and API Priority and Fairness flow schema (``service-accounts``) as the manager.

``Env`` is a context manager: everything it started is stopped on exit (manager first, so it
releases its Leases). Sizes are in MiB, times in seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e_guests import EventGuestNetwork  # noqa: E402

from banlieue.cmd.dev import GuestNetwork  # noqa: E402
from banlieue.testing import capi as capi_testing  # noqa: E402
from banlieue.testing.apiserver.fixture import ApiServerProcess, start_subprocess  # noqa: E402
from banlieue.testing.envtest import Envtest, start_envtest  # noqa: E402
from banlieue.testing.stack import BanlieueProcess, start_banlieue  # noqa: E402
from banlieue.testing.stack import http as stack_http  # noqa: E402
from banlieue.testing.vcsim import VcsimProcess, start_vcsim  # noqa: E402

NS = "default"
CLASS = "bench"
IMAGE = "ubuntu-22.04"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
VMS = "/apis/banlieue.io/v1alpha1/namespaces/{ns}/virtualmachines"
VSMS = "/apis/infrastructure.banlieue.io/v1alpha1/namespaces/{ns}/vspheremachines"
PROVIDERS = "/apis/banlieue.io/v1alpha1/namespaces/{ns}/providers"
SECRETS = "/api/v1/namespaces/{ns}/secrets"
VMCLASSES = "/apis/banlieue.io/v1alpha1/vmclasses"
VMIMAGES = "/apis/banlieue.io/v1alpha1/vmimages"
APISERVERS = ("double", "real")
APISERVER = "double"
"""The API server of every Env (``bench/e2e.py --apiserver``): ``double`` or ``real`` (module doc)."""
MANAGER_NS, MANAGER_SA = "banlieue-system", "banlieue-manager"
MANAGER_USER = f"system:serviceaccount:{MANAGER_NS}:{MANAGER_SA}"
"""The manager's user on the real API server (the audit log's ``user.username``); the
ServiceAccount and its bindings come from config/default."""
CEILING_SA = "bench-ceiling"
"""ServiceAccount (in MANAGER_NS, bound to ``cluster-admin``) of the write ceiling's bare client
on the real API server."""
AUDIT_VERB_METHOD = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE",
                     "deletecollection": "DELETE", "get": "GET", "list": "GET", "watch": "GET"}
# vcsim: 2 datacenters x 3 clusters x 4 hosts (4 GiB each); the bench class needs 16 MiB, so
# capacity never limits placement of 1,000 VMs.
GUESTS = "vcsim"
"""Guest IPs: ``vcsim`` (each vcsim's own ``--guest-ip`` handler reports an address as soon as a
VM powers on, from 198.18.0.0/16, 198.19.0.0/16, ...: RFC 2544's benchmarking range, never
contacted), ``event`` (bench/e2e_guests.py: a PropertyCollector client assigning addresses) or
``poll`` (make dev's GuestNetwork, every VM re-read every 0.5 s); ``bench/e2e.py --guests``.
``vcsim`` is the default: the two Python stand-ins are clients of vcsim's PropertyCollector, whose
cost grows with every VM (docs/performance.md), and ``event`` missed a VM's power-on in a 1,000-VM
run (it then never got an address)."""
MEMPROBE = False
"""Run the manager under tracemalloc (``bench/e2e_memprobe.py``; ``bench/e2e.py --memprobe``)."""
MANAGER_ARGS: list[str] = []
"""Extra manager flags for every Env (set by ``bench/e2e.py --manager-arg``)."""
REQUEST_LOG_SIZE = 100_000
"""Requests the double's request log keeps; the figures are counted from it, so ``bench/e2e.py``
raises it with ``--vms`` (10,000 VMs make about 110,000 requests from create to Ready)."""
VCSIM_OPTS: dict[str, Any] = {"dc": 2, "cluster": 3, "host": 4, "templates": [IMAGE], "batch_collector": True}
"""``batch_collector``: vcsim's WaitForUpdatesEx re-collects every watched object once per changed
object (O(n^2) while n VMs are provisioned); hack/vcsim/collector.go collects once per 250 ms tick,
as vCenter's incremental collector costs. ``bench/e2e.py --stock-collector`` turns it off."""


def http(method: str, url: str, body: Any = None, timeout: float = 30.0,
         content_type: str = "application/json") -> tuple[int, Any]:
    """``banlieue.testing.stack.http`` with the benchmark's longer default timeout (seconds)."""
    return stack_http(method, url, body, timeout, content_type)


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` (MiB), from /proc/<pid>/status VmRSS."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric_sum(text: str, metric: str, /, **labels: str) -> float:
    """Sum of every sample of ``metric`` whose labels include ``labels`` in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{metric}(\{{(.*)\}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            total += float(m.group(3))
    return total


def provider_docs(name: str, vc: VcsimProcess) -> list[dict[str, Any]]:
    """Secret + Provider for vcsim ``vc`` (TLS verified against its CA)."""
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-credentials", "namespace": NS},
         "type": "Opaque", "stringData": {"username": vc.username, "password": vc.password}},
        {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
         "metadata": {"name": name, "namespace": NS, "labels": {"site": name}},
         "spec": {"providerClassRef": {"name": "vsphere"},
                  "connection": {"endpoint": vc.url, "credentialsRef": {"name": f"{name}-credentials"},
                                 "caBundle": {"inline": vc.ca_pem}},
                  "capabilities": {"networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}}},
    ]


CLASS_DOC = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": CLASS},
             "spec": {"hardware": {"cpus": 1, "memoryMiB": 16},
                      "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}, "firmware": "efi"}}
IMAGE_DOC = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": IMAGE},
             "spec": {"osFamily": "linux", "osDistribution": "ubuntu", "osVersion": "22.04", "architecture": "amd64",
                      "guestAgent": "cloud-init", "sources": [{"providerClass": "vsphere", "kind": "Template", "ref": IMAGE}]}}


def vm_doc(name: str, provider: str | None = None, ns: str = NS) -> dict[str, Any]:
    """A VirtualMachine of class ``bench``; ``provider`` pins it to one Provider (by its site label)."""
    spec: dict[str, Any] = {"classRef": {"name": CLASS}, "imageRef": {"name": IMAGE}}
    if provider:
        spec["placement"] = {"providerSelector": {"matchLabels": {"site": provider}}}
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


@dataclass
class Env:
    """API double (+ optional vcsims and GuestNetwork) and, once :meth:`start_manager` ran, the
    manager. ``vcsim_opts`` maps Provider name -> extra vcsim options (e.g. ``method_delay``)."""

    workdir: Path
    vcsim_opts: dict[str, dict[str, Any]] = field(default_factory=dict)
    bookmark_interval: float = 60.0
    stack: ExitStack = field(default_factory=ExitStack)
    api: ApiServerProcess | None = None
    vcsims: dict[str, VcsimProcess] = field(default_factory=dict)
    manager: BanlieueProcess | None = None
    manager_started: float = 0.0
    guests: str | None = None
    """``vcsim``, ``event`` or ``poll`` for this Env (default: GUESTS)."""
    guest_net: EventGuestNetwork | GuestNetwork | None = None
    manager_args: tuple[str, ...] = ()
    """Extra ``banlieue manager`` flags for every start (``bench/e2e.py --manager-arg``)."""
    apiserver: str = ""
    """``double`` or ``real`` (default: APISERVER)."""
    envtest: Envtest | None = None
    kubeconfig: Path | None = None
    """The manager's kubeconfig: the double's, or MANAGER_USER's token kubeconfig on envtest."""

    def __enter__(self) -> Env:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.apiserver = self.apiserver or APISERVER
        if self.apiserver not in APISERVERS:
            raise ValueError(f"apiserver must be one of {', '.join(APISERVERS)}, got {self.apiserver!r}")
        if self.real:
            # The logs (audit log included) stay in the work directory, beside manager.log.
            self.envtest = self.stack.enter_context(start_envtest(self.workdir / "envtest", keep_logs=True))
        else:
            self.api = self.stack.enter_context(start_subprocess(bookmark_interval=self.bookmark_interval,
                                                                 request_log_size=REQUEST_LOG_SIZE))
            self.kubeconfig = self.api.kubeconfig_path
        kind = self.guests or GUESTS
        for index, (name, opts) in enumerate(self.vcsim_opts.items()):
            guest_ip = {"guest_ip": f"198.{18 + index}.0.0/16"} if kind == "vcsim" else {}
            self.vcsims[name] = self.stack.enter_context(start_vcsim(**{**VCSIM_OPTS, **guest_ip, **opts}))
        if self.vcsims and kind != "vcsim":
            infos = [vc.info for vc in self.vcsims.values()]
            self.guest_net = EventGuestNetwork(infos) if kind == "event" else GuestNetwork(infos, interval=0.5)
            self.guest_net.start()
            self.stack.callback(self.guest_net.stop)
        self.install_crds()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_manager()
        self.stack.close()

    @property
    def real(self) -> bool:
        """Whether this Env runs envtest's kube-apiserver (else the double)."""
        return self.apiserver == "real"

    @property
    def url(self) -> str:
        if self.envtest is not None:
            return self.envtest.url
        assert self.api is not None
        return self.api.url

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The benchmark client's TLS context (cluster-admin client certificate) on the real API
        server; None on the double (plain HTTP)."""
        return self.envtest.ssl_context() if self.envtest is not None else None

    @property
    def api_pids(self) -> dict[str, int]:
        """The API server's processes by figure label: ``api_double``, or ``kube_apiserver`` and
        ``etcd`` (their CPU is the API server's cost on the real one)."""
        if self.envtest is not None:
            return {p.name.replace("-", "_"): p.process.pid for p in self.envtest.procs
                    if p.name in ("kube-apiserver", "etcd")}
        assert self.api is not None
        return {"api_double": self.api.process.pid}

    def http(self, method: str, path: str, body: Any = None, timeout: float = 30.0,
             content_type: str = "application/json") -> tuple[int, Any]:
        """One request to ``path`` on the API server (as cluster-admin on the real one); returns
        ``(status, decoded JSON or text)``, HTTP errors returned, ``(0, None)`` = no answer."""
        if self.envtest is not None:
            return self.envtest.request(method, path, body, timeout=timeout, content_type=content_type)
        return http(method, self.url + path, body, timeout, content_type)

    def ceiling_client(self) -> tuple[ssl.SSLContext | None, dict[str, str]]:
        """(TLS context, headers) of the write ceiling's bare client: on the real API server a
        bearer token of ServiceAccount CEILING_SA (created here, bound to ``cluster-admin``);
        nothing on the double."""
        if self.envtest is None:
            return None, {}
        self.envtest.ensure_service_account(MANAGER_NS, CEILING_SA)
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": CEILING_SA},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                   "subjects": [{"kind": "ServiceAccount", "name": CEILING_SA, "namespace": MANAGER_NS}]}
        status, out = self.http("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        if status not in (201, 409):
            raise RuntimeError(f"ClusterRoleBinding {CEILING_SA}: {status} {out}")
        token = self.envtest.token_for(MANAGER_NS, CEILING_SA, expiration_seconds=7200)
        return self.envtest.ssl_context(admin=False), {"Authorization": f"Bearer {token}"}

    def install_crds(self) -> None:
        """The double: POST every CRD of config/crd and wait until each is Established. The real
        API server: banlieue as an operator installs it (config/default without the Deployment:
        CRDs, RBAC, admission policies; ``capi_testing.install_banlieue``) and MANAGER_USER's
        token kubeconfig in the work directory."""
        if self.envtest is not None:
            capi_testing.install_banlieue(self.envtest.kubeconfig_path)
            self.kubeconfig = capi_testing.token_kubeconfig(self.envtest.kubeconfig_path, MANAGER_NS, MANAGER_SA,
                                                            self.workdir / "manager.kubeconfig")
            return
        names = []
        for path in sorted((REPO / "config/crd").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            status, body = self.http("POST", CRD_PATH, doc)
            if status not in (201, 409):
                raise RuntimeError(f"installing {path.name}: {status} {body}")
            names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + 30
        for name in names:
            while True:
                _, crd = self.http("GET", f"{CRD_PATH}/{name}")
                conds = {c["type"]: c["status"] for c in ((crd or {}).get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not Established")
                time.sleep(0.1)

    def create(self, path: str, doc: dict[str, Any]) -> None:
        """POST ``doc`` to ``path`` (relative to the API); an existing object is fine."""
        status, body = self.http("POST", path.format(ns=NS), doc)
        if status not in (201, 409):
            raise RuntimeError(f"POST {path}: {status} {body}")

    def install_fixtures(self) -> None:
        """Secrets + Providers (one per vcsim), VMClass ``bench``, VMImage ``ubuntu-22.04``."""
        for name, vc in self.vcsims.items():
            secret, provider = provider_docs(name, vc)
            self.create(SECRETS, secret)
            self.create(PROVIDERS, provider)
        self.create(VMCLASSES, CLASS_DOC)
        self.create(VMIMAGES, IMAGE_DOC)

    def start_manager(self, *extra: str, env: dict[str, str] | None = None) -> None:
        """``banlieue manager --leader-elect`` (log level warning) on free ports
        (``banlieue.testing.stack.start_banlieue``); returns at once."""
        assert self.kubeconfig is not None
        entry = (str(REPO / "bench" / "e2e_memprobe.py"),) if MEMPROBE else ("-m", "banlieue.cli")
        if MEMPROBE:
            env = {**(env or {}), "BENCH_MEMPROBE_OUT": str(self.workdir / "memprobe.txt")}
        self.manager_started = time.monotonic()
        self.manager = start_banlieue(self.kubeconfig, self.workdir / "manager.log", "manager",
                                      *self.manager_args, *extra, leader_election_namespace=NS, log_level=os.environ.get("BENCH_LOG_LEVEL", "warning"),
                                      entry=entry, extra_env=env)

    @property
    def metrics_url(self) -> str:
        """The manager's ``/metrics`` URL (127.0.0.1, free port)."""
        assert self.manager is not None
        return self.manager.metrics_url

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Poll /readyz every 20 ms until 200; returns seconds since :meth:`start_manager`."""
        assert self.manager is not None
        deadline = time.monotonic() + timeout
        while True:
            if not self.manager.alive():
                raise RuntimeError(f"manager exited {self.manager.returncode}: {self.log_tail()}")
            if http("GET", self.manager.probes_url + "/readyz", timeout=2.0)[0] == 200:
                return time.monotonic() - self.manager_started
            if time.monotonic() > deadline:
                raise RuntimeError(f"/readyz not 200 within {timeout} s: {self.log_tail()}")
            time.sleep(0.02)

    def stop_manager(self) -> None:
        """SIGTERM the manager (it drains and releases its Leases), kill after 40 s."""
        if self.manager is None:
            return
        self.manager.stop(timeout=40)
        self.manager = None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.workdir / "manager.log").read_text(errors="replace").splitlines()[-lines:])
        return ""

    def metrics(self) -> str:
        status, text = http("GET", self.metrics_url)
        return str(text) if status == 200 else ""

    def soap_requests(self) -> float:
        """``banlieue_vsphere_requests_total`` summed over every vCenter and method."""
        return metric_sum(self.metrics(), "banlieue_vsphere_requests_total")

    def soap_by_labels(self) -> dict[str, float]:
        """``banlieue_vsphere_requests_total`` samples by label set (e.g. vCenter and method)."""
        out: dict[str, float] = {}
        for line in self.metrics().splitlines():
            m = re.match(r"^banlieue_vsphere_requests_total\{(.*)\} (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def request_log(self, since: float = 0.0) -> list[dict[str, Any]]:
        """Requests that arrived at or after ``since`` (epoch seconds), oldest first, as records
        ``{time, method, path, query, status, user_agent}``: the double's request log
        (``/debug/requests``), or on the real API server the audit log's requests of
        MANAGER_USER (:func:`audit_records`)."""
        if self.envtest is not None:
            return audit_records(self.envtest.audit_events(), MANAGER_USER, since)
        status, body = self.http("GET", "/debug/requests", timeout=120)
        if status != 200:
            raise RuntimeError(f"/debug/requests: {status}")
        return [r for r in body["items"] if r["time"] >= since]

    def clear_request_log(self) -> None:
        """Empty the double's request log (it keeps the last 100,000 requests); nothing on the
        real API server (its audit log is read from ``since`` on)."""
        if self.envtest is None:
            self.http("DELETE", "/debug/requests", timeout=120)


def audit_records(events: list[dict[str, Any]], user: str, since: float = 0.0) -> list[dict[str, Any]]:
    """kube-apiserver audit events (``audit.k8s.io/v1``) of ``user`` received at or after ``since``
    (epoch seconds) as request-log records shaped like the double's ``/debug/requests`` items
    (``{time, method, path, query, status, user_agent}``), oldest first, so ``e2e_load.writes``
    and ``requests_by`` count both alike. The HTTP method comes from the audit verb
    (AUDIT_VERB_METHOD; ``patch`` is PATCH whatever its content type, and the query keeps
    ``fieldManager``/``force``, which tells an apply); a request is its ``ResponseComplete``
    event, a watch its ``ResponseStarted`` one (it completes when it ends: counted when opened,
    as ``bench/capv.py`` counts them); ``Panic`` events count as status 500."""
    from datetime import datetime

    out = []
    for e in events:
        stage, verb = e.get("stage"), e.get("verb", "")
        if (e.get("user") or {}).get("username") != user:
            continue
        wanted = "Panic" if stage == "Panic" else "ResponseStarted" if verb == "watch" else "ResponseComplete"
        if stage != wanted:
            continue
        at = datetime.fromisoformat(str(e["requestReceivedTimestamp"]).replace("Z", "+00:00")).timestamp()
        if at < since:
            continue
        path, _, query = str(e.get("requestURI", "")).partition("?")
        out.append({"time": at, "method": AUDIT_VERB_METHOD.get(verb, verb.upper()), "path": path, "query": query,
                    "status": 500 if stage == "Panic" else int((e.get("responseStatus") or {}).get("code") or 0),
                    "user_agent": str(e.get("userAgent", ""))})
    out.sort(key=lambda r: r["time"])
    return out
