"""Issue 7 acceptance, the part real Cluster API cannot reach: a paused Cluster's machines
minted or deleted by someone other than CAPI (``capi.simulator`` docstring says why).

Two vCenters (vcsim, 1 datacenter x 3 clusters each), two Providers, ``banlieue manager`` as a
subprocess, the CAPI-core simulator (``capi.simulator``) doing what CAPI core does. Checked: the
VSphereCluster advertises the six (datacenter, cluster) pairs as failure domains and CAPI's
copy reaches the Cluster; a machine's VM is in its failure domain's vCenter and cluster (asked
of vcsim through pyVmomi) with the bootstrap data in guestinfo; a VSphereMachine minted while
the Cluster is paused is not cloned, one deleted while paused keeps its VM, until unpaused. The
v1beta2 InfraMachine / InfraCluster / InfraMachineTemplate contracts are checked at every step
(``capi.contract``). Placement across failure domains, scale-up past one control-plane Machine,
pause of provisioned machines and of the VSphereCluster, and late bootstrap data run on real
CAPI (``test_real_capi.py``, ``test_real_capi_workload.py``).
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


async def bring_up(env: CapiEnv) -> tuple[CapiSimulator, dict[str, dict[str, str]]]:
    """Providers Ready, VSphereCluster with six failure domains (all control-plane ones), the
    CAPI Cluster with its infrastructure provisioned, the VSphereMachineTemplate; returns
    (simulator, failure domain name -> attributes)."""
    for plural in ("vsphereclusters", "vspheremachines", "vspheremachinetemplates"):
        check_crd(await env.client.get(CRD, f"{plural}.infrastructure.banlieue.io"))
    providers = await env.wait_providers_ready()
    await env.create_cluster_infra(CLUSTER, None)

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
    assert all(fd["controlPlane"] for fd in fds.values())
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


async def test_machines_minted_or_deleted_while_paused_wait_for_unpause(capi_env: CapiEnv) -> None:
    """What only a paused Cluster's outside world does (real CAPI's controllers are paused with
    the Cluster; ``clusterctl move`` creates objects in a paused cluster): a VSphereMachine
    minted while paused is not cloned until unpaused; one deleted while paused keeps its VM
    until unpaused; the running machine is not written to meanwhile."""
    env = capi_env
    sim, domains = await bring_up(env)
    async with sim.running():
        names = await sim.scale(TEMPLATE, 1, control_plane=True, prefix="demo-cp")
        await wait_provisioned(env, names, "cloning")
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
        await sim.create_machine(extra, TEMPLATE, control_plane=True)
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
        assert len(objs) == 2
        await report_ips_and_wait_surfaced(env, [extra], first=1)

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
