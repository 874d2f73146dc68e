"""Issue 17 items 3 and 5 on the workload-cluster stand-in (``banlieue.testing.workload``): real
Cluster API v1.14.2 reaches a kube-apiserver on the Cluster's loopback control-plane endpoint,
serving with the Cluster CA, where a Node with the Machine's providerID appears when banlieue's VM
powers on (the kubelet's part, played by ``Kubelet``).

What real KCP and CABPK then do, and where they stop, is asserted here and written down in
docs/capi-workload.md ("How far real KCP and CABPK get").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from banlieue.reconcilers.kinds import CAPI_CLUSTER, CAPI_MACHINE, VSPHERE_MACHINE, VSPHERE_MACHINE_TEMPLATE
from banlieue.runtime.kinds import SECRET, ResourceKind
from banlieue.testing.workload import (
    Kubelet,
    VMPower,
    WorkloadCluster,
    cluster_ca_secret,
    external_etcd_secrets,
    generate_cluster_ca,
    standin_host,
    start_workload_cluster,
)
from capi.contract import check_infra_machine, check_infra_machine_template
from capi.env import VSphereOracle, eventually
from capi.real import (
    KINDS,
    KUBEADM_CONFIG_TEMPLATE,
    KUBEADM_CONTROL_PLANE,
    LABEL_CLUSTER_NAME,
    LABEL_CONTROL_PLANE,
    LABEL_DEPLOYMENT_NAME,
    MACHINE_DEPLOYMENT,
    RealCapi,
    bootstrap_secret,
    cluster,
    kubeadm_control_plane,
    machine_deployment,
    machine_template,
    ref,
    vsphere_cluster,
)
from capi.simulator import condition

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(480)]

MACHINE_HEALTH_CHECK = ResourceKind("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck", "machinehealthchecks")
KINDS[MACHINE_HEALTH_CHECK.kind] = MACHINE_HEALTH_CHECK
NAME = "wl"
KUBERNETES_VERSION = "v1.34.4"
REBOOT_SECONDS = 90.0  # a power-cycled guest's kubelet posts Ready again this long after boot (longer than the MHC timeout)
TIMEOUT = 150.0  # seconds for one step of CAPI + banlieue + the stand-in on a loaded 2-core machine


@dataclass
class StandIn:
    """A running workload-cluster stand-in and its kubelet loop."""

    workload: WorkloadCluster
    kubelet: Kubelet
    task: asyncio.Task[None]

    def describe(self) -> str:
        nodes = {n["metadata"]["name"]: (n["spec"].get("providerID"), condition(n, "Ready")) for n in self.workload.nodes()}
        return f"stand-in nodes: {nodes}\nkubelet events: {self.kubelet.events[-15:]}"


StartStandIn = Callable[..., Awaitable[StandIn]]


@pytest.fixture
async def stand_in(real_capi: RealCapi, tmp_path: Path) -> AsyncIterator[StartStandIn]:
    """``await stand_in(cluster_name, host, local_etcd=True)``: pre-creates ``<cluster>-ca`` (a
    CA made here, which KCP then uses to write ``<cluster>-kubeconfig``); starts
    the stand-in API server on ``host:6443`` and its kubelet loop (own pyVmomi sessions, 1 s).
    Teardown deletes the namespace's Clusters while the stand-in still serves (CAPI drains and
    deletes Nodes there), then stops it."""
    r = real_capi
    started: list[tuple[StandIn, VSphereOracle]] = []

    async def start(cluster_name: str, host: str, *, local_etcd: bool = True) -> StandIn:
        ca = generate_cluster_ca(tmp_path / f"{cluster_name}-ca")
        await r.create(cluster_ca_secret(cluster_name, r.env.namespace, ca))
        oracle = VSphereOracle(r.env.vcsims)  # the kubelet's own sessions (pyVmomi calls run in threads)
        try:
            wc = await asyncio.to_thread(start_workload_cluster, tmp_path / f"{cluster_name}-workload", host, ca)
        except BaseException:
            await asyncio.to_thread(oracle.close)
            raise

        def read_power(bios_uuid: str) -> VMPower | None:
            for si in oracle.sessions.values():
                vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, False)
                if vm is not None:
                    boot = vm.summary.runtime.bootTime
                    return VMPower(str(vm.runtime.powerState), boot.isoformat() if boot else None)
            return None

        async def power_state(provider_id: str) -> VMPower | None:
            return await asyncio.to_thread(read_power, provider_id.removeprefix("vsphere://"))

        kubelet = Kubelet(wc, power_state, cluster_name, kubernetes_version=KUBERNETES_VERSION, local_etcd=local_etcd,
                          reboot_seconds=REBOOT_SECONDS)

        async def machines() -> list[dict[str, Any]]:
            return await r.list(CAPI_MACHINE, {LABEL_CLUSTER_NAME: cluster_name})

        s = StandIn(wc, kubelet, asyncio.create_task(kubelet.run(machines)))
        started.append((s, oracle))
        return s

    try:
        yield start
    finally:
        with contextlib.suppress(Exception):
            await r.delete_clusters(timeout=120)
        for s, oracle in started:
            s.task.cancel()
            with contextlib.suppress(BaseException):
                await s.task
            s.workload.stop()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(oracle.close)


async def machines_of(r: RealCapi, *, control_plane: bool | None = None, deployment: str | None = None) -> list[dict[str, Any]]:
    ms = await r.list(CAPI_MACHINE, {LABEL_CLUSTER_NAME: NAME} | ({LABEL_DEPLOYMENT_NAME: deployment} if deployment else {}))
    if control_plane is not None:
        ms = [m for m in ms if (LABEL_CONTROL_PLANE in m["metadata"].get("labels", {})) == control_plane]
    return sorted(ms, key=lambda m: m["metadata"]["name"])


async def wait_node_refs(r: RealCapi, s: StandIn, count: int, *, control_plane: bool | None = None,
                         deployment: str | None = None) -> list[dict[str, Any]]:
    """``count`` Machines of the Cluster (not being deleted; control-plane ones or workers; of
    ``deployment``), each with ``status.nodeRef`` (CAPI found the stand-in's Node by providerID)."""
    async def check() -> list[dict[str, Any]] | None:
        ms = [m for m in await machines_of(r, control_plane=control_plane, deployment=deployment)
              if not m["metadata"].get("deletionTimestamp")]
        return ms if len(ms) == count and all((m.get("status") or {}).get("nodeRef") for m in ms) else None
    try:
        return await eventually(check, timeout=TIMEOUT, what=f"{count} Machines with nodeRef", interval=1.0)
    except AssertionError as e:
        states = {m["metadata"]["name"]: (m["spec"].get("providerID"), (m.get("status") or {}).get("nodeRef"))
                  for m in await machines_of(r)}
        raise AssertionError(f"{e}\nMachines: {states}\n{s.describe()}\n{r.logs()}") from None


async def machine_condition(r: RealCapi, name: str, type_: str) -> dict[str, Any]:
    return condition(await r.get(CAPI_MACHINE, name), type_) or {}


def kubeadm_config_template(name: str, namespace: str) -> dict[str, Any]:
    """A KubeadmConfigTemplate for workers: CABPK renders ``kubeadm join`` from it once the
    control plane is initialized."""
    return {"apiVersion": KUBEADM_CONFIG_TEMPLATE.api_version, "kind": "KubeadmConfigTemplate", "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {"name": "{{ ds.meta_data.hostname }}"}}}}}}


def kubeadm_machine_deployment(name: str, namespace: str, template: str, config_template: str, *, replicas: int) -> dict[str, Any]:
    """A MachineDeployment whose bootstrap data CABPK makes (``bootstrap.configRef``)."""
    md = machine_deployment(name, namespace, NAME, template, replicas=replicas, failure_domain=None, data_secret="unused")
    md["spec"]["template"]["spec"]["version"] = KUBERNETES_VERSION  # CABPK renders join data for this version
    md["spec"]["template"]["spec"]["bootstrap"] = {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate",
                                                                 "name": config_template}}
    return md


async def test_kcp_initializes_on_the_stand_in_then_waits_for_etcd_member_health(real_capi: RealCapi, stand_in: StartStandIn) -> None:
    """Real KCP with managed (stacked) etcd, three replicas, and a worker MachineDeployment whose
    bootstrap data comes from CABPK: KCP's first Machine gets its Node and nodeRef, KCP reads the
    kubeadm-config ConfigMap and initializes the control plane (Cluster ControlPlaneInitialized),
    CABPK creates a bootstrap token in the workload cluster and ``kubeadm join`` data for the
    worker, which banlieue clones and CAPI gives a nodeRef. KCP then stops scaling up: its etcd
    health check port-forwards to the ``etcd-<node>`` Pod through the workload API server, which
    dials the Node's kubelet (on loopback, where nothing listens): EtcdMemberHealthy Unknown."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    host = standin_host(1)
    s = await stand_in(NAME, host)
    vsc = vsphere_cluster(NAME, ns, list(env.vcsims), host)
    vsc["spec"]["controlPlaneFailureDomainSelector"] = {"matchLabels": {"provider": "vcenter-a"}}
    await r.create(vsc)
    for template in ("cp", "workers"):
        await r.create(machine_template(template, ns))
    await r.create(kubeadm_control_plane(f"{NAME}-cp", ns, "cp", replicas=3, version=KUBERNETES_VERSION))
    await r.create(kubeadm_config_template("workers", ns))
    await r.create(kubeadm_machine_deployment(f"{NAME}-md", ns, "workers", "workers", replicas=1))
    await r.create(cluster(NAME, ns, control_plane_ref=ref("KubeadmControlPlane", f"{NAME}-cp", "controlplane.cluster.x-k8s.io")))

    [cp] = await wait_node_refs(r, s, 1, control_plane=True)
    node = s.workload.node(cp["status"]["nodeRef"]["name"])
    assert node is not None and node["spec"]["providerID"] == cp["spec"]["providerID"]
    assert cp["status"]["nodeRef"]["name"] == cp["spec"]["infrastructureRef"]["name"]
    assert (node["metadata"].get("annotations") or {}).get("cluster.x-k8s.io/cluster-name") == NAME  # CAPI wrote to the workload cluster

    async def initialized() -> bool:
        kcp = await r.get(KUBEADM_CONTROL_PLANE, f"{NAME}-cp")
        c = await r.get(CAPI_CLUSTER, NAME)
        return (((kcp.get("status") or {}).get("initialization") or {}).get("controlPlaneInitialized") is True
                and (condition(c, "ControlPlaneInitialized") or {}).get("status") == "True")
    await eventually(initialized, timeout=60, what="KCP and Cluster ControlPlaneInitialized", interval=1.0)

    # CABPK: join data for the worker, with a bootstrap token it created in the workload cluster.
    [worker] = await wait_node_refs(r, s, 1, control_plane=False)
    data = await r.get(SECRET, worker["spec"]["bootstrap"]["dataSecretName"])
    user_data = base64.b64decode(data["data"]["value"]).decode()
    assert "kubeadm join" in user_data and f"apiServerEndpoint: {host}:6443" in user_data, user_data[:600]
    tokens = [t for t in s.workload.call("GET", "/api/v1/namespaces/kube-system/secrets")["items"]
              if t.get("type") == "bootstrap.kubernetes.io/token"]
    token_ids = {base64.b64decode(t["data"]["token-id"]).decode() for t in tokens}
    assert any(f"token: {i}." in user_data for i in token_ids), (token_ids, user_data[:600])
    wvsm = await r.get(VSPHERE_MACHINE, worker["spec"]["infrastructureRef"]["name"])
    [loc] = await env.locate(wvsm["spec"]["providerID"].removeprefix("vsphere://"))
    assert base64.b64decode(loc.extra_config["guestinfo.userdata"]).decode() == user_data

    # Where KCP stops: etcd member health cannot be read without a kubelet to port-forward to.
    async def etcd_unknown() -> dict[str, Any] | None:
        cond = await machine_condition(r, cp["metadata"]["name"], "EtcdMemberHealthy")
        return cond if cond.get("status") == "Unknown" and "Failed to connect to etcd" in cond.get("message", "") else None
    cond = await eventually(etcd_unknown, timeout=90, what="EtcdMemberHealthy Unknown (Failed to connect to etcd)", interval=1.0)
    assert f"{host}:10250" in s.workload.envtest.log_dir.joinpath("kube-apiserver.log").read_text() or "10250" in cond["message"], cond
    for t in ("APIServerPodHealthy", "ControllerManagerPodHealthy", "SchedulerPodHealthy", "EtcdPodHealthy"):
        assert (await machine_condition(r, cp["metadata"]["name"], t)).get("status") == "True", t  # the mirror Pods are read
    await asyncio.sleep(5)
    assert len(await machines_of(r, control_plane=True)) == 1


async def test_kcp_with_external_etcd_scales_past_one_across_failure_domains(real_capi: RealCapi, stand_in: StartStandIn,
                                                                              tmp_path: Path) -> None:
    """With external etcd (``clusterConfiguration.etcd.external``; its endpoint on loopback,
    dialled by kubeadm on a guest only) KCP checks no etcd members: the mirror Pods being Ready,
    it passes its preflight checks and joins Machines until three, one per control-plane failure
    domain (the VSphereCluster's selector makes only vcenter-a's three domains control-plane
    ones); each gets its Node and nodeRef, its VM is in its domain's vCenter, datacenter and
    cluster.

    Then three workers of a MachineDeployment with no failure domain (the simulator's "control
    plane only on control-plane domains" and "one machine per (datacenter, cluster) pair", now
    on real CAPI): banlieue places each in the domain with the fewest machines of the Cluster,
    which are vcenter-b's three; CAPI copies the choice to ``Machine.status.failureDomain``. The
    six Machines then use the six (vCenter, datacenter, cluster) pairs once each. The
    templates' ``status.capacity``/``nodeInfo`` are what the cluster autoscaler reads."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    host = standin_host(2)
    s = await stand_in(NAME, host, local_etcd=False)
    vsc = vsphere_cluster(NAME, ns, list(env.vcsims), host)
    vsc["spec"]["controlPlaneFailureDomainSelector"] = {"matchLabels": {"provider": "vcenter-a"}}
    await r.create(vsc)
    await r.create(machine_template("cp", ns))
    kcp = kubeadm_control_plane(f"{NAME}-cp", ns, "cp", replicas=3, version=KUBERNETES_VERSION)
    kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"] = {"etcd": {"external": {
        "endpoints": [f"https://{host}:2379"], "caFile": "/etc/kubernetes/pki/etcd/ca.crt",
        "certFile": "/etc/kubernetes/pki/apiserver-etcd-client.crt", "keyFile": "/etc/kubernetes/pki/apiserver-etcd-client.key"}}}
    for secret in external_etcd_secrets(NAME, ns, tmp_path / "etcd"):
        await r.create(secret)
    await r.create(kcp)
    await r.create(cluster(NAME, ns, control_plane_ref=ref("KubeadmControlPlane", f"{NAME}-cp", "controlplane.cluster.x-k8s.io")))
    machines = await wait_node_refs(r, s, 3, control_plane=True)
    c = await r.get(CAPI_CLUSTER, NAME)
    domains = {fd["name"]: fd["attributes"] for fd in c["status"]["failureDomains"]}
    cp_domains = {fd["name"] for fd in c["status"]["failureDomains"] if fd.get("controlPlane")}
    assert cp_domains == {n for n, a in domains.items() if a["provider"] == "vcenter-a"} and len(domains) == 6
    assert sorted(m["spec"]["failureDomain"] for m in machines) == sorted(cp_domains)  # one per control-plane domain
    commands = []
    for m in machines:
        data = await r.get(SECRET, m["spec"]["bootstrap"]["dataSecretName"])
        text = base64.b64decode(data["data"]["value"]).decode()
        if "kubeadm join" in text:
            assert "controlPlane:" in text, text[-800:]  # a control-plane join
        commands.append("init" if "kubeadm init" in text else "join" if "kubeadm join" in text else "?")
    assert sorted(commands) == ["init", "join", "join"], commands

    # Workers with no failure domain, placed by banlieue once the control plane is there.
    await r.create(machine_template("workers", ns))
    await r.create(bootstrap_secret("workers-data", ns, NAME, "#cloud-config\n"))
    md = f"{NAME}-md"
    await r.create(machine_deployment(md, ns, NAME, "workers", replicas=3, failure_domain=None, data_secret="workers-data"))
    workers = await wait_node_refs(r, s, 3, deployment=md)

    async def copied() -> list[dict[str, Any]] | None:
        ms = await machines_of(r, deployment=md)
        return ms if len(ms) == 3 and all((m.get("status") or {}).get("failureDomain") for m in ms) else None
    workers = await eventually(copied, timeout=60, what="CAPI copied banlieue's failure domains to the workers", interval=1.0)
    assert all(not m["spec"].get("failureDomain") for m in workers)  # CAPI gave none
    assert sorted(m["status"]["failureDomain"] for m in workers) == sorted(set(domains) - cp_domains)
    pairs = []
    for m in [*machines, *workers]:
        fd = m["spec"].get("failureDomain") or m["status"]["failureDomain"]
        vsm = await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
        check_infra_machine(vsm, step="placed on real CAPI")
        assert vsm["status"]["failureDomain"] == fd
        [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
        assert (loc.vcenter, loc.datacenter, loc.cluster) == (domains[fd]["provider"], domains[fd]["datacenter"], domains[fd]["cluster"])
        pairs.append((loc.vcenter, loc.datacenter, loc.cluster))
    assert len(set(pairs)) == 6, pairs
    assert {n["spec"]["providerID"] for n in s.workload.nodes()} == {m["spec"]["providerID"] for m in [*machines, *workers]}

    # InfraMachineTemplate contract: what the cluster autoscaler reads to scale from zero.
    for name in ("cp", "workers"):
        tmpl = await r.get(VSPHERE_MACHINE_TEMPLATE, name)
        check_infra_machine_template(tmpl, step="autoscaling from zero")
        assert tmpl["status"] == {"capacity": {"cpu": "1", "memory": "512Mi"},
                                  "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, tmpl.get("status")


def machine_health_check(name: str, namespace: str, deployment: str, timeout_seconds: int) -> dict[str, Any]:
    return {"apiVersion": MACHINE_HEALTH_CHECK.api_version, "kind": "MachineHealthCheck", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterName": NAME, "selector": {"matchLabels": {LABEL_DEPLOYMENT_NAME: deployment}},
                     "checks": {"nodeStartupTimeoutSeconds": 600, "unhealthyNodeConditions": [
                         {"type": "Ready", "status": "Unknown", "timeoutSeconds": timeout_seconds},
                         {"type": "Ready", "status": "False", "timeoutSeconds": timeout_seconds}]}}}


def power_off_behind_banlieues_back(r: RealCapi, bios_uuid: str) -> None:
    """PowerOffVM_Task through the test's own pyVmomi session (not banlieue's)."""
    for si in r.env.oracle.sessions.values():
        vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, False)
        if vm is not None:
            task = vm.PowerOffVM_Task()
            while task.info.state not in ("success", "error"):
                time.sleep(0.05)
            assert task.info.state == "success", task.info.error
            return
    raise AssertionError(f"no VM with BIOS UUID {bios_uuid}")


def memory_mb(r: RealCapi, bios_uuid: str) -> int:
    for si in r.env.oracle.sessions.values():
        vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, False)
        if vm is not None:
            return int(vm.config.hardware.memoryMB)
    raise AssertionError(f"no VM with BIOS UUID {bios_uuid}")


async def test_health_check_remediation_then_rolling_update_on_real_capi(real_capi: RealCapi, stand_in: StartStandIn) -> None:
    """A Cluster with a one-Machine KubeadmControlPlane (CAPI's MachineHealthCheck judges
    workers only once the control plane is initialized), a MachineDeployment of two workers
    (bootstrap data from a pre-created Secret) and a MachineHealthCheck on them (Ready
    Unknown/False for 5 s). A VM powered off behind banlieue's back: banlieue powers it on again, but the guest's
    kubelet is gone (the stand-in brings it back only ``REBOOT_SECONDS`` after boot), the Node's
    Ready goes Unknown, the MHC marks the Machine, its MachineSet deletes it and makes another:
    the old VM is destroyed, a new one cloned, which gets a Node and a nodeRef.

    Then a rolling update: the MachineDeployment's infrastructureRef switched to a new
    VSphereMachineTemplate (templates are immutable) replaces every Machine: every old VM
    destroyed, every new VM cloned from the new template (its memory), nothing else left."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    baseline = await env.inventory()
    await env.wait_providers_ready()
    host = standin_host(3)
    s = await stand_in(NAME, host)
    await r.create(vsphere_cluster(NAME, ns, list(env.vcsims), host))
    await r.create(machine_template("cp", ns))
    await r.create(kubeadm_control_plane(f"{NAME}-cp", ns, "cp", replicas=1, version=KUBERNETES_VERSION))
    await r.create(cluster(NAME, ns, control_plane_ref=ref("KubeadmControlPlane", f"{NAME}-cp", "controlplane.cluster.x-k8s.io")))
    await r.create(machine_template("workers-v1", ns, memory_mib=512))
    await r.create(bootstrap_secret("workers-data", ns, NAME, "#cloud-config\n"))
    md = f"{NAME}-md"
    await r.create(machine_deployment(md, ns, NAME, "workers-v1", replicas=2, failure_domain=None, data_secret="workers-data"))
    await r.create(machine_health_check(f"{NAME}-mhc", ns, md, timeout_seconds=5))
    machines = await wait_node_refs(r, s, 2, deployment=md)

    async def all_healthy() -> dict[str, Any] | None:
        st = (await r.get(MACHINE_HEALTH_CHECK, f"{NAME}-mhc")).get("status") or {}
        return st if st.get("expectedMachines") == 2 and st.get("currentHealthy") == 2 else None
    try:
        await eventually(all_healthy, timeout=60, what="MachineHealthCheck: 2 expected, 2 healthy", interval=1.0)
    except AssertionError as e:
        conds = {m["metadata"]["name"]: (m.get("status") or {}).get("conditions") for m in await machines_of(r, deployment=md)}
        raise AssertionError(f"{e}\nMHC: {(await r.get(MACHINE_HEALTH_CHECK, f'{NAME}-mhc')).get('status')}\n"
                             f"Machines: {conds}\n{s.describe()}\n{r.logs()}") from None

    # Remediation of a VM powered off behind banlieue's back.
    victim = machines[0]
    victim_vsm = await r.get(VSPHERE_MACHINE, victim["spec"]["infrastructureRef"]["name"])
    await asyncio.to_thread(power_off_behind_banlieues_back, r, victim_vsm["spec"]["providerID"].removeprefix("vsphere://"))

    async def remediated() -> list[dict[str, Any]] | None:
        ms = [m for m in await machines_of(r, deployment=md) if not m["metadata"].get("deletionTimestamp")]
        fresh = [m for m in ms if m["metadata"]["uid"] != victim["metadata"]["uid"] and (m.get("status") or {}).get("nodeRef")]
        gone = await r.get_or_none(CAPI_MACHINE, victim["metadata"]["name"]) is None
        return fresh if gone and len(fresh) == 2 else None
    try:
        await eventually(remediated, timeout=TIMEOUT, what="the powered-off Machine remediated and replaced", interval=1.0)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{s.describe()}\n{r.logs()}") from None
    assert f"Node {victim['status']['nodeRef']['name']} Ready Unknown" in " ".join(s.kubelet.events)
    assert await env.find_vms(uid=victim_vsm["metadata"]["uid"]) == []  # the old VM is destroyed
    assert s.workload.node(victim["status"]["nodeRef"]["name"]) is None  # CAPI deleted its Node
    assert len(await env.inventory() - baseline) == 3  # the control plane's VM and two workers

    # Rolling update after a template change: every VM replaced.
    before = await machines_of(r, deployment=md)
    old_uids = [(await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"]))["metadata"]["uid"] for m in before]
    await r.create(machine_template("workers-v2", ns, memory_mib=1024))
    await r.patch(MACHINE_DEPLOYMENT, md, {"spec": {"template": {"spec": {"infrastructureRef": ref("VSphereMachineTemplate", "workers-v2")}}}})

    async def rolled() -> list[dict[str, Any]] | None:
        ms = await machines_of(r, deployment=md)
        if len(ms) != 2 or any(m["metadata"].get("deletionTimestamp") or not (m.get("status") or {}).get("nodeRef") for m in ms):
            return None
        if {m["metadata"]["uid"] for m in ms} & {m["metadata"]["uid"] for m in before}:
            return None
        return ms
    try:
        after = await eventually(rolled, timeout=TIMEOUT * 2, what="every Machine replaced by the rolling update", interval=1.0)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{s.describe()}\n{r.logs()}") from None
    for uid in old_uids:
        assert await env.find_vms(uid=uid) == []
    for m in after:
        vsm = await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
        assert vsm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == "workers-v2"
        assert await asyncio.to_thread(memory_mb, r, vsm["spec"]["providerID"].removeprefix("vsphere://")) == 1024
    assert len(await env.inventory() - baseline) == 3  # the control plane's VM and two workers
