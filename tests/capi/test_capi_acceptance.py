"""Issue 7 acceptance: banlieue serves Cluster API v1beta2 unchanged.

Two vCenters (vcsim, 1 datacenter x 3 clusters each), two Providers, ``banlieue manager`` as a
subprocess, the CAPI-core simulator (``capi.simulator``) doing what CAPI core does. Checked: the
VSphereCluster advertises the six (datacenter, cluster) pairs as failure domains; ``replicas: 6``
control-plane Machines land one per pair, each VM in the right vCenter and cluster (asked of
vcsim through pyVmomi), with the bootstrap data in guestinfo, providerID and addresses on the
VSphereMachine and copied to the Machine; ``replicas: 5`` uses five distinct domains; pausing the
Cluster freezes the provider until unpaused; deleting Machines removes the VMs. The v1beta2
InfraMachine / InfraCluster / InfraMachineTemplate contracts are checked at every step
(``capi.contract``).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from banlieue.reconcilers.kinds import (
    CAPI_MACHINE,
    VSPHERE_CLUSTER,
    VSPHERE_MACHINE,
    VSPHERE_MACHINE_TEMPLATE,
)
from banlieue.runtime.errors import NotFound
from banlieue.runtime.kinds import CRD, SECRET
from capi.contract import (
    check_crd,
    check_infra_cluster,
    check_infra_machine,
    check_infra_machine_template,
    provisioned,
)
from capi.env import CapiEnv, eventually
from capi.simulator import CapiSimulator, condition

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]

CLUSTER = "demo"
TEMPLATE = "demo-control-plane"
PROVISION_TIMEOUT = 60.0  # seconds for a batch of clones in vcsim (each is instant; the manager serialises)
PAUSE_OBSERVE_SECONDS = 4.0  # how long a paused machine must stay untouched


async def vsphere_cluster(env: CapiEnv, step: str) -> dict[str, Any]:
    obj = await env.client.get(VSPHERE_CLUSTER, CLUSTER, env.namespace)
    if obj.get("status"):
        check_infra_cluster(obj, step=step)
    return obj


async def vsphere_machines(env: CapiEnv, names: list[str], step: str) -> dict[str, dict[str, Any]]:
    """The VSphereMachines ``names``, each contract-checked once the provider has written status."""
    out = {}
    for name in names:
        obj = await env.client.get(VSPHERE_MACHINE, name, env.namespace)
        if obj.get("status"):
            check_infra_machine(obj, step=step)
        out[name] = obj
    return out


async def bring_up(env: CapiEnv, control_plane_provider: str | None = None) -> tuple[CapiSimulator, dict[str, dict[str, str]]]:
    """Providers Ready, VSphereCluster with six failure domains (control-plane ones: all, or
    only those of ``control_plane_provider``), the CAPI Cluster with its infrastructure
    provisioned, the VSphereMachineTemplate; returns (simulator, failure domain name -> attributes)."""
    for plural in ("vsphereclusters", "vspheremachines", "vspheremachinetemplates"):
        check_crd(await env.client.get(CRD, f"{plural}.infrastructure.banlieue.io"))
    providers = await env.wait_providers_ready()
    await env.create_cluster_infra(CLUSTER, None if control_plane_provider is None
                                   else {"matchLabels": {"provider": control_plane_provider}})

    async def six() -> dict[str, Any] | None:
        obj = await vsphere_cluster(env, "aggregating failure domains")
        fds = (obj.get("status") or {}).get("failureDomains") or []
        return obj if len(fds) == 6 and provisioned(obj) else None

    vsc = await eventually(six, timeout=20, what="VSphereCluster advertising 6 failure domains")
    fds = {fd["name"]: fd for fd in vsc["status"]["failureDomains"]}
    # One per (vCenter, datacenter, cluster), named like the Providers' domains, all control-plane.
    want = {(p, fd["attributes"]["raw"]["datacenter"], fd["attributes"]["raw"]["cluster"]): fd["name"]
            for p, pfds in providers.items() for fd in pfds}
    got = {(fd["attributes"]["provider"], fd["attributes"]["datacenter"], fd["attributes"]["cluster"]): name for name, fd in fds.items()}
    assert got == want and len(got) == 6
    assert {n for n, fd in fds.items() if fd["controlPlane"]} == {
        n for n, fd in fds.items() if control_plane_provider in (None, fd["attributes"]["provider"])}
    assert condition(vsc, "Ready")["status"] == "True"  # type: ignore[index]

    sim = CapiSimulator(env.client, env.namespace, CLUSTER, CLUSTER)
    await sim.create_cluster()
    cluster = await sim.wait_infrastructure_provisioned()
    assert cluster["status"]["failureDomains"] == vsc["status"]["failureDomains"]
    assert cluster["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.100", "port": 6443}
    vsc = await vsphere_cluster(env, "owned by the CAPI Cluster")
    [owner] = [r for r in vsc["metadata"]["ownerReferences"] if r["kind"] == "Cluster"]
    assert (owner["name"], owner["uid"], bool(owner.get("controller"))) == (CLUSTER, cluster["metadata"]["uid"], False)
    assert provisioned(vsc) and len(vsc["status"]["failureDomains"]) == 6  # unchanged by the owner reference

    await env.create_template(TEMPLATE)
    check_infra_machine_template(await env.client.get(VSPHERE_MACHINE_TEMPLATE, TEMPLATE, env.namespace), step="created")
    return sim, {name: fd["attributes"] for name, fd in fds.items()}


async def wait_provisioned(env: CapiEnv, names: list[str], step: str) -> dict[str, dict[str, Any]]:
    async def check() -> dict[str, dict[str, Any]] | None:
        objs = await vsphere_machines(env, names, step)
        return objs if all(provisioned(o) for o in objs.values()) else None
    try:
        return await eventually(check, timeout=PROVISION_TIMEOUT, what=f"{names} provisioned", interval=0.5)
    except AssertionError:
        objs = await vsphere_machines(env, names, step)
        raise AssertionError({n: condition(o, "Ready") for n, o in objs.items()}.__repr__() + "\n" + env.log_tail()) from None


async def verify_placement(env: CapiEnv, sim: CapiSimulator, names: list[str], domains: dict[str, dict[str, str]]) -> None:
    """Each machine's VM is in the vCenter, datacenter and cluster of its Machine's failure
    domain, powered on, with the bootstrap Secret's ``value`` as guestinfo user data."""
    for name in names:
        machine = await env.client.get(CAPI_MACHINE, name, env.namespace)
        vsm = await env.client.get(VSPHERE_MACHINE, name, env.namespace)
        check_infra_machine(vsm, step="provisioned")
        fd = machine["spec"]["failureDomain"]
        assert vsm["status"]["failureDomain"] == fd, (name, vsm["status"].get("failureDomain"), fd)
        bios_uuid = vsm["spec"]["providerID"].removeprefix("vsphere://")
        [loc] = await env.locate(bios_uuid)  # exactly one VM with this BIOS UUID over both vCenters
        attrs = domains[fd]
        assert (loc.vcenter, loc.datacenter, loc.cluster) == (attrs["provider"], attrs["datacenter"], attrs["cluster"]), (name, loc)
        assert loc.name == name and loc.power_state == "poweredOn"
        secret = await env.client.get(SECRET, machine["spec"]["bootstrap"]["dataSecretName"], env.namespace)
        assert loc.extra_config.get("guestinfo.userdata.encoding") == "base64"
        assert base64.b64decode(loc.extra_config["guestinfo.userdata"]) == base64.b64decode(secret["data"]["value"])


async def report_ips_and_wait_surfaced(env: CapiEnv, names: list[str], first: int = 0) -> None:
    """Make vcsim report a guest IP per VM; wait until the VSphereMachine is Ready with that
    address and CAPI (the simulator) copied providerID, addresses and provisioned to the Machine."""
    ips = {}
    for i, name in enumerate(names, start=first):
        vsm = await env.client.get(VSPHERE_MACHINE, name, env.namespace)
        ips[name] = f"10.0.{i}.10"
        await env.set_guest_ip(vsm["spec"]["providerID"].removeprefix("vsphere://"), ips[name])

    async def surfaced() -> bool:
        for name in names:
            vsm = (await vsphere_machines(env, [name], "address reported"))[name]
            machine = await env.client.get(CAPI_MACHINE, name, env.namespace)
            addrs = vsm["status"].get("addresses") or []
            if {"type": "InternalIP", "address": ips[name]} not in addrs or condition(vsm, "Ready")["status"] != "True":  # type: ignore[index]
                return False
            m_status = machine.get("status") or {}
            if (machine["spec"].get("providerID") != vsm["spec"]["providerID"] or m_status.get("addresses") != addrs
                    or (m_status.get("initialization") or {}).get("infrastructureProvisioned") is not True):
                return False
        return True

    await eventually(surfaced, timeout=30, what="addresses surfaced on VSphereMachines and copied to Machines", interval=0.5)


async def delete_and_verify(env: CapiEnv, sim: CapiSimulator) -> None:
    """Delete every Machine (reverse order); every VM is then gone from both vCenters."""
    uids = {m["metadata"]["name"]: (await env.client.get(VSPHERE_MACHINE, m["metadata"]["name"], env.namespace))["metadata"]["uid"]
            for m in await sim.machines()}
    deleted = await sim.delete_all_machines(timeout=30, observe=lambda o: check_infra_machine(o, step="deleting"))
    assert sorted(deleted) == sorted(uids)
    for name, uid in uids.items():
        assert await env.find_vms(name=name, uid=uid) == [], name
        with pytest.raises(NotFound):
            await env.client.get(CAPI_MACHINE, name, env.namespace)
    assert await sim.machines() == []
    check_infra_cluster(await env.client.get(VSPHERE_CLUSTER, CLUSTER, env.namespace), step="machines deleted")


async def test_control_plane_of_six_lands_one_per_datacenter_cluster_pair(capi_env: CapiEnv) -> None:
    env = capi_env
    sim, domains = await bring_up(env)
    async with sim.running():
        names = await sim.scale(TEMPLATE, 6, control_plane=True, prefix="demo-cp")
        assert len(names) == 6
        for name in names:  # minted as CAPI does: the Machine is the controller owner, cloned from the template
            vsm = await env.client.get(VSPHERE_MACHINE, name, env.namespace)
            assert vsm["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == CLUSTER
            assert vsm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == TEMPLATE
        await wait_provisioned(env, names, "cloning")
        machines = {n: await env.client.get(CAPI_MACHINE, n, env.namespace) for n in names}
        assert sorted(m["spec"]["failureDomain"] for m in machines.values()) == sorted(domains)  # one per pair
        await verify_placement(env, sim, names, domains)
        pairs = {(domains[m["spec"]["failureDomain"]]["provider"], domains[m["spec"]["failureDomain"]]["cluster"]) for m in machines.values()}
        assert len(pairs) == 6
        await report_ips_and_wait_surfaced(env, names)
        check_infra_machine_template(await env.client.get(VSPHERE_MACHINE_TEMPLATE, TEMPLATE, env.namespace), step="machines running")
        await delete_and_verify(env, sim)
    assert sim.sync_errors == [] or all("Conflict" in e for e in sim.sync_errors), sim.sync_errors


async def test_five_replicas_use_five_domains_and_pause_freezes_work(capi_env: CapiEnv) -> None:
    env = capi_env
    sim, domains = await bring_up(env)
    async with sim.running():
        names = await sim.scale(TEMPLATE, 5, control_plane=True, prefix="demo-cp")
        await wait_provisioned(env, names, "cloning")
        used = [(await env.client.get(CAPI_MACHINE, n, env.namespace))["spec"]["failureDomain"] for n in names]
        assert len(set(used)) == 5 and set(used) < set(domains)
        await verify_placement(env, sim, names, domains)
        await report_ips_and_wait_surfaced(env, names)

        # Pause the Cluster: every VSphereMachine reports Paused, then nothing moves.
        await sim.pause()

        async def all_paused() -> bool:
            objs = await vsphere_machines(env, names, "pausing")
            return all((condition(o, "Paused") or {}).get("status") == "True" for o in objs.values())

        await eventually(all_paused, timeout=15, what="Paused True on every VSphereMachine")
        before = {n: o["metadata"]["resourceVersion"] for n, o in (await vsphere_machines(env, names, "paused")).items()}
        extra = "demo-cp-paused"
        machine = await sim.create_machine(extra, TEMPLATE, control_plane=True)
        [spare] = set(domains) - set(used)
        assert machine["spec"]["failureDomain"] == spare  # CAPI still spreads: the sixth domain
        await eventually(lambda: _paused(env, extra), timeout=15, what=f"{extra} Paused True")
        await asyncio.sleep(PAUSE_OBSERVE_SECONDS)
        vsm = (await vsphere_machines(env, [extra], "created while paused"))[extra]
        assert (condition(vsm, "Paused") or {}).get("status") == "True"
        assert not vsm["spec"].get("providerID") and not provisioned(vsm) and not vsm["metadata"].get("finalizers")
        assert await env.find_vms(name=extra, uid=vsm["metadata"]["uid"]) == []  # no clone while paused
        after = {n: o["metadata"]["resourceVersion"] for n, o in (await vsphere_machines(env, names, "paused")).items()}
        assert after == before  # no write to the provisioned machines while paused
        assert not (await env.client.get(CAPI_MACHINE, extra, env.namespace))["spec"].get("providerID")

        await sim.unpause()
        await wait_provisioned(env, [extra], "unpaused")
        await verify_placement(env, sim, [extra], domains)
        objs = await vsphere_machines(env, [*names, extra], "unpaused")
        await eventually(lambda: _none_paused(env, [*names, extra]), timeout=15, what="Paused False everywhere")
        assert len(objs) == 6
        await report_ips_and_wait_surfaced(env, [extra], first=5)

        # Deleting a Machine of a paused Cluster: the VM stays until the Cluster is unpaused.
        await sim.pause()
        await eventually(lambda: _paused(env, extra), timeout=15, what=f"{extra} Paused True again")
        uid = (await env.client.get(VSPHERE_MACHINE, extra, env.namespace))["metadata"]["uid"]
        with pytest.raises(AssertionError, match="still present"):
            await sim.delete_machine(extra, timeout=PAUSE_OBSERVE_SECONDS, observe=lambda o: check_infra_machine(o, step="deleting while paused"))
        assert len(await env.find_vms(name=extra, uid=uid)) == 1
        await sim.unpause()
        await sim.delete_machine(extra, timeout=30, observe=lambda o: check_infra_machine(o, step="deleting after unpause"))
        assert await env.find_vms(name=extra, uid=uid) == []
        await delete_and_verify(env, sim)


async def _paused(env: CapiEnv, name: str) -> bool:
    vsm = (await vsphere_machines(env, [name], "paused"))[name]
    return (condition(vsm, "Paused") or {}).get("status") == "True"


async def _none_paused(env: CapiEnv, names: list[str]) -> bool:
    objs = await vsphere_machines(env, names, "unpaused")
    return all((condition(o, "Paused") or {}).get("status") == "False" for o in objs.values())


async def test_machine_waits_for_bootstrap_data(capi_env: CapiEnv) -> None:
    env = capi_env
    sim, domains = await bring_up(env)
    name = "demo-cp-late"
    async with sim.running():
        await sim.create_machine(name, TEMPLATE, control_plane=True, bootstrap_ready=False)

        async def waiting() -> dict[str, Any] | None:
            vsm = (await vsphere_machines(env, [name], "waiting for bootstrap data"))[name]
            return vsm if (condition(vsm, "Ready") or {}).get("reason") == "WaitingForBootstrapData" else None

        vsm = await eventually(waiting, timeout=15, what=f"{name} Ready reason WaitingForBootstrapData")
        assert not provisioned(vsm) and not vsm["spec"].get("providerID")
        assert await env.find_vms(name=name, uid=vsm["metadata"]["uid"]) == []  # nothing cloned without bootstrap data

        await sim.provide_bootstrap(name, "#cloud-config\nhostname: late\n")
        await wait_provisioned(env, [name], "bootstrap data provided")
        await verify_placement(env, sim, [name], domains)  # guestinfo carries the late Secret's value
        await delete_and_verify(env, sim)


INFRA_CLUSTER_RESUME_TIMEOUT = 15.0  # seconds to notice Cluster.spec.paused changes (a watch: about one second)


async def test_paused_cluster_freezes_the_infra_cluster(capi_env: CapiEnv) -> None:
    """Cluster.spec.paused alone makes the VSphereCluster report Paused; a spec change made
    meanwhile (a control-plane selector naming one vCenter) is not acted on; after unpausing it
    is, and CAPI copies the new failure domains to the Cluster."""
    env = capi_env
    sim, domains = await bring_up(env)
    async with sim.running():
        await sim.pause()

        async def paused_by_owner() -> dict[str, Any] | None:
            obj = await vsphere_cluster(env, "Cluster paused")
            return obj if (condition(obj, "Paused") or {}).get("status") == "True" else None

        # Cluster.spec.paused alone (no change to the VSphereCluster) surfaces as Paused.
        await eventually(paused_by_owner, timeout=INFRA_CLUSTER_RESUME_TIMEOUT, what="VSphereCluster Paused True after the Cluster paused")
        await env.client.patch(VSPHERE_CLUSTER, CLUSTER, env.namespace,
                               {"spec": {"controlPlaneFailureDomainSelector": {"matchLabels": {"provider": "vcenter-a"}}}})

        await asyncio.sleep(2.0)  # the spec change is seen (for_ watch) but must not be acted on
        obj = await vsphere_cluster(env, "paused")
        assert (condition(obj, "Paused") or {}).get("status") == "True"
        assert all(fd["controlPlane"] is True for fd in obj["status"]["failureDomains"])  # the change waits
        assert (await sim.cluster())["status"]["failureDomains"] == obj["status"]["failureDomains"]

        await sim.unpause()

        async def resumed() -> dict[str, Any] | None:
            obj = await vsphere_cluster(env, "unpaused")
            cp = sorted(fd["name"] for fd in obj["status"]["failureDomains"] if fd["controlPlane"])
            return obj if (condition(obj, "Paused") or {}).get("status") == "False" and len(cp) == 3 else None

        # The controller role watches CAPI Clusters: unpausing is noticed at once, not on a recheck.
        obj = await eventually(resumed, timeout=INFRA_CLUSTER_RESUME_TIMEOUT, what="VSphereCluster resumed after unpausing the Cluster")
        assert {fd["name"] for fd in obj["status"]["failureDomains"] if fd["controlPlane"]} == {
            n for n, a in domains.items() if a["provider"] == "vcenter-a"}

        async def copied() -> bool:
            return bool((await sim.cluster())["status"]["failureDomains"] == obj["status"]["failureDomains"])

        await eventually(copied, timeout=10, what="Cluster.status.failureDomains copied after unpausing")


async def test_control_plane_only_on_control_plane_domains(capi_env: CapiEnv) -> None:
    """With a VSphereCluster whose control-plane selector names one vCenter, three control-plane
    Machines land one per cluster of that vCenter; three workers go to the other vCenter's
    domains (the least used)."""
    env = capi_env
    sim, domains = await bring_up(env, control_plane_provider="vcenter-a")
    async with sim.running():
        cps = await sim.scale(TEMPLATE, 3, control_plane=True, prefix="demo-cp")
        workers = await sim.scale(TEMPLATE, 3, control_plane=False, prefix="demo-md")
        await wait_provisioned(env, [*cps, *workers], "cloning")
        await verify_placement(env, sim, [*cps, *workers], domains)
        for names, vcenter in ((cps, "vcenter-a"), (workers, "vcenter-b")):
            fds = [(await env.client.get(CAPI_MACHINE, n, env.namespace))["spec"]["failureDomain"] for n in names]
            assert sorted(fds) == sorted(n for n, a in domains.items() if a["provider"] == vcenter), (names, fds)
        await delete_and_verify(env, sim)
