"""The VirtualMachine controller in a real Manager against the API-server double (CRDs from
config/crd). The test plays the provider role itself: it writes Provider.status.failureDomains,
Provider.status.images (the VMImage rows) and the VSphereMachine's status over the API (``Env``, in
../controller_role.py, shared with the VSphereCluster tests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import pytest
from controller_role import Env, cond, eventually, fd, running_controllers

from banlieue.reconcilers.kinds import (
    FIELD_MANAGER_CONTROLLER,
    PROVIDER,
    VIRTUAL_MACHINE,
    VM_CLASS,
    VM_IMAGE,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.virtualmachine import controller as virtualmachine
from banlieue.runtime.errors import Invalid, NotFound
from banlieue.runtime.kinds import EVENT

FIN_VSM = "infrastructure.banlieue.io/vspheremachine"


@pytest.fixture
async def env(apiserver: Any) -> AsyncIterator[Env]:
    async with running_controllers(apiserver) as e:
        await e.provider("vc-a", [fd("vc-a-dc0-c0", "c0", mem=8192), fd("vc-a-dc0-c1", "c1", mem=16384)], {"site": "a"})
        await e.provider("vc-b", [fd("vc-b-dc0-c0", "c0", mem=4096)], {"site": "b"})
        await e.image_ready(["vc-a", "vc-b"])
        yield e


async def test_schedules_applies_machine_mirrors_status_and_is_ready_only_once_provisioned(env: Env) -> None:
    created = await env.vm("web-1", userData={"secretRef": {"name": "web-1-userdata"}})
    vsm = await eventually(lambda: env.get_vsm("web-1"))
    meta, spec = vsm["metadata"], vsm["spec"]
    assert meta["labels"] == {"app": "web", "banlieue.io/owned-by": "web-1", "banlieue.io/provider": "vc-a"}
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "VirtualMachine", "web-1", created["metadata"]["uid"], True, True)
    assert spec["providerRef"] == {"name": "vc-a"} and spec["failureDomain"] == "vc-a-dc0-c1"  # most free memory
    assert (spec["template"], spec["numCPUs"], spec["memoryMiB"], spec["firmware"], spec["powerState"]) == (
        "ubuntu-2204", 2, 4096, "efi", "PoweredOn")
    assert spec["disks"] == [{"name": "os", "sizeGiB": 20, "provisioning": "thin", "storageClass": "standard"}]
    assert spec["network"] == {"devices": [{"name": "eth0", "networkClass": "default", "dhcp4": True}]}
    assert spec["bootstrapDataSecretRef"] == {"name": "web-1-userdata", "key": "user-data"}

    async def scheduled() -> dict[str, Any] | None:
        vm = await env.get_vm("web-1")
        return vm if (vm.get("status") or {}).get("scheduled") else None

    vm = await eventually(scheduled)
    assert vm["metadata"]["finalizers"] == ["banlieue.io/virtualmachine"]
    status = vm["status"]
    assert {k: status["scheduled"][k] for k in ("providerName", "providerClass", "failureDomain")} == {
        "providerName": "vc-a", "providerClass": "vsphere", "failureDomain": "vc-a-dc0-c1"}
    assert status["scheduled"]["resolvedStorage"] == [{"name": "os", "storageClass": "standard", "datastore": "LocalDS_0"}]
    assert status["scheduled"]["resolvedNetworks"] == [{"name": "eth0", "networkClass": "default", "portGroup": "VM Network"}]
    assert status["infrastructureRef"] == {"apiGroup": "infrastructure.banlieue.io", "kind": "VSphereMachine", "name": "web-1"}
    assert status["observedGeneration"] == vm["metadata"]["generation"]
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds["Scheduled"] == ("True", "Scheduled") and conds["Ready"] == ("False", "WaitingForInfrastructure")

    # Provisioning steps are not mirrored one by one (write budget): the VM is written again
    # only when the machine is Ready (or fails).
    await env.machine_status("web-1", {"conditions": [cond("Ready", "False", "Cloning")], "powerState": "PoweredOff"})
    await env.machine_status("web-1", {"conditions": [cond("Ready", "False", "WaitingForIPAddress")],
                                       "powerState": "PoweredOn", "initialization": {"provisioned": True}},
                             provider_id="vsphere://web-1-uuid")
    await asyncio.sleep(0.5)
    assert "observedPowerState" not in (await env.get_vm("web-1"))["status"]
    assert (await env.condition("web-1", "Ready"))["reason"] == "WaitingForInfrastructure"

    await env.provision("web-1")
    ready = await eventually(lambda: _is(env, "web-1", "Ready", "True"))
    assert ready["reason"] == "Ready"
    status = (await env.get_vm("web-1"))["status"]
    assert status["initialization"] == {"provisioned": True}
    assert status["addresses"] == [{"type": "InternalIP", "address": "10.0.0.5"}]
    assert status["providerID"] == "vsphere://web-1-uuid" and status["observedPowerState"] == "PoweredOn"
    assert (await env.condition("web-1", "InfrastructureReady"))["reason"] == "Provisioned"

    writes = env.controller_writes("web-1")
    print("controller writes for web-1:", *writes, sep="\n  ")
    # finalizer + VSphereMachine apply + status when scheduled + status when Ready.
    assert len(writes) == 4, writes

    # No-op reconciles write nothing: a class relabel and a Provider capacity change re-enqueue the VM.
    await env.client.patch(VM_CLASS, "small", None, {"metadata": {"labels": {"touched": "1"}}})
    await env.provider_status("vc-a", [fd("vc-a-dc0-c0", "c0", mem=8000), fd("vc-a-dc0-c1", "c1", mem=12000)])
    await asyncio.sleep(1.0)
    assert env.controller_writes("web-1") == writes


async def _has(env: Env, name: str, field: str, value: Any) -> bool:
    return bool(((await env.get_vm(name)).get("status") or {}).get(field) == value)


async def _is(env: Env, name: str, type_: str, status: str, reason: str | None = None) -> dict[str, Any] | None:
    cond = await env.condition(name, type_)
    ok = cond.get("status") == status and (reason is None or cond.get("reason") == reason)
    return cond if ok else None


async def test_powered_off_desired_state_is_propagated(env: Env) -> None:
    await env.vm("off-1", desiredPowerState="PoweredOff")
    vsm = await eventually(lambda: env.get_vsm("off-1"))
    assert vsm["spec"]["powerState"] == "PoweredOff"
    await env.provision("off-1", power="PoweredOn")
    cond = await eventually(lambda: _is(env, "off-1", "Ready", "False", "WaitingForPowerState"))
    assert "desired PoweredOff, observed PoweredOn" in cond["message"]
    await env.machine_status("off-1", {"powerState": "PoweredOff"})
    await eventually(lambda: _is(env, "off-1", "Ready", "True"))
    await env.client.patch(VIRTUAL_MACHINE, "off-1", env.namespace, {"spec": {"desiredPowerState": "PoweredOn"}})
    await eventually(lambda: _machine_field(env, "off-1", "powerState", "PoweredOn"))


async def _machine_field(env: Env, name: str, field: str, value: Any) -> bool:
    return bool((await env.get_vsm(name))["spec"].get(field) == value)


async def _placed_on(env: Env, name: str, provider: str) -> dict[str, Any] | None:
    try:
        vsm = await env.get_vsm(name)
    except NotFound:
        return None
    return vsm if vsm["spec"]["providerRef"]["name"] == provider and not vsm["metadata"].get("deletionTimestamp") else None


async def _scheduled_on(env: Env, name: str, provider: str) -> bool:
    return bool(((await env.get_vm(name)).get("status") or {}).get("scheduled", {}).get("providerName") == provider)


async def test_automatic_migration_waits_for_the_old_machine_then_recreates(env: Env) -> None:
    await env.vm("mig-1", migrationPolicy="automatic", placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    old = await eventually(lambda: _placed_on(env, "mig-1", "vc-a"))
    # The provider's finalizer keeps the old machine while it is torn down.
    await env.client.patch(VSPHERE_MACHINE, "mig-1", env.namespace, {"metadata": {"finalizers": ["test/provider"]}})
    await env.client.patch(VIRTUAL_MACHINE, "mig-1", env.namespace,
                           {"spec": {"placement": {"providerSelector": {"matchLabels": {"site": "b"}}}}})
    await eventually(lambda: _is(env, "mig-1", "Migrating", "True", "ProviderChanged"))
    warned = await eventually(lambda: _event(env, "MigrationDestroysVM"))
    assert warned["type"] == "Warning" and "destroying VM mig-1 and its disks on vc-a/" in warned["note"]
    deleting = await eventually(lambda: env.get_vsm("mig-1"))
    assert deleting["metadata"].get("deletionTimestamp") and deleting["spec"]["providerRef"]["name"] == "vc-a"
    assert (await env.get_vm("mig-1"))["status"]["scheduled"]["providerName"] == "vc-a"  # not placed again yet
    await env.client.patch(VSPHERE_MACHINE, "mig-1", env.namespace, {"metadata": {"finalizers": None}})
    new = await eventually(lambda: _placed_on(env, "mig-1", "vc-b"))
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and new["metadata"]["labels"]["banlieue.io/provider"] == "vc-b"
    # The new machine is created first, then the VM's status says where it is scheduled (the
    # status write of the same reconcile): on kube-apiserver a read can fall between the two.
    await eventually(lambda: _scheduled_on(env, "mig-1", "vc-b"))
    assert (await env.condition("mig-1", "Migrating"))["status"] == "True"  # until the new machine is Ready
    await env.provision("mig-1")
    await eventually(lambda: _is(env, "mig-1", "Migrating", "False", "NotMigrating"))
    await eventually(lambda: _is(env, "mig-1", "Ready", "True"))


def _applies(env: Env, name: str) -> list[tuple[int, str]]:
    """(status, query) of every server-side apply the controller sent to VSphereMachine ``name``."""
    return [(r.status, r.query) for r in env.server.request_log(method="PATCH", path_contains=f"/vspheremachines/{name}")
            if r.path.endswith(f"/vspheremachines/{name}") and parse_qs(r.query).get("fieldManager") == [FIELD_MANAGER_CONTROLLER]]


async def _deleting(env: Env, name: str) -> dict[str, Any] | None:
    vsm = await env.get_vsm(name)
    return vsm if vsm["metadata"].get("deletionTimestamp") else None


async def test_machine_is_born_with_the_provider_finalizer_and_never_regains_it_while_deleting(env: Env) -> None:
    """ADR 0011: the controller's apply carries the provider's finalizer (so the provider sends
    no finalizer patch); the controller's field manager owns that value, yet a removal by
    merge patch (the provider after destroying the VM, or a user) is allowed; a removal by hand
    causes no fight; a machine being deleted is never applied to, and kube would refuse the
    finalizer anyway."""
    ns = env.namespace
    await env.vm("fin-1", migrationPolicy="automatic", placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    vsm = await eventually(lambda: _placed_on(env, "fin-1", "vc-a"))
    assert vsm["metadata"]["finalizers"] == [FIN_VSM]
    [entry] = [m for m in vsm["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER_CONTROLLER and m["operation"] == "Apply"]
    assert f'v:"{FIN_VSM}"' in entry["fieldsV1"]["f:metadata"]["f:finalizers"]

    # Removed by hand on a live machine: allowed, and the controller does not write for it...
    await env.client.patch(VSPHERE_MACHINE, "fin-1", ns, {"metadata": {"finalizers": None}})
    applies = _applies(env, "fin-1")
    await asyncio.sleep(0.5)
    assert _applies(env, "fin-1") == applies
    # ...its next apply (the VM's labels changed) carries it again, without a conflict.
    await env.client.patch(VIRTUAL_MACHINE, "fin-1", ns, {"metadata": {"labels": {"app": "web", "tier": "1"}}})

    async def relabelled() -> dict[str, Any] | None:
        vsm = await env.get_vsm("fin-1")
        return vsm if vsm["metadata"]["labels"].get("tier") == "1" else None

    assert (await eventually(relabelled))["metadata"]["finalizers"] == [FIN_VSM]

    # Migration: the controller deletes the machine; another finalizer keeps it after the
    # provider drops its own with a merge patch, although the controller's apply owns that value.
    await env.client.patch(VSPHERE_MACHINE, "fin-1", ns, {"metadata": {"finalizers": [FIN_VSM, "test/hold"]}})
    await env.client.patch(VIRTUAL_MACHINE, "fin-1", ns, {"spec": {"placement": {"providerSelector": {"matchLabels": {"site": "b"}}}}})
    deleting = await eventually(lambda: _deleting(env, "fin-1"))
    released = await env.client.remove_finalizer(VSPHERE_MACHINE, deleting, FIN_VSM)
    assert released["metadata"]["finalizers"] == ["test/hold"]
    # A VM change that would re-apply a live machine: nothing is applied to this one.
    applies = _applies(env, "fin-1")
    await env.client.patch(VIRTUAL_MACHINE, "fin-1", ns, {"metadata": {"labels": {"app": "web", "tier": "2"}}})
    await asyncio.sleep(1.0)
    assert _applies(env, "fin-1") == applies
    assert (await env.get_vsm("fin-1"))["metadata"]["finalizers"] == ["test/hold"]
    # The API server (double, as kube) refuses the finalizer on an object being deleted, and the
    # controller recognises that answer should its cache ever lag behind the deletion.
    body = {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
            "metadata": {"name": "fin-1", "namespace": ns, "finalizers": [FIN_VSM]}}
    with pytest.raises(Invalid) as refused:
        await env.client.apply(VSPHERE_MACHINE, body, field_manager=FIELD_MANAGER_CONTROLLER, force=True)
    assert "no new finalizers can be added if the object is being deleted" in refused.value.message
    assert virtualmachine._finalizer_refused(refused.value)

    # Released: the new machine on site b is born with the finalizer too.
    await env.client.patch(VSPHERE_MACHINE, "fin-1", ns, {"metadata": {"finalizers": None}})
    new = await eventually(lambda: _placed_on(env, "fin-1", "vc-b"))
    assert new["metadata"]["finalizers"] == [FIN_VSM]


async def _event(env: Env, reason: str) -> dict[str, Any] | None:
    events = await env.client.list(EVENT, env.namespace)
    return next((e for e in events["items"] if e["reason"] == reason), None)


async def test_relabelling_a_provider_never_destroys_a_vm_by_default(env: Env) -> None:
    """Issue 19 case 6: with the default migrationPolicy (manual), a Provider relabelled out of
    a running VM's selector keeps the VM where it is (was: automatic, the VM and its disks were
    destroyed and re-created elsewhere)."""
    await env.vm("def-1", placement={"providerSelector": {"matchExpressions": [
        {"key": "site", "operator": "In", "values": ["a", "b"]}]}})
    old = await eventually(lambda: _placed_on(env, "def-1", "vc-a"))
    await env.client.patch(PROVIDER, "vc-a", env.namespace, {"metadata": {"labels": {"site": "z"}}})
    cond = await eventually(lambda: _is(env, "def-1", "PlacementValid", "False"))
    assert 'banlieue.io/migrate="true"' in cond["message"], cond
    await asyncio.sleep(0.5)
    vsm = await env.get_vsm("def-1")
    assert vsm["metadata"]["uid"] == old["metadata"]["uid"] and not vsm["metadata"].get("deletionTimestamp")
    assert await _event(env, "MigrationDestroysVM") is None


async def test_a_class_edit_naming_a_class_the_domain_lacks_keeps_running_vms_as_they_are(env: Env) -> None:
    """Issue 19 / ADR 0012: a VMClass edit adding a disk of a storage class (and a NIC of a
    network class) the running VM's failure domain does not offer keeps the VM as it is:
    its VSphereMachine is not changed (was: changed, then InvalidSpec, Ready False) nor
    migrated (was: with migrationPolicy automatic, destroyed and re-created where the class is
    offered), Ready stays True, ``ReferencesResolved`` False ``ClassNotOffered`` says what is
    missing and what to do, and a power request is still carried out. A new VM of the class is
    placed where the class is offered; once the domain offers it, the edit is applied."""
    body = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "edit19"}, "spec": {
        "hardware": {"cpus": 2, "memoryMiB": 1024, "disks": [{"name": "os", "sizeGiB": 20, "storageClass": "standard"}]},
        "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}, "firmware": "efi"}}
    await env.client.create(VM_CLASS, body)
    both = {"key": "site", "operator": "In", "values": ["a", "b"]}
    await env.vm("cno-1", classRef={"name": "edit19"}, migrationPolicy="automatic",
                 placement={"providerSelector": {"matchExpressions": [both]}})
    old = await eventually(lambda: _placed_on(env, "cno-1", "vc-a"))
    await env.provision("cno-1")
    await eventually(lambda: _is(env, "cno-1", "Ready", "True"))
    # vc-b offers the new classes, vc-a does not: an automatic migration would move the VM there.
    fast = fd("vc-b-dc0-c0", "c0", mem=4096)
    fast["attributes"]["availableStorageClasses"] = ["standard", "fast"]
    fast["attributes"]["availableNetworkClasses"] = ["default", "backup"]
    await env.provider_status("vc-b", [fast])
    await env.client.patch(VM_CLASS, "edit19", None, {"spec": {
        "hardware": {"disks": [{"name": "os", "sizeGiB": 20, "storageClass": "standard"},
                               {"name": "data", "sizeGiB": 5, "storageClass": "fast"}]},
        "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}, {"name": "eth1", "networkClass": "backup"}]}}})
    cond = await eventually(lambda: _is(env, "cno-1", "ReferencesResolved", "False", "ClassNotOffered"))
    assert "storage class fast, network class backup" in cond["message"], cond
    assert "vc-a-dc0-c1 of Provider vc-a" in cond["message"] and "spec.capabilities" in cond["message"], cond
    assert "kept as it is" in cond["message"], cond
    await asyncio.sleep(0.5)
    vsm = await env.get_vsm("cno-1")
    assert vsm["metadata"]["uid"] == old["metadata"]["uid"] and not vsm["metadata"].get("deletionTimestamp")
    assert vsm["spec"]["disks"] == old["spec"]["disks"] and vsm["spec"]["network"] == old["spec"]["network"]
    assert (await env.condition("cno-1", "Ready"))["status"] == "True"
    assert (await env.condition("cno-1", "Migrating"))["status"] == "False"
    assert await _event(env, "MigrationDestroysVM") is None
    # Power is still carried out.
    await env.client.patch(VIRTUAL_MACHINE, "cno-1", env.namespace, {"spec": {"desiredPowerState": "PoweredOff"}})
    await eventually(lambda: _machine_field(env, "cno-1", "powerState", "PoweredOff"))
    assert (await env.get_vsm("cno-1"))["spec"]["disks"] == old["spec"]["disks"]
    # A new VM of the class goes where the class is offered; one that may only go to vc-a says why not.
    await env.vm("cno-2", classRef={"name": "edit19"}, placement={"providerSelector": {"matchExpressions": [both]}})
    await eventually(lambda: _placed_on(env, "cno-2", "vc-b"))
    await env.vm("cno-3", classRef={"name": "edit19"}, placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    cond = await eventually(lambda: _is(env, "cno-3", "Scheduled", "False", "NoFailureDomainMatched"))
    assert "lacks storage class fast, network class backup" in cond["message"], cond
    # Once vc-a offers them, the edit is applied to the kept machine (same machine, not moved).
    offered = [fd("vc-a-dc0-c0", "c0", mem=8192), fd("vc-a-dc0-c1", "c1", mem=16384)]
    for domain in offered:
        domain["attributes"]["availableStorageClasses"] = ["standard", "fast"]
        domain["attributes"]["availableNetworkClasses"] = ["default", "backup"]
    await env.provider_status("vc-a", offered)
    await eventually(lambda: _is(env, "cno-1", "ReferencesResolved", "True", "Resolved"))
    vsm = await env.get_vsm("cno-1")
    assert vsm["metadata"]["uid"] == old["metadata"]["uid"]
    assert [d["name"] for d in vsm["spec"]["disks"]] == ["os", "data"]


async def test_a_class_firmware_edit_the_domain_does_not_support_keeps_running_vms_as_they_are(env: Env) -> None:
    """As above for the firmware: a class edit to a firmware the VM's failure domain does not
    support (another domain does) neither migrates the VM (automatic) nor changes its machine."""
    body = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "fw19"}, "spec": {
        "hardware": {"cpus": 1, "memoryMiB": 1024, "disks": [{"name": "os", "sizeGiB": 20, "storageClass": "standard"}]},
        "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}, "firmware": "efi"}}
    await env.client.create(VM_CLASS, body)
    await env.vm("fw-1", classRef={"name": "fw19"}, migrationPolicy="automatic",
                 placement={"providerSelector": {"matchExpressions": [{"key": "site", "operator": "In", "values": ["a", "b"]}]}})
    old = await eventually(lambda: _placed_on(env, "fw-1", "vc-a"))
    await env.provision("fw-1")
    await eventually(lambda: _is(env, "fw-1", "Ready", "True"))
    secure = fd("vc-b-dc0-c0", "c0", mem=4096)
    secure["attributes"]["features"] = ["bios", "efi", "efi-secure"]
    await env.provider_status("vc-b", [secure])
    await env.client.patch(VM_CLASS, "fw19", None, {"spec": {"firmware": "efi-secure"}})
    cond = await eventually(lambda: _is(env, "fw-1", "ReferencesResolved", "False", "ClassNotOffered"))
    assert "firmware efi-secure" in cond["message"], cond
    await asyncio.sleep(0.5)
    vsm = await env.get_vsm("fw-1")
    assert vsm["metadata"]["uid"] == old["metadata"]["uid"] and not vsm["metadata"].get("deletionTimestamp")
    assert vsm["spec"]["firmware"] == "efi" and (await env.condition("fw-1", "Ready"))["status"] == "True"


async def test_manual_migration_waits_for_the_annotation_and_clears_it(env: Env) -> None:
    await env.vm("man-1", migrationPolicy="manual", placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    old = await eventually(lambda: _placed_on(env, "man-1", "vc-a"))
    await env.client.patch(VIRTUAL_MACHINE, "man-1", env.namespace,
                           {"spec": {"placement": {"providerSelector": {"matchLabels": {"site": "b"}}}}})
    cond = await eventually(lambda: _is(env, "man-1", "PlacementValid", "False", "NoProviderMatched"))
    assert 'banlieue.io/migrate="true"' in cond["message"] and "vc-b/vc-b-dc0-c0" in cond["message"]
    await asyncio.sleep(0.5)
    assert (await env.get_vsm("man-1"))["metadata"]["uid"] == old["metadata"]["uid"]
    await env.client.patch(VIRTUAL_MACHINE, "man-1", env.namespace, {"metadata": {"annotations": {"banlieue.io/migrate": "true"}}})
    # The old machine was born with the provider's finalizer: the provider (played here) drops it.
    await env.client.remove_finalizer(VSPHERE_MACHINE, await eventually(lambda: _deleting(env, "man-1")), FIN_VSM)
    await eventually(lambda: _placed_on(env, "man-1", "vc-b"))

    async def annotation_cleared() -> bool:
        vm = await env.get_vm("man-1")
        return "banlieue.io/migrate" not in (vm["metadata"].get("annotations") or {})

    await eventually(annotation_cleared)
    await eventually(lambda: _is(env, "man-1", "PlacementValid", "True", "Valid"))


async def test_never_policy_keeps_the_old_placement(env: Env) -> None:
    await env.vm("nev-1", migrationPolicy="never", placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    old = await eventually(lambda: _placed_on(env, "nev-1", "vc-a"))
    await env.client.patch(VIRTUAL_MACHINE, "nev-1", env.namespace,
                           {"spec": {"placement": {"providerSelector": {"matchLabels": {"site": "b"}}}}})
    cond = await eventually(lambda: _is(env, "nev-1", "PlacementValid", "False", "NoProviderMatched"))
    assert "migrationPolicy is never" in cond["message"]
    await asyncio.sleep(0.5)
    vsm = await env.get_vsm("nev-1")
    assert vsm["metadata"]["uid"] == old["metadata"]["uid"] and vsm["spec"]["providerRef"]["name"] == "vc-a"
    assert (await env.condition("nev-1", "Migrating"))["status"] == "False"


async def test_deletion_waits_for_the_machine_then_drops_the_finalizer(env: Env) -> None:
    await env.vm("del-1")
    await eventually(lambda: env.get_vsm("del-1"))
    await env.client.patch(VSPHERE_MACHINE, "del-1", env.namespace, {"metadata": {"finalizers": ["test/provider"]}})
    await env.client.delete(VIRTUAL_MACHINE, "del-1", env.namespace)
    await eventually(lambda: _is(env, "del-1", "Ready", "False", "Deleting"))

    async def machine_deleting() -> bool:
        return bool((await env.get_vsm("del-1"))["metadata"].get("deletionTimestamp"))

    await eventually(machine_deleting)
    assert (await env.get_vm("del-1"))["metadata"]["finalizers"] == ["banlieue.io/virtualmachine"]
    await env.client.patch(VSPHERE_MACHINE, "del-1", env.namespace, {"metadata": {"finalizers": None}})

    async def vm_gone() -> bool:
        try:
            await env.get_vm("del-1")
        except NotFound:
            return True
        return False

    await eventually(vm_gone)


async def test_missing_class_then_image_then_scheduled(apiserver: Any) -> None:
    async with running_controllers(apiserver, shared=False) as env:
        await env.provider("vc-a", [fd("vc-a-dc0-c0", "c0")])
        await env.client.create(VM_CLASS, {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "medium"},
                                           "spec": {"hardware": {"cpus": 2, "memoryMiB": 1024}}})
        await env.vm("late-1")
        cond = await eventually(lambda: _is(env, "late-1", "Scheduled", "False", "ClassNotFound"))
        # New-user finding: the message listed the existing classes ("medium") to whoever reads
        # the VM, who may not list VMClasses (cluster-scoped): it names the field, no class.
        assert cond["message"].startswith('VMClass "small" not found: check spec.classRef.name ')
        assert "medium" not in cond["message"]
        assert (await env.condition("late-1", "Ready"))["reason"] == "ClassNotFound"
        infra = await env.condition("late-1", "InfrastructureReady")
        assert (infra["status"], infra["reason"]) == ("False", "WaitingForInfrastructure")
        assert infra["message"] == "no VSphereMachine yet: the VirtualMachine is not scheduled (see the Scheduled condition)"
        await env.client.create(VM_CLASS, {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "small"},
                                           "spec": {"hardware": {"cpus": 1, "memoryMiB": 512}}})
        cond = await eventually(lambda: _is(env, "late-1", "Scheduled", "False", "ImageNotFound"))
        assert cond["message"].startswith('VMImage "ubuntu" not found: check spec.imageRef.name ')
        await env.client.create(VM_IMAGE, {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": "ubuntu"},
                                           "spec": {"sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "t"}]}})
        await eventually(lambda: _is(env, "late-1", "Scheduled", "False", "ImageNotReady"))
        await env.image_ready(["vc-a"])
        await eventually(lambda: _is(env, "late-1", "Scheduled", "True"))
        await eventually(lambda: env.get_vsm("late-1"))


async def test_paused_vm_is_left_alone_until_unpaused(env: Env) -> None:
    await env.vm("pau-1", paused=True)
    await eventually(lambda: _is(env, "pau-1", "Paused", "True", "Paused"))
    await asyncio.sleep(0.5)
    vm = await env.get_vm("pau-1")
    assert not vm["metadata"].get("finalizers") and "scheduled" not in vm["status"]
    with pytest.raises(NotFound):
        await env.get_vsm("pau-1")
    await env.client.patch(VIRTUAL_MACHINE, "pau-1", env.namespace, {"spec": {"paused": False}})
    await eventually(lambda: env.get_vsm("pau-1"))
    await eventually(lambda: _is(env, "pau-1", "Paused", "False", "NotPaused"))


async def test_required_anti_affinity_spreads_vms_over_clusters(env: Env) -> None:
    term = {"topologyKey": "cluster", "mode": "required", "labelSelector": {"matchLabels": {"app": "db"}}}
    placement = {"providerSelector": {"matchLabels": {"site": "a"}}, "antiAffinity": [term]}
    for name in ("db-0", "db-1", "db-2"):
        await env.vm(name, labels={"app": "db"}, placement=placement)
    first = await eventually(lambda: env.get_vsm("db-0"))
    second = await eventually(lambda: env.get_vsm("db-1"))
    assert {first["spec"]["failureDomain"], second["spec"]["failureDomain"]} == {"vc-a-dc0-c0", "vc-a-dc0-c1"}
    cond = await eventually(lambda: _is(env, "db-2", "Scheduled", "False", "AntiAffinityUnsatisfied"))
    assert "db-0" in cond["message"] or "db-1" in cond["message"]
    await env.client.delete(VIRTUAL_MACHINE, "db-0", env.namespace)
    # db-0's machine carries the provider's finalizer: the provider (played here) drops it.
    await env.client.remove_finalizer(VSPHERE_MACHINE, await eventually(lambda: _deleting(env, "db-0")), FIN_VSM)
    await eventually(lambda: env.get_vsm("db-2"), timeout=15)


async def test_burst_counts_pending_vms_against_free_capacity(apiserver: Any) -> None:
    """Machines placed but not provisioned yet are not in the Provider's free capacity: a burst of
    VMs is spread and stops at what fits instead of all counting the same free memory."""
    async with running_controllers(apiserver) as env:
        await env.provider("vc-a", [fd("vc-a-dc0-c0", "c0", mem=8192), fd("vc-a-dc0-c1", "c1", mem=8192)])
        await env.image_ready(["vc-a"])
        names = [f"burst-{i}" for i in range(5)]
        for name in names:
            await env.vm(name)

        async def all_decided() -> list[dict[str, Any]] | None:
            conds = [await env.condition(n, "Scheduled") for n in names]
            return conds if all(c.get("status") in ("True", "False") for c in conds) else None

        conds = await eventually(all_decided)
        placed = [(await env.get_vm(n))["status"].get("scheduled", {}).get("failureDomain") for n in names]
        assert sorted(p for p in placed if p) == ["vc-a-dc0-c0", "vc-a-dc0-c0", "vc-a-dc0-c1", "vc-a-dc0-c1"]
        refused = [c for c in conds if c["status"] == "False"]
        assert [c["reason"] for c in refused] == ["InsufficientCapacity"]
        assert "memory 4096 MiB needed, 0 free" in refused[0]["message"]


async def test_a_deleted_pending_vm_frees_its_capacity_for_a_refused_one(apiserver: Any) -> None:
    """The placement sums follow deletions: a VM refused for capacity is placed once a pending
    peer holding the room is gone."""
    async with running_controllers(apiserver) as env:
        await env.provider("vc-a", [fd("vc-a-dc0-c0", "c0", mem=8192)])
        await env.image_ready(["vc-a"])
        for name in ("hold-0", "hold-1"):
            await env.vm(name)
            await eventually(lambda name=name: env.get_vsm(name))
        await env.vm("late")
        await eventually(lambda: _is(env, "late", "Scheduled", "False", "InsufficientCapacity"))
        await env.client.delete(VIRTUAL_MACHINE, "hold-0", env.namespace)
        await env.client.remove_finalizer(VSPHERE_MACHINE, await eventually(lambda: _deleting(env, "hold-0")), FIN_VSM)
        vsm = await eventually(lambda: env.get_vsm("late"))
        assert vsm["spec"]["failureDomain"] == "vc-a-dc0-c0"


async def test_provisioned_vms_count_until_the_provider_reports_capacity_after_them(apiserver: Any) -> None:
    """A VM provisioned since the Provider's last capacity report (``capacity.updateTime``) is
    not in its figures yet (refreshed every 300 s; never on vcsim): it keeps counting against
    the domain, so a domain with room for 3 takes exactly 3 of 5, before and after they are
    provisioned, and again once a newer report (lower figures) is written."""
    reported = datetime.now(UTC) - timedelta(hours=1)

    def domain(mem: int, at: datetime) -> list[dict[str, Any]]:
        d = fd("vc-a-dc0-c0", "c0", mem=mem)
        d["attributes"]["capacity"]["updateTime"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        return [d]

    async with running_controllers(apiserver) as env:
        await env.provider("vc-a", domain(3 * 4096, reported))
        await env.image_ready(["vc-a"])
        names = [f"fill-{i}" for i in range(5)]
        for name in names:
            await env.vm(name)

        async def decided() -> dict[str, str] | None:
            conds = {n: await env.condition(n, "Scheduled") for n in names}
            if not all(c.get("status") in ("True", "False") for c in conds.values()):
                return None
            return {n: c["reason"] for n, c in conds.items()}

        async def placed() -> list[str]:
            reasons = await eventually(decided)
            assert set(reasons.values()) <= {"Scheduled", "InsufficientCapacity"}, reasons
            return sorted(n for n, r in reasons.items() if r == "Scheduled")

        first = await placed()
        assert len(first) == 3
        for name in first:
            await eventually(lambda name=name: env.get_vsm(name))
            await env.provision(name)
        for name in first:
            await eventually(lambda name=name: _is(env, name, "InfrastructureReady", "True"))
        # A Provider status write re-enqueues the refused VMs: the same figures, reported (as
        # before) before the 3 were provisioned, leave no room.
        await env.provider_status("vc-a", domain(3 * 4096, reported - timedelta(minutes=5)))
        await asyncio.sleep(1.0)
        assert await placed() == first
        refused = await env.condition(next(n for n in names if n not in first), "Scheduled")
        assert "memory 4096 MiB needed, 0 free" in refused["message"]

        # A report taken after they were provisioned includes them: 0 free, still 3.
        after = datetime.now(UTC) + timedelta(seconds=2)
        await env.provider_status("vc-a", domain(0, after))
        await asyncio.sleep(1.0)
        assert await placed() == first
        # Room for one more in a later report: exactly one more is placed.
        await env.provider_status("vc-a", domain(4096, after + timedelta(seconds=1)))
        await eventually(lambda: _at_least(placed, 4))
        await asyncio.sleep(1.0)
        assert len(await placed()) == 4


async def _at_least(placed: Callable[[], Awaitable[list[str]]], n: int) -> bool:
    return len(await placed()) >= n


async def test_provisioned_vms_count_when_equal_capacity_is_spread(apiserver: Any) -> None:
    """Capacity that already includes the provisioned VMs (vcsim never lowers it) ties, so the
    peer counts spread the next VM: provisioned peers count too (scheduler docstring, "Peers")."""
    async with running_controllers(apiserver) as env:
        await env.provider("vc-a", [fd("vc-a-dc0-c0", "c0")])
        await env.provider("vc-b", [fd("vc-b-dc0-c0", "c0")])
        await env.image_ready(["vc-a", "vc-b"])
        await env.vm("first")
        assert (await eventually(lambda: env.get_vsm("first")))["spec"]["providerRef"] == {"name": "vc-a"}
        await env.provision("first")
        await eventually(lambda: _has(env, "first", "initialization", {"provisioned": True}))
        await env.vm("second")
        assert (await eventually(lambda: env.get_vsm("second")))["spec"]["providerRef"] == {"name": "vc-b"}


async def test_a_same_named_machine_of_another_owner_is_left_alone(env: Env) -> None:
    foreign = await env.client.create(VSPHERE_MACHINE, {
        "apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
        "metadata": {"name": "taken", "namespace": env.namespace, "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "spec": {"providerRef": {"name": "vc-b"}, "failureDomain": "vc-b-dc0-c0", "numCPUs": 8}})
    await env.vm("taken")
    cond = await eventually(lambda: _is(env, "taken", "Ready", "False", "InfrastructureConflict"))
    assert "belongs to another object" in cond["message"]
    vsm = await env.get_vsm("taken")
    assert vsm["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]  # untouched
    await env.client.delete(VIRTUAL_MACHINE, "taken", env.namespace)

    async def vm_gone() -> bool:
        try:
            await env.get_vm("taken")
        except NotFound:
            return True
        return False

    await eventually(vm_gone)
    assert (await env.get_vsm("taken"))["spec"]["numCPUs"] == 8  # still there


async def test_scheduling_is_recorded_as_an_event(env: Env) -> None:
    await env.vm("evt-1")

    async def scheduled_event() -> bool:
        events = await env.client.list(EVENT, env.namespace)
        return any(e.get("reason") == "Scheduled" and e.get("regarding", {}).get("name") == "evt-1"
                   for e in events.get("items") or [])

    await eventually(scheduled_event)


async def test_watch_filter_leaves_unlabelled_vms_alone_even_through_map_functions(apiserver: Any) -> None:
    async with running_controllers(apiserver, watch_filter="blue") as env:
        await env.provider("vc-a", [fd("vc-a-dc0-c0", "c0")])
        await env.image_ready(["vc-a"])
        await env.vm("blue-1", labels={"cluster.x-k8s.io/watch-filter": "blue"})
        await env.vm("plain-1")
        await eventually(lambda: env.get_vsm("blue-1"))
        # VMClass, VMImage and Provider changes map to the VMs that use them: still not plain-1.
        await env.client.patch(VM_CLASS, "small", None, {"metadata": {"labels": {"touched": "1"}}})
        await env.client.patch(VM_IMAGE, "ubuntu", None, {"metadata": {"labels": {"touched": "1"}}})
        await env.image_ready(["vc-a"], image="ubuntu")
        await env.provider_status("vc-a", [fd("vc-a-dc0-c0", "c0", mem=1000)])
        await asyncio.sleep(1.0)
        plain = await env.get_vm("plain-1")
        assert not plain.get("status") and not plain["metadata"].get("finalizers")
        with pytest.raises(NotFound):
            await env.get_vsm("plain-1")


async def test_machines_no_vm_owns_count_toward_the_reservation(apiserver: Any) -> None:
    """Issue 21: a VSphereMachine created directly or by Cluster API (no VirtualMachine owns it)
    reserves its memory in its domain like a VM the scheduler placed; its deletion frees the room
    for a VM refused for capacity at once."""
    async with running_controllers(apiserver) as env:
        domains = [fd("vc-a-dc0-c0", "c0"), fd("vc-a-dc0-c1", "c1")]
        for d in domains:
            d["attributes"]["capacity"]["memoryTotalMiB"] = 8192  # free figures say 65536: not the binding guard
        await env.provider("vc-a", domains)
        await env.image_ready(["vc-a"])
        base = {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine"}
        # CAPI-like: the domain by name; direct: providerRef with raw datacenter and cluster.
        await env.client.create(VSPHERE_MACHINE, {**base, "metadata": {"name": "capi-0", "namespace": env.namespace},
                                                  "spec": {"template": "t", "memoryMiB": 6144, "failureDomain": "vc-a-dc0-c0"}})
        await env.client.create(VSPHERE_MACHINE, {**base, "metadata": {"name": "direct-0", "namespace": env.namespace},
                                                  "spec": {"template": "t", "memoryMiB": 6144, "providerRef": {"name": "vc-a"},
                                                           "datacenter": "DC0", "cluster": "C1"}})
        await asyncio.sleep(0.5)  # the informer has them
        await env.vm("late")  # class small: 4096 MiB; 2048 left in each domain
        refused = await eventually(lambda: _is(env, "late", "Scheduled", "False", "InsufficientCapacity"))
        assert "not reserved by the VMs placed here" in refused["message"], refused
        await env.client.delete(VSPHERE_MACHINE, "capi-0", env.namespace)
        vsm = await eventually(lambda: env.get_vsm("late"))
        assert vsm["spec"]["failureDomain"] == "vc-a-dc0-c0"


async def test_a_static_address_another_vm_holds_is_refused_before_cloning(env: Env) -> None:
    """New-user finding: two VirtualMachines of a namespace given the same static address on one
    network class were both cloned (an address conflict in the guests). The later one waits,
    Scheduled False AddressConflict naming the holder, with no VSphereMachine; once the holder
    is gone it is placed."""
    def net(address: str) -> dict[str, Any]:
        return {"interfaces": [{"name": "eth0", "addresses": [address]}]}

    await env.vm("ip-first", network=net("10.0.0.5/24"))
    await eventually(lambda: env.get_vsm("ip-first"))
    await env.vm("ip-second", network=net("10.0.0.5/25"))
    await env.vm("ip-other", network=net("10.0.0.6/24"))
    refused = await eventually(lambda: _is(env, "ip-second", "Scheduled", "False", "AddressConflict"))
    assert refused is not None
    assert "10.0.0.5" in refused["message"] and "VirtualMachine ip-first" in refused["message"], refused
    await eventually(lambda: env.get_vsm("ip-other"))
    with pytest.raises(NotFound):
        await env.get_vsm("ip-second")
    await env.client.delete(VIRTUAL_MACHINE, "ip-first", env.namespace)
    await env.client.remove_finalizer(VSPHERE_MACHINE, await eventually(lambda: _deleting(env, "ip-first")), FIN_VSM)
    vsm = await eventually(lambda: env.get_vsm("ip-second"))
    assert vsm["spec"]["network"]["devices"][0]["addresses"] == ["10.0.0.5/25"]


def _vm_reconciles() -> float:
    from prometheus_client import REGISTRY

    return sum(REGISTRY.get_sample_value("controller_runtime_reconcile_total", {"controller": "virtualmachine", "result": r}) or 0.0
               for r in ("success", "error", "requeue", "requeue_after"))


async def _quiet(seconds: float = 0.6) -> float:
    """The VirtualMachine reconcile count once it has not moved for ``seconds``."""
    last = _vm_reconciles()
    while True:
        await asyncio.sleep(seconds)
        now = _vm_reconciles()
        if now == last:
            return now
        last = now


async def test_a_provider_capacity_rewrite_reconciles_no_placed_vm(env: Env) -> None:
    """The Provider controller rewrites its domains' capacity about every 30 s while VMs come and
    go; a placed VM reads nothing of it, and mapping every rewrite to every VM placed on the
    Provider made a wave's reconciles grow with the square of its VMs. Any other Provider change
    (here a label) still reaches them."""
    await env.vm("cap-1")
    await eventually(lambda: _placed_on(env, "cap-1", "vc-a"))
    await env.provision("cap-1")
    await eventually(lambda: _is(env, "cap-1", "Ready", "True"))
    before = await _quiet()
    await env.provider_status("vc-a", [fd("vc-a-dc0-c0", "c0", mem=4096), fd("vc-a-dc0-c1", "c1", mem=12288)])
    await asyncio.sleep(1.0)
    assert _vm_reconciles() == before, "a capacity rewrite reconciled a placed VM"
    await env.client.patch(PROVIDER, "vc-a", env.namespace, {"metadata": {"labels": {"site": "a", "rack": "r1"}}})

    async def reconciled() -> bool:
        return _vm_reconciles() > before
    await eventually(reconciled)


async def test_an_address_conflict_ends_when_the_holder_changes_its_address(env: Env) -> None:
    """Review finding: AddressConflict has no timed retry, and the refused VM was woken only by
    the holder's deletion although the docs say "change or delete the holder". A standalone
    VSphereMachine editing its addresses frees the address at once."""
    def net(address: str) -> dict[str, Any]:
        return {"interfaces": [{"name": "eth0", "addresses": [address]}]}

    base = {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine"}
    devices = [{"name": "eth0", "networkClass": "default", "addresses": ["10.0.0.7/24"]}]
    await env.client.create(VSPHERE_MACHINE, {**base, "metadata": {"name": "holder-0", "namespace": env.namespace},
                                              "spec": {"template": "t", "memoryMiB": 1024, "failureDomain": "vc-a-dc0-c0",
                                                       "network": {"devices": devices}}})
    await asyncio.sleep(0.5)  # the informer has it
    await env.vm("ip-waits", network=net("10.0.0.7/24"))
    refused = await eventually(lambda: _is(env, "ip-waits", "Scheduled", "False", "AddressConflict"))
    assert "holder-0" in refused["message"], refused
    await env.client.patch(VSPHERE_MACHINE, "holder-0", env.namespace,
                           {"spec": {"network": {"devices": [{**devices[0], "addresses": ["10.0.0.8/24"]}]}}})
    await eventually(lambda: env.get_vsm("ip-waits"))


async def test_an_address_conflict_ends_when_the_holders_class_changes_its_address(env: Env) -> None:
    """The holder VM's address comes from its class (ipam); the class is edited to another."""
    static = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": f"static-{env.namespace}"}, "spec": {
        "hardware": {"cpus": 2, "memoryMiB": 4096, "disks": [{"name": "os", "sizeGiB": 20, "storageClass": "standard"}]},
        "network": {"interfaces": [{"name": "eth0", "networkClass": "default",
                                    "ipam": {"source": "static", "static": {"addresses": ["10.0.0.9/24"]}}}]}, "firmware": "efi"}}
    await env.client.create(VM_CLASS, static)
    await env.vm("cls-holder", classRef={"name": static["metadata"]["name"]})
    await eventually(lambda: env.get_vsm("cls-holder"))
    await env.vm("cls-waits", network={"interfaces": [{"name": "eth0", "addresses": ["10.0.0.9/24"]}]})
    await eventually(lambda: _is(env, "cls-waits", "Scheduled", "False", "AddressConflict"))
    await env.client.patch(VM_CLASS, static["metadata"]["name"], None, {"spec": {"network": {"interfaces": [
        {"name": "eth0", "networkClass": "default", "ipam": {"source": "static", "static": {"addresses": ["10.0.0.10/24"]}}}]}}})
    await eventually(lambda: env.get_vsm("cls-waits"))


async def test_a_vm_that_must_move_but_finds_no_room_moves_when_capacity_frees(env: Env) -> None:
    """Review finding: a placed VM whose placement became invalid (automatic migration) and that
    found no room elsewhere keeps its scheduled placement, so it is not "unscheduled"; the
    Provider capacity rewrite that makes room must still reach it."""
    await env.provider_status("vc-b", [fd("vc-b-dc0-c0", "c0", mem=1024)])  # no room for 4096 MiB
    await env.vm("mv-1", migrationPolicy="automatic", placement={"providerSelector": {"matchLabels": {"site": "a"}}})
    await eventually(lambda: _placed_on(env, "mv-1", "vc-a"))
    await env.client.patch(VIRTUAL_MACHINE, "mv-1", env.namespace,
                           {"spec": {"placement": {"providerSelector": {"matchLabels": {"site": "b"}}}}})
    await eventually(lambda: _is(env, "mv-1", "PlacementValid", "False"))
    await asyncio.sleep(0.5)
    assert (await env.get_vsm("mv-1"))["spec"]["providerRef"]["name"] == "vc-a"  # nowhere to go yet
    await env.provider_status("vc-b", [fd("vc-b-dc0-c0", "c0", mem=65536)])
    await eventually(lambda: _is(env, "mv-1", "Migrating", "True"))
