"""Issue 17 acceptance: real Cluster API v1.14.2 (core, kubeadm bootstrap and control-plane
managers from ``make capi``) drives banlieue on a real kube-apiserver (envtest).

Two vCenters (vcsim, 1 datacenter x 3 clusters each), two Providers, ``banlieue manager`` with its
own RBAC. No simulator: every Cluster / MachineDeployment / MachineSet / Machine transition here
is made by CAPI's controllers. Each VM's location is checked with an independent pyVmomi session.
Every endpoint given to CAPI or banlieue is on loopback (``RealCapi.create`` checks it before
creating): the control-plane endpoints are 127.x addresses nobody listens on, which CAPI's
cluster cache would only dial once a control plane is initialized.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from banlieue.api.rbac import MANAGER_SERVICE_ACCOUNT
from banlieue.reconcilers.kinds import (
    CAPI_CLUSTER,
    CAPI_MACHINE,
    VSPHERE_CLUSTER,
    VSPHERE_MACHINE,
    VSPHERE_MACHINE_TEMPLATE,
)
from banlieue.runtime.kinds import SECRET
from banlieue.testing import capi as capi_testing
from banlieue.testing.capi import NetworkRuleViolation
from capi.contract import check_infra_cluster, check_infra_machine, check_infra_machine_template, provisioned
from capi.env import eventually
from capi.real import (
    LABEL_CLUSTER_NAME,
    LABEL_CONTROL_PLANE,
    LABEL_DEPLOYMENT_NAME,
    MACHINE_DEPLOYMENT,
    RealCapi,
    bootstrap_secret,
    cluster,
    cluster_class_objects,
    kubeadm_control_plane,
    machine_deployment,
    machine_template,
    ref,
    topology_cluster,
    vsphere_cluster,
)
from capi.simulator import condition

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(420)]

NAME = "demo"
TEMPLATE = "demo-workers"
DATA_SECRET = "demo-workers-bootstrap"
USER_DATA = "#cloud-config\nhostname: from-a-pre-created-secret\n"
PROVISION_TIMEOUT = 120.0  # seconds for CAPI + banlieue to bring a batch of Machines to provisioned on a loaded 2-core machine
PAUSE_OBSERVE_SECONDS = 5.0


async def wait_cluster_provisioned(r: RealCapi, domains: int) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        c = await r.get(CAPI_CLUSTER, NAME)
        st = c.get("status") or {}
        ok = (st.get("initialization") or {}).get("infrastructureProvisioned") is True and len(st.get("failureDomains") or []) == domains
        return c if ok else None
    try:
        return await eventually(check, timeout=60, what="Cluster infrastructureProvisioned with its failure domains", interval=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}\nCluster: {(await r.get(CAPI_CLUSTER, NAME)).get('status')}\n{r.logs()}") from None


async def machines_of(r: RealCapi, deployment: str | None = None, *, control_plane: bool = False) -> list[dict[str, Any]]:
    """The Cluster's Machines (of ``deployment``; only control-plane ones when ``control_plane``)."""
    labels = {LABEL_CLUSTER_NAME: NAME} | ({LABEL_DEPLOYMENT_NAME: deployment} if deployment else {})
    ms = await r.list(CAPI_MACHINE, labels)
    if control_plane:
        ms = [m for m in ms if LABEL_CONTROL_PLANE in m["metadata"].get("labels", {})]
    return sorted(ms, key=lambda m: m["metadata"]["name"])


async def wait_machines_provisioned(r: RealCapi, count: int, deployment: str | None = None, *,
                                    control_plane: bool = False) -> list[dict[str, Any]]:
    """``count`` Machines (of ``deployment``, or control-plane ones) whose providerID CAPI copied
    from their VSphereMachine (the InfraMachine reported ``initialization.provisioned``)."""
    async def check() -> list[dict[str, Any]] | None:
        ms = [m for m in await machines_of(r, deployment, control_plane=control_plane) if not m["metadata"].get("deletionTimestamp")]
        return ms if len(ms) == count and all(m["spec"].get("providerID") for m in ms) else None
    try:
        return await eventually(check, timeout=PROVISION_TIMEOUT, what=f"{count} Machines with providerID", interval=1.0)
    except AssertionError as e:
        states = {m["metadata"]["name"]: (m["spec"].get("providerID"), (m.get("status") or {}).get("phase")) for m in await machines_of(r, deployment)}
        vsms = {o["metadata"]["name"]: condition(o, "Ready") for o in await r.list(VSPHERE_MACHINE)}
        raise AssertionError(f"{e}\nMachines: {states}\nVSphereMachines: {vsms}\n{r.logs()}") from None


async def verify_placed(r: RealCapi, machine: dict[str, Any], domains: dict[str, dict[str, Any]], fd: str) -> dict[str, Any]:
    """The Machine's VSphereMachine is provisioned in failure domain ``fd``: its VM is the only
    one with that BIOS UUID over both vCenters, in the fd's vCenter, datacenter and cluster,
    powered on, with the bootstrap Secret's value as guestinfo user data; CAPI copied providerID
    and the failure domain to the Machine. Returns the VSphereMachine."""
    env = r.env
    infra = machine["spec"]["infrastructureRef"]
    assert (infra["apiGroup"], infra["kind"]) == ("infrastructure.banlieue.io", "VSphereMachine"), infra
    vsm = await r.get(VSPHERE_MACHINE, infra["name"])
    check_infra_machine(vsm, step="provisioned by real CAPI")
    [owner] = [o for o in vsm["metadata"]["ownerReferences"] if o.get("controller")]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Machine", machine["metadata"]["name"], machine["metadata"]["uid"])
    # A blocking reference: under OwnerReferencesPermissionEnforcement CAPI needed update on
    # machines/finalizers to set it (test_block_owner_deletion_needs_the_owners_finalizers_rbac).
    assert owner.get("blockOwnerDeletion") is True
    assert vsm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == TEMPLATE
    assert vsm["status"]["failureDomain"] == fd, (vsm["metadata"]["name"], vsm["status"].get("failureDomain"), fd)
    assert machine["spec"]["providerID"] == vsm["spec"]["providerID"]
    [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
    attrs = domains[fd]["attributes"]
    assert (loc.vcenter, loc.datacenter, loc.cluster) == (attrs["provider"], attrs["datacenter"], attrs["cluster"]), (fd, loc)
    assert loc.name == vsm["metadata"]["name"] and loc.power_state == "poweredOn"
    assert loc.extra_config.get("guestinfo.userdata.encoding") == "base64"
    assert base64.b64decode(loc.extra_config["guestinfo.userdata"]).decode() == USER_DATA
    return vsm


async def report_ips(r: RealCapi, machines: list[dict[str, Any]], first: int) -> None:
    """vcsim reports a guest IP per VM; CAPI copies the VSphereMachine's addresses and failure
    domain into the Machine's status."""
    ips = {}
    for i, m in enumerate(machines, start=first):
        vsm = await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
        ips[m["metadata"]["name"]] = f"10.0.{i}.10"  # a guest address vcsim reports; nothing dials it
        await r.env.set_guest_ip(vsm["spec"]["providerID"].removeprefix("vsphere://"), ips[m["metadata"]["name"]])

    async def copied() -> bool:
        for m in machines:
            name = m["metadata"]["name"]
            machine = await r.get(CAPI_MACHINE, name)
            st = machine.get("status") or {}
            if {"type": "InternalIP", "address": ips[name]} not in (st.get("addresses") or []):
                return False
            if st.get("failureDomain") != machine["spec"].get("failureDomain") or not (st.get("initialization") or {}).get("infrastructureProvisioned"):
                return False
        return True

    await eventually(copied, timeout=60, what="addresses and failure domain copied by CAPI to the Machines", interval=1.0)


async def test_network_rule_refuses_a_cluster_endpoint_off_loopback(real_capi: RealCapi) -> None:
    """The check runs before anything reaches CAPI: the sample's 10.0.0.100 is refused with the
    reason, and nothing is created."""
    r = real_capi
    with pytest.raises(NetworkRuleViolation, match=r"VSphereCluster/demo: spec.controlPlaneEndpoint.host '10.0.0.100' is not on loopback"):
        await r.create(vsphere_cluster(NAME, r.env.namespace, list(r.env.vcsims), "10.0.0.100"))
    assert await r.get_or_none(VSPHERE_CLUSTER, NAME) is None


def test_block_owner_deletion_needs_the_owners_finalizers_rbac(capi_managers: capi_testing.CapiEnvironment, tmp_path: Path) -> None:
    """The API server of the CAPI tier enforces OwnerReferencesPermissionEnforcement: an
    ownerReference with ``blockOwnerDeletion`` is refused to a ServiceAccount that may not update
    the owner's ``finalizers``, and allowed once it may. CAPI's MachineSet / KCP controllers set
    a blocking controller reference from each Machine to its VSphereMachine (asserted in
    ``verify_placed``), so every real-CAPI test here also checks that CAPI's own config/rbac
    allows it on banlieue's objects. banlieue's manager may set the only blocking reference it
    sets (VirtualMachine -> its VSphereMachine): the same authorizer question the admission
    plugin asks, for its ServiceAccount."""
    admin = capi_managers.kubeconfig
    ns = f"obd-{uuid.uuid4().hex[:6]}"
    kubectl = capi_testing.kubectl
    kubectl(admin, "create", "namespace", ns)
    try:
        kubectl(admin, "create", "serviceaccount", "setter", "-n", ns)
        kubectl(admin, "create", "role", "setter", "-n", ns, "--verb=create,get", "--resource=configmaps")
        kubectl(admin, "create", "rolebinding", "setter", "-n", ns, "--role=setter", f"--serviceaccount={ns}:setter")
        kubectl(admin, "create", "configmap", "owner", "-n", ns)
        owner = json.loads(kubectl(admin, "get", "configmap", "owner", "-n", ns, "-o", "json"))
        setter = capi_testing.token_kubeconfig(admin, ns, "setter", tmp_path / "setter.kubeconfig")

        def dependent(block: bool) -> str:
            ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}
            return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dependent", "namespace": ns, "ownerReferences": [ref]}})

        kubectl(setter, "create", "--dry-run=server", "-f", "-", stdin=dependent(False))  # a plain owner reference: allowed
        with pytest.raises(RuntimeError, match="cannot set blockOwnerDeletion"):
            kubectl(setter, "create", "--dry-run=server", "-f", "-", stdin=dependent(True))
        kubectl(admin, "create", "role", "finalizers", "-n", ns, "--verb=update", "--resource=configmaps/finalizers")
        kubectl(admin, "create", "rolebinding", "finalizers", "-n", ns, "--role=finalizers", f"--serviceaccount={ns}:setter")

        def allowed() -> bool:  # RBAC changes reach the authorizer's cache within a moment
            try:
                kubectl(setter, "create", "--dry-run=server", "-f", "-", stdin=dependent(True))
            except RuntimeError:
                return False
            return True
        deadline = time.monotonic() + 10
        while not allowed():
            assert time.monotonic() < deadline, "blockOwnerDeletion still refused with update on configmaps/finalizers"
            time.sleep(0.2)
        manager = f"system:serviceaccount:banlieue-system:{MANAGER_SERVICE_ACCOUNT}"
        assert kubectl(admin, "auth", "can-i", "update", "virtualmachines.banlieue.io", "--subresource=finalizers", "--as", manager).strip() == "yes"
    finally:
        kubectl(admin, "delete", "namespace", ns, "--wait=false")


async def test_machine_deployments_per_failure_domain_on_real_capi(real_capi: RealCapi) -> None:
    r, env = real_capi, real_capi.env
    ns = env.namespace
    baseline = await env.inventory()
    providers = await env.wait_providers_ready()
    await r.create(vsphere_cluster(NAME, ns, list(env.vcsims), "127.17.0.1"))
    await r.create(cluster(NAME, ns))

    # CAPI core: InfraCluster provisioned -> Cluster provisioned, endpoint and failure domains copied.
    c = await wait_cluster_provisioned(r, domains=6)
    vsc = await r.get(VSPHERE_CLUSTER, NAME)
    check_infra_cluster(vsc, step="provisioned under real CAPI")
    assert provisioned(vsc)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.1", "port": 6443}
    assert c["status"]["failureDomains"] == vsc["status"]["failureDomains"]
    # Without a topology CAPI sets a plain owner reference (controller: false) on the InfraCluster.
    [owner] = [o for o in vsc["metadata"]["ownerReferences"] if o["kind"] == "Cluster"]
    assert (owner["name"], owner["uid"], bool(owner.get("controller"))) == (NAME, c["metadata"]["uid"], False)
    assert vsc["metadata"]["labels"][LABEL_CLUSTER_NAME] == NAME
    domains = {fd["name"]: fd for fd in c["status"]["failureDomains"]}
    want = {(p, fd["attributes"]["raw"]["datacenter"], fd["attributes"]["raw"]["cluster"]) for p, pfds in providers.items() for fd in pfds}
    assert {(fd["attributes"]["provider"], fd["attributes"]["datacenter"], fd["attributes"]["cluster"]) for fd in domains.values()} == want

    # One MachineDeployment per failure domain, bootstrap data from a pre-created Secret.
    await r.create(machine_template(TEMPLATE, ns))
    await r.create(bootstrap_secret(DATA_SECRET, ns, NAME, USER_DATA))
    deployment_fd = {f"{NAME}-md-{i}": fd for i, fd in enumerate(sorted(domains))}
    for md, fd in deployment_fd.items():
        await r.create(machine_deployment(md, ns, NAME, TEMPLATE, replicas=1, failure_domain=fd, data_secret=DATA_SECRET))
    machines = await wait_machines_provisioned(r, 6)
    by_md = {m["metadata"]["labels"][LABEL_DEPLOYMENT_NAME]: m for m in machines}
    assert sorted(by_md) == sorted(deployment_fd)
    for md, m in by_md.items():
        assert m["spec"]["failureDomain"] == deployment_fd[md]
        assert m["spec"]["bootstrap"]["dataSecretName"] == DATA_SECRET
        await verify_placed(r, m, domains, deployment_fd[md])
    await report_ips(r, machines, first=0)
    check_infra_machine_template(await r.get(VSPHERE_MACHINE_TEMPLATE, TEMPLATE), step="machines running")
    assert len(await env.inventory() - baseline) == 6

    # Scale down: the Machine, its VSphereMachine and its VM go.
    md0 = f"{NAME}-md-0"
    gone = by_md[md0]
    gone_vsm = await r.get(VSPHERE_MACHINE, gone["spec"]["infrastructureRef"]["name"])
    await r.patch(MACHINE_DEPLOYMENT, md0, {"spec": {"replicas": 0}})

    async def scaled_down() -> bool:
        return not await machines_of(r, md0) and await r.get_or_none(VSPHERE_MACHINE, gone_vsm["metadata"]["name"]) is None
    await eventually(scaled_down, timeout=PROVISION_TIMEOUT, what=f"{md0} scaled to 0", interval=1.0)
    assert await env.find_vms(uid=gone_vsm["metadata"]["uid"]) == []

    # Deleting a Machine: its MachineSet replaces it; the old VM is destroyed, the new one cloned in the same domain.
    md1 = f"{NAME}-md-1"
    old = by_md[md1]
    old_vsm = await r.get(VSPHERE_MACHINE, old["spec"]["infrastructureRef"]["name"])
    await env.client.delete(CAPI_MACHINE, old["metadata"]["name"], ns)

    async def replaced() -> dict[str, Any] | None:
        ms = [m for m in await machines_of(r, md1) if m["metadata"]["uid"] != old["metadata"]["uid"] and m["spec"].get("providerID")]
        gone_old = await r.get_or_none(CAPI_MACHINE, old["metadata"]["name"]) is None
        return ms[0] if ms and gone_old else None
    new = await eventually(replaced, timeout=PROVISION_TIMEOUT, what=f"Machine of {md1} replaced", interval=1.0)
    assert await env.find_vms(uid=old_vsm["metadata"]["uid"]) == []
    await verify_placed(r, new, domains, deployment_fd[md1])

    # Cluster.spec.paused: banlieue reports Paused on its objects and writes nothing, no VM
    # changes, and a VSphereCluster spec change waits until the Cluster is unpaused.
    await r.patch(CAPI_CLUSTER, NAME, {"spec": {"paused": True}})
    vsm_names = [m["spec"]["infrastructureRef"]["name"] for m in await machines_of(r)]

    async def all_paused() -> bool:
        objs = [await r.get(VSPHERE_MACHINE, n) for n in vsm_names] + [await r.get(VSPHERE_CLUSTER, NAME)]
        return all((condition(o, "Paused") or {}).get("status") == "True" for o in objs)
    await eventually(all_paused, timeout=30, what="Paused True on the VSphereCluster and every VSphereMachine")
    before = {n: (await r.get(VSPHERE_MACHINE, n))["metadata"]["resourceVersion"] for n in vsm_names}
    vms_before = await env.inventory()
    # A VSphereCluster spec change made meanwhile (control-plane domains: vcenter-a's only) waits.
    await r.patch(VSPHERE_CLUSTER, NAME, {"spec": {"controlPlaneFailureDomainSelector": {"matchLabels": {"provider": "vcenter-a"}}}})
    await asyncio.sleep(PAUSE_OBSERVE_SECONDS)
    assert {n: (await r.get(VSPHERE_MACHINE, n))["metadata"]["resourceVersion"] for n in vsm_names} == before
    assert await env.inventory() == vms_before
    vsc = await r.get(VSPHERE_CLUSTER, NAME)
    assert all(fd["controlPlane"] is True for fd in vsc["status"]["failureDomains"])  # not acted on while paused
    assert (await r.get(CAPI_CLUSTER, NAME))["status"]["failureDomains"] == vsc["status"]["failureDomains"]
    await r.patch(CAPI_CLUSTER, NAME, {"spec": {"paused": False}})

    async def none_paused() -> bool:
        objs = [await r.get(VSPHERE_MACHINE, n) for n in vsm_names] + [await r.get(VSPHERE_CLUSTER, NAME)]
        return all((condition(o, "Paused") or {}).get("status") == "False" for o in objs)
    await eventually(none_paused, timeout=30, what="Paused False after unpausing")

    async def selector_applied_and_copied() -> bool:
        fds = (await r.get(VSPHERE_CLUSTER, NAME))["status"]["failureDomains"]
        cp = {fd["name"] for fd in fds if fd["controlPlane"]}
        return cp == {n for n, fd in domains.items() if fd["attributes"]["provider"] == "vcenter-a"} and \
            (await r.get(CAPI_CLUSTER, NAME))["status"]["failureDomains"] == fds
    await eventually(selector_applied_and_copied, timeout=30, what="the selector applied after unpausing and copied by CAPI", interval=1.0)

    # Deleting the Cluster: CAPI deletes every MachineDeployment, Machine and the VSphereCluster; every VM is destroyed.
    await env.client.delete(CAPI_CLUSTER, NAME, ns)

    async def all_gone() -> bool:
        return (await r.get_or_none(CAPI_CLUSTER, NAME) is None and not await r.list(CAPI_MACHINE) and not await r.list(VSPHERE_MACHINE)
                and await r.get_or_none(VSPHERE_CLUSTER, NAME) is None)
    await eventually(all_gone, timeout=PROVISION_TIMEOUT, what="Cluster and every Machine/VSphereMachine/VSphereCluster deleted", interval=1.0)
    assert await env.inventory() == baseline
    assert await r.get_or_none(SECRET, DATA_SECRET) is not None  # the user's Secret is the user's


KUBERNETES_VERSION = "v1.34.4"
CP_TEMPLATE = "demo-control-plane"


async def test_kubeadm_control_plane_first_machine_in_a_control_plane_domain(real_capi: RealCapi) -> None:
    """Real KCP + CABPK: with control-plane failure domains only in vcenter-a, KCP's first
    Machine lands in one of them, CABPK's kubeadm init cloud-config reaches the VM's guestinfo,
    and CAPI copies providerID and failure domain. KCP then waits for the workload API server on
    the Cluster's loopback endpoint (nobody serves it here), so it creates no second Machine."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    vsc = vsphere_cluster(NAME, ns, list(env.vcsims), "127.17.0.2")
    vsc["spec"]["controlPlaneFailureDomainSelector"] = {"matchLabels": {"provider": "vcenter-a"}}
    await r.create(vsc)
    await r.create(machine_template(CP_TEMPLATE, ns))
    await r.create(kubeadm_control_plane(f"{NAME}-cp", ns, CP_TEMPLATE, replicas=3, version=KUBERNETES_VERSION))
    await r.create(cluster(NAME, ns, control_plane_ref=ref("KubeadmControlPlane", f"{NAME}-cp", "controlplane.cluster.x-k8s.io")))
    c = await wait_cluster_provisioned(r, domains=6)
    domains = {fd["name"]: fd for fd in c["status"]["failureDomains"]}
    cp_domains = {n for n, fd in domains.items() if fd.get("controlPlane")}
    assert cp_domains == {n for n, fd in domains.items() if fd["attributes"]["provider"] == "vcenter-a"} and len(cp_domains) == 3

    [machine] = await wait_machines_provisioned(r, 1)
    assert machine["metadata"]["labels"].get("cluster.x-k8s.io/control-plane") == ""
    fd = machine["spec"]["failureDomain"]
    assert fd in cp_domains, (fd, cp_domains)
    vsm = await r.get(VSPHERE_MACHINE, machine["spec"]["infrastructureRef"]["name"])
    check_infra_machine(vsm, step="KCP machine provisioned")
    assert vsm["status"]["failureDomain"] == fd and machine["spec"]["providerID"] == vsm["spec"]["providerID"]
    [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
    attrs = domains[fd]["attributes"]
    assert (loc.vcenter, loc.datacenter, loc.cluster) == (attrs["provider"], attrs["datacenter"], attrs["cluster"])
    secret = await r.get(SECRET, machine["spec"]["bootstrap"]["dataSecretName"])
    user_data = base64.b64decode(loc.extra_config["guestinfo.userdata"]).decode()
    assert user_data == base64.b64decode(secret["data"]["value"]).decode()
    assert user_data.startswith("## template: jinja\n#cloud-config") and "kubeadm init" in user_data, user_data[:400]
    assert "controlPlaneEndpoint: 127.17.0.2:6443" in user_data

    # KCP waits for the control plane it cannot reach: still one Machine a while later.
    await asyncio.sleep(PAUSE_OBSERVE_SECONDS)
    assert len(await machines_of(r)) == 1


async def test_cluster_class_topology_on_banlieue_templates(real_capi: RealCapi) -> None:
    """ClusterClass on VSphereClusterTemplate + VSphereMachineTemplate: the topology controller
    creates the VSphereCluster (controller-owned by the Cluster) and the KCP, whose first Machine
    banlieue provisions; its server-side-apply dry runs of banlieue's templates and objects are
    not rejected (TopologyReconciled True); the worker MachineDeployment exists and waits for
    kubeadm join data (the control plane is never initialized here)."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    for obj in cluster_class_objects("banlieue", ns, list(env.vcsims), "127.17.0.3"):
        await r.create(obj)
    await r.create(topology_cluster(NAME, ns, "banlieue", KUBERNETES_VERSION, control_plane_replicas=1, workers=1))
    c = await wait_cluster_provisioned(r, domains=6)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.3", "port": 6443}
    vsc_ref = c["spec"]["infrastructureRef"]
    assert (vsc_ref["apiGroup"], vsc_ref["kind"]) == ("infrastructure.banlieue.io", "VSphereCluster")
    vsc = await r.get(VSPHERE_CLUSTER, vsc_ref["name"])
    check_infra_cluster(vsc, step="created by the topology controller")
    [owner] = [o for o in vsc["metadata"]["ownerReferences"] if o["kind"] == "Cluster"]
    assert owner["controller"] is True  # with a topology CAPI controls the InfraCluster
    assert vsc["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == "banlieue"

    [machine] = await wait_machines_provisioned(r, 1, control_plane=True)
    vsm = await r.get(VSPHERE_MACHINE, machine["spec"]["infrastructureRef"]["name"])
    check_infra_machine(vsm, step="topology control-plane machine")
    assert vsm["status"]["failureDomain"] == machine["spec"]["failureDomain"]
    [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
    assert loc.power_state == "poweredOn"

    async def topology_reconciled() -> dict[str, Any] | None:
        obj = await r.get(CAPI_CLUSTER, NAME)
        cond = condition(obj, "TopologyReconciled") or {}
        return cond if cond.get("status") == "True" else None
    try:
        await eventually(topology_reconciled, timeout=60, what="Cluster TopologyReconciled True", interval=1.0)
    except AssertionError:
        cond = condition(await r.get(CAPI_CLUSTER, NAME), "TopologyReconciled")
        raise AssertionError(f"TopologyReconciled: {cond}\n{r.logs()}") from None
    [md] = await r.list(MACHINE_DEPLOYMENT, {LABEL_CLUSTER_NAME: NAME})
    assert md["spec"]["template"]["spec"]["infrastructureRef"]["kind"] == "VSphereMachineTemplate"
    # The worker's VSphereMachine exists and waits for kubeadm join data (CABPK: only once the
    # control plane is initialized, which needs a workload API server this test does not run).
    async def worker_waiting() -> dict[str, Any] | None:
        workers = [m for m in await machines_of(r) if LABEL_CONTROL_PLANE not in m["metadata"]["labels"]]
        if len(workers) != 1:
            return None
        wvsm = await r.get_or_none(VSPHERE_MACHINE, workers[0]["spec"]["infrastructureRef"]["name"])
        # WaitingForOwner first, while the Machine controller sets its owner reference.
        return wvsm if wvsm and (condition(wvsm, "Ready") or {}).get("reason") == "WaitingForBootstrapData" else None
    wvsm = await eventually(worker_waiting, timeout=60, what="the worker's VSphereMachine WaitingForBootstrapData", interval=1.0)
    assert await env.find_vms(uid=wvsm["metadata"]["uid"]) == []


async def test_machine_deployment_without_failure_domain_is_placed_by_banlieue(real_capi: RealCapi) -> None:
    """Issue 17 item 6: a MachineDeployment with no failure domain whose template names no
    Provider. banlieue places each Machine among the VSphereCluster's failure domains (spread:
    three Machines, three domains), reports it in VSphereMachine status.failureDomain, and real
    CAPI copies it to Machine.status.failureDomain; the VM is in that domain."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    await r.create(vsphere_cluster(NAME, ns, list(env.vcsims), "127.17.0.4"))
    await r.create(cluster(NAME, ns))
    c = await wait_cluster_provisioned(r, domains=6)
    domains = {fd["name"]: fd for fd in c["status"]["failureDomains"]}
    await r.create(machine_template(TEMPLATE, ns))
    await r.create(bootstrap_secret(DATA_SECRET, ns, NAME, USER_DATA))
    md = f"{NAME}-md-anywhere"
    await r.create(machine_deployment(md, ns, NAME, TEMPLATE, replicas=3, failure_domain=None, data_secret=DATA_SECRET))
    machines = await wait_machines_provisioned(r, 3, md)
    chosen = []
    for m in machines:
        assert not m["spec"].get("failureDomain")  # CAPI gave none
        vsm = await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
        fd = vsm["status"].get("failureDomain")
        assert fd in domains, (vsm["metadata"]["name"], fd, condition(vsm, "Ready"))
        await verify_placed(r, m, domains, fd)
        chosen.append(fd)
    assert len(set(chosen)) == 3, chosen  # spread: one Machine per domain while domains are free

    async def copied() -> bool:
        ms = {m["metadata"]["name"]: m for m in await machines_of(r, md)}
        return all((ms[m["metadata"]["name"]].get("status") or {}).get("failureDomain") == fd for m, fd in zip(machines, chosen, strict=True))
    await eventually(copied, timeout=60, what="CAPI copied the chosen failure domains to Machine.status.failureDomain", interval=1.0)


async def test_machine_in_a_domain_nobody_advertises_is_a_condition_and_deletes_cleanly(real_capi: RealCapi) -> None:
    """A MachineDeployment naming a failure domain the VSphereCluster does not publish: the
    VSphereMachine reports FailureDomainNotFound through Ready, nothing is cloned, and scaling
    the MachineDeployment to zero removes Machine and VSphereMachine. Alongside, a second Cluster
    on an externally managed VSphereCluster (``check_externally_managed``)."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    baseline = await env.inventory()
    await env.wait_providers_ready()
    # An externally managed VSphereCluster (cluster.x-k8s.io/managed-by), created first: banlieue
    # never writes its status, even once it has provisioned the other one.
    external = vsphere_cluster(EXTERNAL, ns, list(env.vcsims), "127.17.0.6")
    external["metadata"]["annotations"] = {"cluster.x-k8s.io/managed-by": "an-external-system"}
    await r.create(external)
    await r.create(cluster(EXTERNAL, ns))
    await r.create(vsphere_cluster(NAME, ns, list(env.vcsims), "127.17.0.5"))
    await r.create(cluster(NAME, ns))
    c = await wait_cluster_provisioned(r, domains=6)
    await check_externally_managed(r, c["status"]["failureDomains"])
    await r.create(machine_template(TEMPLATE, ns))
    await r.create(bootstrap_secret(DATA_SECRET, ns, NAME, USER_DATA))
    md = f"{NAME}-md-lost"
    await r.create(machine_deployment(md, ns, NAME, TEMPLATE, replicas=1, failure_domain="no-such-domain", data_secret=DATA_SECRET))

    async def failed() -> dict[str, Any] | None:
        for m in await machines_of(r, md):
            vsm = await r.get_or_none(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
            ready = condition(vsm, "Ready") or {} if vsm else {}
            if ready.get("reason") == "FailureDomainNotFound":
                return vsm
        return None
    vsm = await eventually(failed, timeout=PROVISION_TIMEOUT, what="VSphereMachine Ready False FailureDomainNotFound", interval=1.0)
    assert "no-such-domain" in condition(vsm, "Ready")["message"]  # type: ignore[index]
    check_infra_machine(vsm, step="unknown failure domain")
    assert await env.find_vms(uid=vsm["metadata"]["uid"]) == [] and await env.inventory() == baseline

    await r.patch(MACHINE_DEPLOYMENT, md, {"spec": {"replicas": 0}})

    async def gone() -> bool:
        return not await machines_of(r, md) and await r.get_or_none(VSPHERE_MACHINE, vsm["metadata"]["name"]) is None
    await eventually(gone, timeout=PROVISION_TIMEOUT, what=f"{md} scaled to 0", interval=1.0)
    assert await env.inventory() == baseline
    assert not (await r.get(VSPHERE_CLUSTER, EXTERNAL))["status"].get("conditions")  # still nothing of banlieue's


EXTERNAL = "external"


async def check_externally_managed(r: RealCapi, domains: list[dict[str, Any]]) -> None:
    """InfraCluster contract, externally managed infrastructure: the VSphereCluster ``EXTERNAL``
    (annotated ``cluster.x-k8s.io/managed-by``) has no status from banlieue; once the external
    system (the test) writes ``initialization.provisioned`` and failure domains, real CAPI
    copies them and the endpoint into its Cluster, and banlieue still writes nothing."""
    vsc = await r.get(VSPHERE_CLUSTER, EXTERNAL)
    assert not vsc.get("status"), vsc.get("status")
    assert not ((await r.get(CAPI_CLUSTER, EXTERNAL)).get("status") or {}).get("initialization", {}).get("infrastructureProvisioned")
    theirs = {"initialization": {"provisioned": True}, "failureDomains": domains[:2]}
    await r.env.client.patch_status(VSPHERE_CLUSTER, EXTERNAL, r.env.namespace, {"status": theirs})

    async def copied() -> dict[str, Any] | None:
        c = await r.get(CAPI_CLUSTER, EXTERNAL)
        st = c.get("status") or {}
        ok = (st.get("initialization") or {}).get("infrastructureProvisioned") is True and st.get("failureDomains") == domains[:2]
        return c if ok else None
    c = await eventually(copied, timeout=60, what=f"Cluster {EXTERNAL} provisioned from the externally written status", interval=0.5)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.6", "port": 6443}
    assert (await r.get(VSPHERE_CLUSTER, EXTERNAL))["status"] == theirs
