"""The vCenter's identity (issue 19 case 3, ADR 0013): a Provider records the instance UUID of
the vCenter it reaches (``status.vcenter.instanceUUID``); an endpoint that reaches another vCenter
is refused while machines live on the Provider, and two Providers on one vCenter are flagged.

Real processes: the provider role's Provider and VSphereMachine controllers in one Manager
against the API-server double over HTTP, and two vcsims (each a vCenter of its own instance
UUID) over SOAP. Case 3 of issue 19 exactly: ``vcenter-b`` has a provisioned machine, its
endpoint is pointed at ``vcenter-a``; before the change its machine went ``VMNotFound`` and
deleting it left the VM running in vcenter-b."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from provider_role import condition, provider_body, provider_with, running_role, secret_body
from pyVim.connect import Disconnect, SmartConnect
from reconciler_harness import eventually, vms_with_uid

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import PROVIDER, SECRET, VSPHERE_MACHINE
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.reconcilers.vspheremachine import controller as vspheremachine
from banlieue.runtime.client import Client
from banlieue.runtime.errors import NotFound
from banlieue.runtime.kinds import EVENT
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(150)]


class Oracle:
    """The test's own pyVmomi session on one vcsim (independent of the code under test)."""

    def __init__(self, vc: VcsimProcess) -> None:
        self.si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                               sslContext=ssl.create_default_context(cafile=vc.ca_file))

    @property
    def instance_uuid(self) -> str:
        return str(self.si.RetrieveContent().about.instanceUuid)

    def vms(self, uid: str) -> list[Any]:
        return vms_with_uid(self.si, uid)

    def close(self) -> None:
        Disconnect(self.si)


@pytest.fixture
def two_vcenters(vcsim_factory: Callable[..., VcsimProcess]) -> Iterator[tuple[VcsimProcess, VcsimProcess, Oracle, Oracle]]:
    a, b = vcsim_factory(dc=1, cluster=1), vcsim_factory(dc=1, cluster=1)
    oa, ob = Oracle(a), Oracle(b)
    try:
        yield a, b, oa, ob
    finally:
        oa.close()
        ob.close()


def machine_body(name: str, ns: str, provider: str) -> dict[str, Any]:
    return {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine", "metadata": {"name": name, "namespace": ns},
            "spec": {"providerRef": {"name": provider}, "datacenter": "DC0", "cluster": "DC0_C0",
                     "template": "ubuntu-22.04", "numCPUs": 1, "memoryMiB": 512}}


def endpoint_of(vc: VcsimProcess) -> dict[str, Any]:
    return {"spec": {"connection": {"endpoint": vc.endpoint, "caBundle": {"inline": vc.ca_pem}}}}


async def machine_reason(client: Client, name: str, ns: str, *reasons: str, timeout: float = 45.0) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await client.get(VSPHERE_MACHINE, name, ns)
        return obj if condition(obj, "Ready").get("reason") in reasons else None

    result: dict[str, Any] = await eventually(check, timeout, what=f"VSphereMachine {name} Ready reason in {reasons}")
    return result


async def gone(client: Client, kind: Any, name: str, ns: str) -> bool:
    try:
        await client.get(kind, name, ns)
    except NotFound:
        return True
    return False


async def test_endpoint_moved_to_another_vcenter_is_refused_while_machines_live_there(
    apiserver: Any, client: Client, namespace: str, backend: VSphereBackend,
    two_vcenters: tuple[VcsimProcess, VcsimProcess, Oracle, Oracle],
) -> None:
    a, b, oa, ob = two_vcenters
    ns = namespace
    for name, vc in (("vcenter-a", a), ("vcenter-b", b)):
        await client.create(SECRET, secret_body(f"{name}-creds", ns, username=vc.username, password=vc.password))
        await client.create(PROVIDER, provider_body(name, ns, vc))
    async with running_role(apiserver, [provider_reconciler.setup, vspheremachine.setup], backend):
        pb = await provider_with(client, "vcenter-b", ns, "Reconciled", "True")
        assert pb["status"]["vcenter"]["instanceUUID"] == ob.instance_uuid != oa.instance_uuid
        assert pb["status"]["vcenter"]["apiType"] == "VirtualCenter" and pb["status"]["vcenter"]["version"]
        created = await client.create(VSPHERE_MACHINE, machine_body("m-b", ns, "vcenter-b"))
        uid = created["metadata"]["uid"]
        await machine_reason(client, "m-b", ns, "WaitingForIPAddress", "Provisioned")
        assert len(ob.vms(uid)) == 1

        # Issue 19 case 3: point vcenter-b at vcenter-a (URL and the CA that verifies it).
        await client.patch(PROVIDER, "vcenter-b", ns, endpoint_of(a))
        refused = await provider_with(client, "vcenter-b", ns, "VCenterIdentityChanged", "False")
        message = condition(refused, "Ready")["message"]
        assert "m-b" in message and ob.instance_uuid in message and oa.instance_uuid in message, message
        assert condition(refused, "ProviderReachable")["status"] == "False"
        assert refused["status"]["vcenter"]["instanceUUID"] == ob.instance_uuid  # the recorded one is kept
        assert refused["status"]["failureDomains"], "failure domains dropped: the machines could not be resolved"

        async def warned() -> bool:
            items = (await client.list(EVENT, ns)).get("items", [])
            return any(e.get("reason") == "VCenterIdentityChanged" and e.get("type") == "Warning"
                       and (e.get("regarding") or {}).get("name") == "vcenter-b" for e in items)

        await eventually(warned, timeout=20.0, what="a Warning event VCenterIdentityChanged on vcenter-b")
        # The machine says why, and is neither VMNotFound nor re-created anywhere.
        obj = await machine_reason(client, "m-b", ns, "VCenterIdentityChanged", "VMNotFound")
        assert condition(obj, "Ready")["reason"] == "VCenterIdentityChanged", condition(obj, "Ready")

        # Deleting the machine while the endpoint is wrong destroys nothing and drops nothing.
        await client.delete(VSPHERE_MACHINE, "m-b", ns)
        obj = await machine_reason(client, "m-b", ns, "Deleting")
        await eventually(lambda: _says(client, "m-b", ns, "VCenterIdentityChanged"), timeout=30.0,
                         what="deleting machine names VCenterIdentityChanged")
        assert not await gone(client, VSPHERE_MACHINE, "m-b", ns), "finalizer dropped: the VM leaks in vcenter-b"
        assert len(ob.vms(uid)) == 1 and oa.vms(uid) == []

        # Reverting the endpoint recovers: the deletion completes and destroys the VM in vcenter-b.
        await client.patch(PROVIDER, "vcenter-b", ns, endpoint_of(b))
        await provider_with(client, "vcenter-b", ns, "Reconciled", "True")
        await eventually(lambda: gone(client, VSPHERE_MACHINE, "m-b", ns), timeout=60.0, what="machine deleted")
        assert ob.vms(uid) == [] and oa.vms(uid) == []


async def _says(client: Client, name: str, ns: str, text: str) -> bool:
    obj = await client.get(VSPHERE_MACHINE, name, ns)
    return text in str(condition(obj, "Ready").get("message"))


async def test_endpoint_moved_without_machines_records_the_new_vcenter(
    apiserver: Any, client: Client, namespace: str, backend: VSphereBackend,
    two_vcenters: tuple[VcsimProcess, VcsimProcess, Oracle, Oracle],
) -> None:
    a, b, oa, ob = two_vcenters
    await client.create(SECRET, secret_body("solo-creds", namespace, username=b.username, password=b.password))
    await client.create(PROVIDER, provider_body("solo", namespace, b))
    async with running_role(apiserver, [provider_reconciler.setup, vspheremachine.setup], backend):
        before = await provider_with(client, "solo", namespace, "Reconciled", "True")
        assert before["status"]["vcenter"]["instanceUUID"] == ob.instance_uuid
        await client.patch(PROVIDER, "solo", namespace, endpoint_of(a))

        async def moved() -> dict[str, Any] | None:
            obj = await client.get(PROVIDER, "solo", namespace)
            recorded = ((obj.get("status") or {}).get("vcenter") or {}).get("instanceUUID")
            return obj if recorded == oa.instance_uuid and condition(obj, "Ready").get("status") == "True" else None

        await eventually(moved, timeout=45.0, what="the new vCenter recorded")
        # And the Provider places through it: a machine is cloned into vcenter-a.
        created = await client.create(VSPHERE_MACHINE, machine_body("m-a", namespace, "solo"))
        await machine_reason(client, "m-a", namespace, "WaitingForIPAddress", "Provisioned")
        assert len(oa.vms(created["metadata"]["uid"])) == 1 and ob.vms(created["metadata"]["uid"]) == []


async def test_two_providers_on_one_vcenter_are_flagged_and_only_the_first_places(
    apiserver: Any, client: Client, namespace: str, backend: VSphereBackend,
    two_vcenters: tuple[VcsimProcess, VcsimProcess, Oracle, Oracle],
) -> None:
    a, _, _, _ = two_vcenters
    ns = namespace
    for name in ("first", "second"):
        await client.create(SECRET, secret_body(f"{name}-creds", ns, username=a.username, password=a.password))
    await client.create(PROVIDER, provider_body("first", ns, a))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "first", ns, "Reconciled", "True")
        await client.create(PROVIDER, provider_body("second", ns, a))
        second = await provider_with(client, "second", ns, "DuplicateVCenter", "False")
        assert "first" in condition(second, "Ready")["message"]
        assert condition(second, "VCenterUnique")["reason"] == "DuplicateVCenter"

        async def first_flagged() -> dict[str, Any] | None:
            obj = await client.get(PROVIDER, "first", ns)
            unique = condition(obj, "VCenterUnique")
            return obj if unique.get("status") == "False" and "second" in unique.get("message", "") else None

        first = await eventually(first_flagged, timeout=30.0, what="the first Provider flagged too")
        assert condition(first, "Ready")["status"] == "True"  # the first one keeps placing
        # The first one goes: the second is the only Provider on that vCenter now.
        await client.delete(PROVIDER, "first", ns)
        await eventually(lambda: gone(client, PROVIDER, "first", ns), timeout=20.0, what="first removed")
        second = await provider_with(client, "second", ns, "Reconciled", "True")
        assert condition(second, "VCenterUnique")["status"] == "True"
