"""VSphereMachine on the CAPI path (issue 7) and ``--watch-filter``: a real Manager against the
API-server double with minimal CAPI CRDs (tests/capi/crds.py) and vcsim."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from pyVmomi import vim
from reconciler_harness import b64, eventually, vms_with_uid
from test_vspheremachine_vcsim import (  # sibling module: shared helpers
    FIN,
    make_provider,
    ready_of,
    running,
    wait_reason,
)

from banlieue.reconcilers.kinds import CAPI_CLUSTER, CAPI_MACHINE, PROVIDER, SECRET, VSPHERE_MACHINE
from banlieue.runtime.client import Client
from banlieue.runtime.errors import NotFound
from banlieue.testing.vcsim import VcsimProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from capi.crds import CAPI_CRDS

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]


def datacenter_of(vm: Any) -> str:
    obj = vm.parent
    while obj is not None and not isinstance(obj, vim.Datacenter):
        obj = obj.parent
    return str(obj.name) if obj is not None else ""


def paused_of(obj: dict[str, Any]) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Paused":
            return str(c["status"])
    return None


async def get(client: Client, ns: str, name: str) -> dict[str, Any]:
    return await client.get(VSPHERE_MACHINE, name, ns)


async def test_capi_machine_lifecycle(apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any) -> None:
    for crd in CAPI_CRDS:
        apiserver.server.load_crd(crd)
    # One template spans two vCenters: two Providers, the failure domain picks one.
    await make_provider(client, ns, vcsim, name="vca", fds=(("vca-dc0-c0", "DC0", "DC0_C0"),))
    await make_provider(client, ns, vcsim, name="vcb", fds=(("vcb-dc1-c1", "DC1", "DC1_C1"),))
    await client.create(CAPI_CLUSTER, {"apiVersion": CAPI_CLUSTER.api_version, "kind": "Cluster", "metadata": {"name": "c1", "namespace": ns},
                                       "spec": {"paused": True}})
    created = await client.create(VSPHERE_MACHINE, {
        "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
        "metadata": {"name": "w1", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 2048}})
    uid = created["metadata"]["uid"]
    async with running(apiserver, ns):
        obj = await wait_reason(client, ns, "w1", "WaitingForOwner")
        assert not obj["metadata"].get("finalizers")  # no owner yet: nothing to clean up

        cm = await client.create(CAPI_MACHINE, {
            "apiVersion": CAPI_MACHINE.api_version, "kind": "Machine", "metadata": {"name": "cm1", "namespace": ns},
            "spec": {"clusterName": "c1", "failureDomain": "vcb-dc1-c1", "bootstrap": {},
                     "infrastructureRef": {"apiGroup": "infrastructure.banlieue.io", "kind": "VSphereMachine", "name": "w1"}}})
        await client.patch(VSPHERE_MACHINE, "w1", ns, {"metadata": {"ownerReferences": [
            {"apiVersion": CAPI_MACHINE.api_version, "kind": "Machine", "name": "cm1", "uid": cm["metadata"]["uid"], "controller": True}]}})
        obj = await wait_reason(client, ns, "w1", "Paused")
        assert paused_of(obj) == "True" and not obj["metadata"].get("finalizers")

        await client.patch(CAPI_CLUSTER, "c1", ns, {"spec": {"paused": False}})
        obj = await wait_reason(client, ns, "w1", "WaitingForClusterInfrastructure")
        assert paused_of(obj) == "False" and obj["metadata"]["finalizers"] == [FIN]

        await client.patch_status(CAPI_CLUSTER, "c1", ns, {"status": {"initialization": {"infrastructureProvisioned": True}}})
        await wait_reason(client, ns, "w1", "WaitingForBootstrapData")

        await client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cm1-boot", "namespace": ns},
                                     "data": {"value": b64("#cloud-config\nruncmd: [k0s]\n"), "format": b64("cloud-config")}})
        await client.patch(CAPI_MACHINE, "cm1", ns, {"spec": {"bootstrap": {"dataSecretName": "cm1-boot"}}})
        obj = await wait_reason(client, ns, "w1", "WaitingForIPAddress", "Provisioned", timeout=40)
        assert obj["status"]["failureDomain"] == "vcb-dc1-c1"
        [vm] = vms_with_uid(si, uid)
        assert datacenter_of(vm) == "DC1"
        # Provisioned once the guest reports a usable address (issue 20 item 2).
        vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value="192.0.2.9")]))
        obj = await wait_reason(client, ns, "w1", "Provisioned", timeout=40)
        assert obj["status"]["initialization"] == {"provisioned": True}
        assert obj["spec"]["providerID"] == f"vsphere://{vm.config.uuid}"

        # Paused (annotation on the machine): deletion waits; unpaused: it completes.
        await client.patch(VSPHERE_MACHINE, "w1", ns, {"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}})
        await eventually(lambda: _paused(client, ns, "w1"), what="Paused True")
        await client.delete(VSPHERE_MACHINE, "w1", ns)
        await asyncio.sleep(1.0)
        obj = await get(client, ns, "w1")
        assert obj["metadata"]["finalizers"] == [FIN] and len(vms_with_uid(si, uid)) == 1
        await client.patch(VSPHERE_MACHINE, "w1", ns, {"metadata": {"annotations": {"cluster.x-k8s.io/paused": None}}})
        await eventually(lambda: _gone(client, ns, "w1"), what="deleted")
        assert vms_with_uid(si, uid) == []
    assert (await client.get(PROVIDER, "vcb", ns))["metadata"]["name"] == "vcb"


async def _paused(client: Client, ns: str, name: str) -> bool:
    return paused_of(await get(client, ns, name)) == "True"


async def _gone(client: Client, ns: str, name: str) -> bool:
    try:
        await get(client, ns, name)
    except NotFound:
        return True
    return False


async def test_watch_filter_scopes_machines(apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess) -> None:
    await make_provider(client, ns, vcsim)
    base = {"providerRef": {"name": "vc1"}, "datacenter": "DC0", "cluster": "DC0_C0", "template": "no-such-template",
            "numCPUs": 1, "memoryMiB": 512}
    for name, labels in (("mine", {"cluster.x-k8s.io/watch-filter": "team-a"}), ("other", {})):
        await client.create(VSPHERE_MACHINE, {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
                                              "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": base})
    async with running(apiserver, ns, watch_filter="team-a"):
        await wait_reason(client, ns, "mine", "TemplateNotFound")
        await asyncio.sleep(1.0)
        other = await get(client, ns, "other")
        assert ready_of(other) is None and not other["metadata"].get("finalizers")


async def test_an_owner_reference_to_another_machine_gets_no_bootstrap_data(
    apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any,
) -> None:
    """Issue 23, found by the hostile-tenant pass: whoever may write VSphereMachines can add an
    ownerReference naming any CAPI Machine of the namespace (its UID included, if known). Only
    the VSphereMachine the Machine's ``spec.infrastructureRef`` names is its infrastructure
    machine: another one waits for an owner and never gets that Machine's bootstrap data (a
    join token of the victim's cluster) into a VM of its own."""
    for crd in CAPI_CRDS:
        apiserver.server.load_crd(crd)
    await make_provider(client, ns, vcsim, name="vca", fds=(("vca-dc0-c0", "DC0", "DC0_C0"),))
    await client.create(CAPI_CLUSTER, {"apiVersion": CAPI_CLUSTER.api_version, "kind": "Cluster", "metadata": {"name": "c1", "namespace": ns},
                                       "spec": {}})
    await client.patch_status(CAPI_CLUSTER, "c1", ns, {"status": {"initialization": {"infrastructureProvisioned": True}}})
    await client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cm1-boot", "namespace": ns},
                                 "data": {"value": b64("#cloud-config\nruncmd: [kubeadm join --token secret]\n")}})
    cm = await client.create(CAPI_MACHINE, {
        "apiVersion": CAPI_MACHINE.api_version, "kind": "Machine", "metadata": {"name": "cm1", "namespace": ns},
        "spec": {"clusterName": "c1", "failureDomain": "vca-dc0-c0", "bootstrap": {"dataSecretName": "cm1-boot"},
                 "infrastructureRef": {"apiGroup": "infrastructure.banlieue.io", "kind": "VSphereMachine", "name": "w1"}}})
    owner = {"apiVersion": CAPI_MACHINE.api_version, "kind": "Machine", "name": "cm1", "uid": cm["metadata"]["uid"], "controller": True}
    thief = await client.create(VSPHERE_MACHINE, {
        "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
        "metadata": {"name": "thief", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}, "ownerReferences": [owner]},
        "spec": {"template": "ubuntu-22.04", "numCPUs": 1, "memoryMiB": 512}})
    async with running(apiserver, ns):
        obj = await wait_reason(client, ns, "thief", "WaitingForOwner")
        assert not obj["metadata"].get("finalizers")
        # The real one (named by the Machine's infrastructureRef) goes on: the check is not a
        # refusal of every owner.
        await client.create(VSPHERE_MACHINE, {
            "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
            "metadata": {"name": "w1", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}, "ownerReferences": [owner]},
            "spec": {"template": "ubuntu-22.04", "numCPUs": 1, "memoryMiB": 512}})
        await wait_reason(client, ns, "w1", "WaitingForIPAddress", "Provisioned", timeout=40)
        assert ready_of(await get(client, ns, "thief"))[1] == "WaitingForOwner"  # type: ignore[index]
        assert vms_with_uid(si, thief["metadata"]["uid"]) == []
