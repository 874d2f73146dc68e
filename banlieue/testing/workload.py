"""A workload-cluster stand-in for the real-CAPI tests (issue 17 item 3): a second kube-apiserver
(+ etcd) on a Cluster's loopback control-plane endpoint, serving with the Cluster's CA, and a
``Kubelet`` that plays the part of the kubelet and of ``kubeadm init`` on the VMs banlieue runs.

Why: Cluster API's cluster cache dials ``Cluster.spec.controlPlaneEndpoint`` with the kubeconfig
in the ``<cluster>-kubeconfig`` Secret (signed by the CA in ``<cluster>-ca``) as soon as the
Cluster's infrastructure is provisioned; without an API server there, KCP stops after its first
Machine, CABPK never produces join data and no Machine gets a ``nodeRef``.

What runs (:func:`start_workload_cluster`): ``banlieue.testing.envtest.up`` with
``bind_address=<endpoint host>``, ``port=<endpoint port>``, ``ca=<the Cluster CA>`` and no
kube-controller-manager; every certificate (serving, admin client in ``system:masters``) is signed
by the Cluster CA, so the kubeconfig that KCP generates from ``<cluster>-ca`` authenticates. The
CA is made by :func:`generate_cluster_ca` and pre-created by the test in ``<cluster>-ca``
before KCP runs, as CAPI lets users do ("Using Custom Certificates" in the CAPI book: KCP uses
an existing ``<cluster>-ca`` Secret with ``tls.crt``/``tls.key`` instead of generating one); KCP
then writes ``<cluster>-kubeconfig`` from it. With external etcd, KCP also needs the user's
``<cluster>-etcd`` and ``<cluster>-apiserver-etcd-client`` Secrets (:func:`external_etcd_secrets`).

What the ``Kubelet`` does, per Machine of the Cluster that has a ``spec.providerID`` and no
deletion timestamp, on each :meth:`Kubelet.sync`:

* VM powered on (``power_state(providerID) == "poweredOn"``; the caller reads vSphere) and no
  Node: creates Node ``<infrastructureRef.name>`` (the VM's hostname, what ``{{
  ds.meta_data.hostname }}`` gives kubeadm) with ``spec.providerID``, the kubelet's labels (and
  ``node-role.kubernetes.io/control-plane`` on control-plane Machines, as kubeadm sets), status
  Ready True and no Memory/Disk/PID pressure, ``nodeInfo`` and addresses. For a control-plane Machine it also does what
  ``kubeadm init``/``join`` leaves in the cluster: the ``kube-system/kubeadm-config`` ConfigMap
  (once; KCP reads it as "the control plane is initialized") and Running, Ready mirror Pods of
  the static pods (``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` and, with
  ``local_etcd``, ``etcd``), which KCP's health checks read.
* VM not powered on, or powered on since another boot than the one its kubelet registered in
  (the VM was power-cycled, e.g. powered off behind banlieue's back and powered on again by
  banlieue), and its Node Ready: Ready becomes ``Unknown`` / ``NodeStatusUnknown`` (what
  kube-controller-manager's node lifecycle controller writes when the kubelet stops posting).
* VM powered on for ``reboot_seconds`` since its new boot: the kubelet is back, Ready True
  (a guest takes that long to boot; a MachineHealthCheck whose timeout is shorter remediates).

Network rule: the endpoint host must be a loopback address (NetworkRuleViolation otherwise).
A Node's only address is ``InternalIP`` = the endpoint host (not the guest's address): the
workload kube-apiserver dials a Node's address for ``pods/portforward``/``exec``/``logs`` (KCP
port-forwards to ``etcd-<node>`` to check etcd members), and that must stay on loopback. Nothing
listens on the kubelet port there, so such a dial is refused.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import random
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from banlieue.testing.capi import NetworkRuleViolation, is_loopback
from banlieue.testing.envtest import Envtest, EnvtestError, up

CONTROL_PLANE_PORT = 6443
KUBELET_VERSION = "v1.34.4"  # what the stand-in's Nodes report (nodeInfo.kubeletVersion)
LABEL_CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
LABEL_CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
MERGE_PATCH = "application/merge-patch+json"


STANDIN_SUBNET = f"127.17.{random.SystemRandom().randint(3, 254)}"
"""The first three octets of the loopback addresses this process's stand-ins listen on
(``standin_host``): chosen at random per process (127.17.3-254), so two test runs on one machine
(two ``make test``, or two pytest-xdist workers) pick the same ones once in 252 instead of always
colliding on fixed addresses (``Address already in use`` on ``:6443``)."""


def standin_host(n: int) -> str:
    """Loopback address ``n`` (1-254) of ``STANDIN_SUBNET``: one per stand-in a test starts."""
    if not 1 <= n <= 254:
        raise ValueError(f"stand-in host number {n} is outside 1-254")
    return f"{STANDIN_SUBNET}.{n}"



@dataclass(frozen=True)
class VMPower:
    """What vSphere says of a VM: ``runtime.powerState`` (``poweredOn``, ``poweredOff``,
    ``suspended``) and ``summary.runtime.bootTime`` (ISO 8601, None while off; a new value after
    every power-on, so a power cycle is seen even when both transitions fall between two syncs)."""

    state: str
    boot_time: str | None


PowerState = Callable[[str], Awaitable[VMPower | None]]
"""``power_state(providerID)`` -> the VM's :class:`VMPower`, or None when no VM has that identity."""


class WorkloadError(RuntimeError):
    """A request to the workload API server failed (the message has the status and body)."""


def generate_cluster_ca(directory: Path, common_name: str = "kubernetes") -> tuple[str, str]:
    """A self-signed ECDSA P-256 CA (``openssl``; 2 days; CN ``kubernetes`` as kubeadm names its
    CA) written to ``directory/ca.{crt,key}``; returns ``(cert PEM, key PEM)`` (the key is PKCS#8,
    which CAPI's ``certs.DecodePrivateKeyPEM`` reads). Raises EnvtestError when openssl fails."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise EnvtestError("openssl is required to make the Cluster CA")
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                           "-days", "2", "-subj", f"/CN={common_name}", "-keyout", "ca.key", "-out", "ca.crt",
                           "-addext", "basicConstraints=critical,CA:TRUE",
                           "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign"],
                          cwd=directory, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvtestError(f"openssl req (Cluster CA) failed: {proc.stderr.strip()}")
    return (directory / "ca.crt").read_text(), (directory / "ca.key").read_text()


def _secret(name: str, namespace: str, cluster_name: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_CLUSTER_NAME: cluster_name}},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def cluster_ca_secret(cluster_name: str, namespace: str, ca: tuple[str, str]) -> dict[str, Any]:
    """The ``<cluster>-ca`` Secret (keys ``tls.crt``, ``tls.key``) a user pre-creates so that KCP
    uses this CA instead of generating one (CAPI's secret naming: ``secret.ClusterCA``)."""
    return _secret(f"{cluster_name}-ca", namespace, cluster_name, {"tls.crt": ca[0], "tls.key": ca[1]})


def external_etcd_secrets(cluster_name: str, namespace: str, directory: Path) -> list[dict[str, Any]]:
    """What a user of external etcd pre-creates for KCP: ``<cluster>-etcd`` (the etcd CA,
    ``tls.crt``) and ``<cluster>-apiserver-etcd-client`` (``tls.crt``/``tls.key`` of the
    kube-apiserver's etcd client certificate, signed by that CA); KCP only copies them into the
    bootstrap data (CAPI ``secret.NewCertificatesForInitialControlPlane``: both are ``External``
    and must exist). Made with ``openssl`` in ``directory``; raises EnvtestError."""
    ca = generate_cluster_ca(directory, common_name="etcd-ca")
    proc = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                           "-days", "2", "-subj", "/O=system:masters/CN=kube-apiserver-etcd-client", "-CA", "ca.crt", "-CAkey", "ca.key",
                           "-addext", "extendedKeyUsage=clientAuth", "-keyout", "client.key", "-out", "client.crt"],
                          cwd=directory, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvtestError(f"openssl req (etcd client certificate) failed: {proc.stderr.strip()}")
    return [_secret(f"{cluster_name}-etcd", namespace, cluster_name, {"tls.crt": ca[0]}),
            _secret(f"{cluster_name}-apiserver-etcd-client", namespace, cluster_name,
                    {"tls.crt": (directory / "client.crt").read_text(), "tls.key": (directory / "client.key").read_text()})]


@dataclass
class WorkloadCluster:
    """etcd + kube-apiserver on ``host:port`` with certificates of the Cluster CA."""

    host: str
    port: int
    envtest: Envtest

    @property
    def url(self) -> str:
        return self.envtest.url

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> tuple[int, Any]:
        """One request as admin; ``(status, decoded body)``, ``(0, None)`` = no answer."""
        return self.envtest.request(method, path, body, content_type=content_type)

    def call(self, method: str, path: str, body: Any = None, *, ok: Iterable[int] = (200, 201),
             content_type: str = "application/json") -> Any:
        """:meth:`request` that raises WorkloadError unless the status is in ``ok``."""
        status, out = self.request(method, path, body, content_type=content_type)
        if status not in tuple(ok):
            raise WorkloadError(f"{method} {path}: {status} {out}")
        return out

    def node(self, name: str) -> dict[str, Any] | None:
        status, out = self.request("GET", f"/api/v1/nodes/{name}")
        if status == 404:
            return None
        if status != 200:
            raise WorkloadError(f"GET node {name}: {status} {out}")
        return dict(out)

    def nodes(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/api/v1/nodes").get("items") or [])

    def stop(self) -> None:
        self.envtest.stop(keep_logs=True)


def start_workload_cluster(directory: Path, host: str, ca: tuple[str, str], port: int = CONTROL_PLANE_PORT) -> WorkloadCluster:
    """etcd and kube-apiserver on ``host:port`` (see the module docstring), files in ``directory``.
    Raises NetworkRuleViolation when ``host`` is not a loopback address, EnvtestError (one line
    naming the log) when a process does not start (e.g. ``host:port`` taken)."""
    if not is_loopback(host) or host == "localhost":
        raise NetworkRuleViolation(f"network rule: the workload cluster's endpoint {host!r} is not a loopback IP (127.0.0.0/8)")
    env = up(directory, port=port, bind_address=host, ca=ca, controller_manager=False)
    return WorkloadCluster(host=host, port=port, envtest=env)


@contextlib.contextmanager
def workload_cluster(host: str, ca: tuple[str, str], directory: Path | None = None,
                     port: int = CONTROL_PLANE_PORT) -> Iterator[WorkloadCluster]:
    """:func:`start_workload_cluster` as a context manager (a temporary directory when
    ``directory`` is None); stopped on exit, logs kept."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="workload-")))
        wc = start_workload_cluster(directory, host, ca, port)
        try:
            yield wc
        finally:
            wc.stop()


def _ready(obj: Mapping[str, Any]) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return str(c.get("status"))
    return None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Kubelet:
    """Plays the kubelet (and ``kubeadm init``'s uploads) for the Machines of one Cluster on a
    :class:`WorkloadCluster` (see the module docstring). ``events`` records what it did, one
    line each (``created Node x``, ``Node x Ready Unknown``…), for assertions and messages."""

    workload: WorkloadCluster
    power_state: PowerState
    cluster_name: str
    kubernetes_version: str = KUBELET_VERSION
    local_etcd: bool = True
    reboot_seconds: float = 60.0
    events: list[str] = field(default_factory=list)
    boots: dict[str, str | None] = field(default_factory=dict)  # Node name -> the boot time its kubelet runs in

    async def sync(self, machines: Iterable[Mapping[str, Any]]) -> None:
        """One pass over ``machines`` (CAPI Machine objects of the Cluster)."""
        for m in machines:
            provider_id = (m.get("spec") or {}).get("providerID")
            infra = (m.get("spec") or {}).get("infrastructureRef") or {}
            if not provider_id or m["metadata"].get("deletionTimestamp") or not infra.get("name"):
                continue
            power = await self.power_state(str(provider_id))
            if power is None:
                continue
            await asyncio.to_thread(self._sync_one, m, str(provider_id), str(infra["name"]), power)

    def _sync_one(self, machine: Mapping[str, Any], provider_id: str, name: str, power: VMPower) -> None:
        wc = self.workload
        node = wc.node(name)
        control_plane = LABEL_CONTROL_PLANE in (machine["metadata"].get("labels") or {})
        on = power.state == "poweredOn"
        if node is None:
            if on:
                self._register(name, provider_id, control_plane)
                self.boots[name] = power.boot_time
            return
        ready = _ready(node)
        same_boot = name not in self.boots or self.boots[name] == power.boot_time
        if ready == "True" and not (on and same_boot):
            self._post_ready(name, posting=False)
            self.events.append(f"Node {name} Ready Unknown (VM {power.state}, boot {power.boot_time})")
        elif ready != "True" and on and self._booted(power.boot_time):
            self._post_ready(name, posting=True)
            self.boots[name] = power.boot_time
            self.events.append(f"Node {name} Ready True (boot {power.boot_time})")

    def _booted(self, boot_time: str | None) -> bool:
        """The guest has been up ``reboot_seconds`` since ``boot_time`` (an unknown boot time
        counts as booted)."""
        if boot_time is None:
            return True
        booted = datetime.datetime.fromisoformat(boot_time)
        if booted.tzinfo is None:
            booted = booted.replace(tzinfo=datetime.UTC)
        return (datetime.datetime.now(datetime.UTC) - booted).total_seconds() >= self.reboot_seconds

    def _register(self, name: str, provider_id: str, control_plane: bool) -> None:
        wc = self.workload
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        if control_plane:
            labels["node-role.kubernetes.io/control-plane"] = ""
        wc.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                                          "spec": {"providerID": provider_id}}, ok=(201, 409))
        wc.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
            "addresses": [{"type": "InternalIP", "address": wc.host}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": self.kubernetes_version, "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "banlieue stand-in", "kernelVersion": "", "machineID": "",
                         "systemUUID": provider_id.removeprefix("vsphere://"), "bootID": "", "containerRuntimeVersion": ""},
            "conditions": self._conditions(posting=True)}}, content_type=MERGE_PATCH)
        # The API server's TaintNodesByCondition admission taints a new Node not-ready; the node
        # lifecycle controller (kube-controller-manager, not run here) lifts it once Ready.
        wc.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH)
        self.events.append(f"created Node {name}")
        if control_plane:
            self._kubeadm_uploads(name)

    def _kubeadm_uploads(self, node: str) -> None:
        """What ``kubeadm init`` (first control-plane Node) and ``kubeadm join --control-plane``
        leave in the cluster that KCP reads: the kubeadm-config ConfigMap and the static pods'
        mirror Pods."""
        wc = self.workload
        config: dict[str, Any] = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
                  "kubernetesVersion": self.kubernetes_version, "controlPlaneEndpoint": f"{wc.host}:{wc.port}",
                  "clusterName": self.cluster_name}
        if not self.local_etcd:
            config["etcd"] = {"external": {"endpoints": [f"https://{wc.host}:2379"]}}
        status, _ = wc.request("POST", "/api/v1/namespaces/kube-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
            "data": {"ClusterConfiguration": yaml.safe_dump(config)}})
        if status == 201:
            self.events.append("created ConfigMap kube-system/kubeadm-config")
        components = STATIC_PODS + (("etcd",) if self.local_etcd else ())
        for component in components:
            pod = f"{component}-{node}"
            wc.call("POST", "/api/v1/namespaces/kube-system/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": "kube-system", "labels": {"component": component, "tier": "control-plane"},
                             "annotations": {"kubernetes.io/config.mirror": json.dumps(pod), "kubernetes.io/config.source": "file"}},
                "spec": {"nodeName": node, "containers": [{"name": component, "image": f"registry.k8s.io/{component}:{self.kubernetes_version}"}]}},
                ok=(201, 409))
            now = _now()
            wc.call("PATCH", f"/api/v1/namespaces/kube-system/pods/{pod}/status", {"status": {
                "phase": "Running",
                "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                               for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                "containerStatuses": [{"name": component, "ready": True, "restartCount": 0, "image": "", "imageID": "",
                                       "state": {"running": {"startedAt": now}}}]}}, content_type=MERGE_PATCH)
        self.events.append(f"mirror Pods of {', '.join(components)} on {node}")

    @staticmethod
    def _condition(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
        now = _now()
        return {"type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    @classmethod
    def _conditions(cls, *, posting: bool) -> list[dict[str, str]]:
        """The kubelet's four Node conditions: while it posts, Ready True and no pressure (CAPI's
        Machine ``NodeHealthy`` needs all four reported); once it stops, all Unknown, as the node
        lifecycle controller marks them (reason ``NodeStatusUnknown``)."""
        if not posting:
            return [cls._condition(t, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
                    for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")]
        return [cls._condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                cls._condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cls._condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cls._condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")]

    def _post_ready(self, name: str, *, posting: bool) -> None:
        # A strategic merge patch merges conditions by type (a merge patch would replace the list).
        self.workload.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"conditions": self._conditions(posting=posting)}},
                           content_type="application/strategic-merge-patch+json")

    async def run(self, machines: Callable[[], Awaitable[list[dict[str, Any]]]], interval: float = 1.0) -> None:
        """:meth:`sync` every ``interval`` seconds over ``await machines()`` until cancelled; an
        error of one pass is recorded in ``events`` and the loop goes on (the next pass retries)."""
        while True:
            try:
                await self.sync(await machines())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a pass failing must not end the loop: recorded, the next pass retries
                self.events.append(f"error: {type(e).__name__}: {e}")
            await asyncio.sleep(interval)
