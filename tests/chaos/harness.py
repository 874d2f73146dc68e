"""The chaos environment: an API server (the double in its own process; with
``BANLIEUE_TEST_APISERVER=real`` envtest's kube-apiserver, banlieue installed from config/default
and each ``banlieue`` role running with its own ServiceAccount token bound to config/rbac),
vcsim(s), ``banlieue`` processes. On the real server, fault injection skips the scenario (naming
the fault) and the request log is read from the audit log.

``ChaosEnv`` is built per scenario by the ``chaos_env`` fixture (conftest.py); everything it
starts is stopped at teardown. Objects are created over plain HTTP (the double validates them
against config/crd exactly as for kubectl). Faults go through the double's ``/debug/faults``;
its request log (``/debug/requests``) records every request with its User-Agent, which names
the banlieue process (``banlieue/<version> (...) pid/<pid>``, runtime client).

The process harness (``http``, ``wait_for``, ``condition``, ``BanlieueProcess``) is
:mod:`banlieue.testing.stack`, re-exported here for the scenarios.

Public helpers: ``ChaosEnv.start_banlieue(role, *flags) -> BanlieueProcess``, ``ChaosEnv.single_vcenter(**opts)``, ``ChaosEnv.add_provider(name, vcenter)``,
``ChaosEnv.create_vms(names)``, ``ChaosEnv.faults(**body)``, ``ChaosEnv.requests()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from banlieue.cmd.dev import find_kubectl
from banlieue.testing.apiserver.fixture import start_subprocess
from banlieue.testing.apiservers import ApiServerUnderTest, kinds, selected, start_api_server
from banlieue.testing.stack import BanlieueProcess, condition, http, start_banlieue, wait_for

from .vcenter import Guests, Vcenter

REPO = Path(__file__).resolve().parents[2]
NS = "default"
CORE = "/apis/banlieue.io/v1alpha1"
INFRA = "/apis/infrastructure.banlieue.io/v1alpha1"
VMS = f"{CORE}/namespaces/{NS}/virtualmachines"
VSMS = f"{INFRA}/namespaces/{NS}/vspheremachines"
PROVIDERS = f"{CORE}/namespaces/{NS}/providers"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
EVENTS = f"/api/v1/namespaces/{NS}/events"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
CLASS = "tiny"
IMAGE = "ubuntu-22.04"
PASSWORD_MARKER = "pw-chaos-7f3e9d1c"
USERDATA_MARKER = "ud-chaos-b81c55aa"

AUDIT_METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
                 "delete": "DELETE", "deletecollection": "DELETE"}
"""HTTP method of each audit verb (kube-apiserver's RequestInfo, reversed)."""

ON_BOTH_SERVERS = pytest.mark.parametrize("chaos_env", kinds(both_by_default=True), indirect=True)
ON_THE_REAL_SERVER = pytest.mark.parametrize("chaos_env", kinds(real_by_default=True), indirect=True)
"""A scenario about banlieue's own processes, not the API server's: plain ``make test`` runs it once,
on kube-apiserver (``$BANLIEUE_TEST_APISERVER`` picks another)."""
LIST_POLL = 0.25
"""Seconds between two lists of the API server while a scenario waits for a state (one local GET;
a 1 s pause cost half a second per wait on average, ~100 waits per chaos run)."""
"""A scenario plain ``make test`` also runs on kube-apiserver (envtest)."""

__all__ = ["LIST_POLL", "ON_BOTH_SERVERS", "ON_THE_REAL_SERVER", "BanlieueProcess", "ChaosEnv", "Pulse", "condition", "http", "wait_for"]


@dataclass
class ChaosEnv:
    """API double + vcsims + banlieue processes of one scenario."""

    tmp: Path
    stack: ExitStack
    api_url: str = ""
    kubeconfig: Path = Path()
    vcenters: dict[str, Vcenter] = field(default_factory=dict)
    procs: list[BanlieueProcess] = field(default_factory=list)
    guests: Guests | None = None
    api: ApiServerUnderTest | None = None
    role_kubeconfigs: dict[str, Path] = field(default_factory=dict)

    # -- processes -----------------------------------------------------------------------------

    def start_api(self, kind: str | None = None) -> None:
        """``kind`` (default ``$BANLIEUE_TEST_APISERVER``, else the double): the double with
        config/crd preloaded, or envtest with banlieue installed as an operator installs it."""
        if (kind or selected()) == "real":
            self.api = self.stack.enter_context(start_api_server("real", self.tmp))
            self.api.install(find_kubectl())
        else:
            double = self.stack.enter_context(start_subprocess(crd_dir=REPO / "config/crd", bookmark_interval=1.0))
            self.api = ApiServerUnderTest("double", double.url, double.kubeconfig_path, double=double)
        self.api_url, self.kubeconfig = self.api.url, self.api.kubeconfig_path

    def kubeconfig_for(self, role: str) -> Path:
        """The kubeconfig ``banlieue <role>`` runs with: on the real server a token of the
        role's own ServiceAccount (``banlieue-manager``, ``banlieue-controller``,
        ``banlieue-provider-vsphere``), bound only to config/rbac."""
        assert self.api is not None
        if self.api.envtest is None:
            return self.kubeconfig
        if role not in self.role_kubeconfigs:
            account = ("banlieue-system", f"banlieue-{role.replace(' ', '-')}")
            self.role_kubeconfigs[role] = self.api.manager_kubeconfig(find_kubectl(), self.tmp, account)
        return self.role_kubeconfigs[role]

    def add_vcenter(self, name: str, **opts: Any) -> Vcenter:
        vc = Vcenter(**opts)
        self.vcenters[name] = vc
        self.stack.callback(vc.stop)
        return vc

    def start_guest_network(self) -> None:
        """DHCP + VMware Tools for every vcsim (:class:`Guests`); survives restarts."""
        self.guests = Guests(list(self.vcenters.values()))
        self.guests.start()
        self.stack.callback(self.guests.stop)

    def start_banlieue(self, role: str = "manager", *flags: str, leader_elect: bool = True,
                       log_level: str = "info", wait: bool = True) -> BanlieueProcess:
        """``banlieue <role>`` (:func:`~banlieue.testing.stack.start_banlieue`, no metrics
        listener) with JSON logs into ``tmp/<role>-<n>.log``; waits for /readyz unless ``wait`` is
        False. Stopped at teardown."""
        log = self.tmp / f"{role.replace(' ', '-')}-{len(self.procs)}.log"
        proc = start_banlieue(self.kubeconfig_for(role), log, role, *flags, leader_election_namespace=NS if leader_elect else None,
                              metrics=False, log_format="json", log_level=log_level)
        self.procs.append(proc)
        self.stack.callback(proc.stop)
        if wait:
            proc.wait_ready()
        return proc

    def single_vcenter(self, **opts: Any) -> Vcenter:
        """The setup most scenarios share: one vcsim ``vc`` (``opts`` as for :class:`Vcenter`),
        the guest network, the VMClass/VMImage of :meth:`add_shared_objects`, and the Provider
        ``vc`` (with its Secret) on that vcsim."""
        vc = self.add_vcenter("vc", **opts)
        self.start_guest_network()
        self.add_shared_objects()
        self.add_provider("vc", vc)
        return vc

    # -- API -----------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request of the test itself. Injected faults hit every client, this one too: like
        client-go, retry 429 (after Retry-After) and 500/no answer (0.2 s), up to 30 times, so a
        read never passes off a fault as an empty list. A POST that a 500 refused before it reached
        the store (the double injects before the handler) is retried; 409 AlreadyExists after
        such a retry is the object created by an earlier attempt, and is returned as is."""
        assert self.api is not None
        for _ in range(30):
            status, out = self.api.request(method, path, body)
            if status == 429:
                time.sleep(float(((out or {}).get("details") or {}).get("retryAfterSeconds") or 1))
            elif status in (0, 500):
                time.sleep(0.2)
            else:
                return status, out
        return status, out

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        return body if status == 200 else None

    def items(self, path: str) -> list[dict[str, Any]]:
        body = self.get(path)
        return list((body or {}).get("items") or [])

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, out = self.call("POST", path, body)
        assert status == 201, f"POST {path}: {status} {out}"
        return dict(out)

    def skip_faults_on_real_server(self, fault: Any) -> None:
        if self.api is not None and self.api.envtest is not None:
            pytest.skip(f"drives the API double's fault injection (/debug/faults {fault}); kube-apiserver has none")

    def faults(self, **body: Any) -> dict[str, Any]:
        self.skip_faults_on_real_server(body)
        status, out = self.call("POST", "/debug/faults", body)
        assert status == 200, out
        return dict(out)

    def clear_faults(self) -> None:
        assert self.call("DELETE", "/debug/faults")[0] == 200

    def requests(self) -> list[dict[str, Any]]:
        """Every request so far as the double's request log has them (``method``, ``path``,
        ``query``, ``status``, ``user_agent``, ``time``); on the real server from the audit log."""
        assert self.api is not None
        if self.api.envtest is None:
            return list((self.get("/debug/requests") or {}).get("items") or [])
        out = []
        for e in self.api.envtest.audit_events():
            path, _, query = e["requestURI"].partition("?")
            method = AUDIT_METHODS.get(e["verb"])
            if method is not None:
                out.append({"method": method, "path": path, "query": query, "user_agent": e.get("userAgent", ""),
                            "status": int((e.get("responseStatus") or {}).get("code", 0)),
                            "time": datetime.fromisoformat(e["requestReceivedTimestamp"]).timestamp()})
        return out

    # -- objects -------------------------------------------------------------------------------

    def add_shared_objects(self) -> None:
        """The VMClass ``tiny`` (1 vCPU, 64 MiB, one 10 GiB disk: the template's size in vcsim 0.56, so never a
        grow nor a shrink) and the VMImage ``ubuntu-22.04``."""
        self.create(f"{CORE}/vmclasses", {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": CLASS},
            "spec": {"hardware": {"cpus": 1, "memoryMiB": 64,
                                  "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}]},
                     "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}}})
        self.create(f"{CORE}/vmimages", {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": IMAGE},
            "spec": {"osFamily": "linux", "osDistribution": "ubuntu", "osVersion": "22.04", "architecture": "amd64",
                     "sources": [{"providerClass": "vsphere", "kind": "Template", "ref": IMAGE}]}})

    def add_provider(self, name: str, vc: Vcenter, *, ca: bool = True, secret: bool = True,
                     password: str | None = None, labels: dict[str, str] | None = None) -> None:
        """A Secret ``<name>-credentials`` and a Provider on ``vc`` (CA inline when TLS and ``ca``)."""
        if secret:
            self.create(SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": f"{name}-credentials", "namespace": NS},
                                  "stringData": {"username": vc.info["username"],
                                                 "password": password or vc.info["password"]}})
        connection: dict[str, Any] = {"endpoint": vc.url, "credentialsRef": {"name": f"{name}-credentials"}}
        if vc.proc.tls and ca:
            connection["caBundle"] = {"inline": vc.proc.ca_pem}
        body = {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
            "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
            "spec": {"providerClassRef": {"name": "vsphere"}, "connection": connection,
                     "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "LocalDS_0"}}],
                                      "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}}}
        if not vc.proc.tls:
            self.allow_http_endpoints(body)
        self.create(PROVIDERS, body)

    def allow_http_endpoints(self, provider: dict[str, Any], timeout: float = 15.0) -> None:
        """On the real server, what a development cluster against a plain-http simulator does
        (banlieue.api.admission, docs/security.md): delete the binding of the
        ``banlieue-provider-https-endpoint`` policy, then wait until kube-apiserver's admission
        has seen it (a dry-run create of ``provider`` is admitted). The manager must run with
        ``--development-allow-http-endpoints``. Nothing to do on the double (no admission)."""
        if self.api is None or self.api.envtest is None:
            return
        status, out = self.api.request(
            "DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/banlieue-provider-https-endpoint")
        assert status in (200, 404), f"delete the https-endpoint policy binding: {status} {out}"
        deadline = time.monotonic() + timeout
        while True:
            status, out = self.api.request("POST", f"{PROVIDERS}?dryRun=All", provider)
            if status == 201:
                return
            assert time.monotonic() < deadline, f"an http:// Provider still refused {timeout:g} s after the binding went: {status} {out}"
            time.sleep(0.2)

    def vm_body(self, name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"classRef": {"name": CLASS}, "imageRef": {"name": IMAGE}, **spec}}

    def create_vms(self, names: Iterable[str], **spec: Any) -> list[str]:
        out = []
        for name in names:
            self.create(VMS, self.vm_body(name, **spec))
            out.append(name)
        return out

    def wait_condition(self, path: str, kind: str, timeout: float, what: str | None = None) -> dict[str, Any]:
        """Wait until the object at ``path`` has condition ``kind`` with status True; returns it."""
        return wait_for(what or f"{path} {kind}", lambda: (lambda c: c if c.get("status") == "True" else None)(
            condition(self.get(path), kind)), timeout)

    def delete(self, path: str) -> int:
        return self.call("DELETE", path)[0]

    # -- observations ----------------------------------------------------------------------------

    def vms(self) -> dict[str, dict[str, Any]]:
        return {v["metadata"]["name"]: v for v in self.items(VMS)}

    def not_ready(self, names: Iterable[str]) -> dict[str, str]:
        """Names (of ``names``) whose Ready is not True -> "reason: message"."""
        vms = self.vms()
        out = {}
        for n in names:
            ready = condition(vms.get(n), "Ready")
            if ready.get("status") != "True":
                out[n] = f"{ready.get('reason')}: {ready.get('message')}" if ready else "missing"
        return out

    def wait_ready(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending: dict[str, str] = {}
        while time.monotonic() < deadline:
            pending = self.not_ready(names)
            if not pending:
                return
            time.sleep(LIST_POLL)
        sample = dict(list(pending.items())[:8])
        logs = "\n".join(p.tail(15) for p in self.procs[-1:])
        pytest.fail(f"{len(pending)}/{len(names)} VirtualMachines not Ready within {timeout:g} s: {sample}\n{logs}")


class Pulse:
    """A daemon thread that POSTs ``body`` to ``/debug/faults`` every ``period`` seconds. With
    ``off`` (a body, or ``"clear"`` for ``DELETE /debug/faults``), the fault comes and goes: on for
    ``on_for`` seconds (default half the period), then off. Use as a context manager (the fault
    is switched off on exit); ``count`` is how many pulses were sent, at most ``times``."""

    def __init__(self, env: ChaosEnv, period: float, body: dict[str, Any],
                 off: dict[str, Any] | str | None = None, on_for: float | None = None,
                 times: int | None = None) -> None:
        env.skip_faults_on_real_server(body)
        self.env, self.period, self.body, self.off = env, period, body, off
        self.on_for = on_for if on_for is not None else period / 2
        self.count = 0
        self.times = times
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault pulse", daemon=True)

    def _switch_off(self) -> None:
        if self.off == "clear":
            self.env.call("DELETE", "/debug/faults")
        elif isinstance(self.off, dict):
            self.env.call("POST", "/debug/faults", self.off)

    def _run(self) -> None:
        pause = self.period - (self.on_for if self.off is not None else 0)
        while not self._stop.wait(0 if self.count == 0 else pause):
            if self.times is not None and self.count >= self.times:
                break
            self.env.call("POST", "/debug/faults", self.body)
            self.count += 1
            if self.off is not None:
                if self._stop.wait(self.on_for):
                    break
                self._switch_off()

    def __enter__(self) -> Pulse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._switch_off()
