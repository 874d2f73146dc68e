"""A Provider that takes no new VM (new-user findings): one being deleted (its finalizer holds it
while a machine uses it) and one flagged ``DuplicateVCenter`` (ADR 0013) clone nothing for a
VSphereMachine that names it directly; the machine says why in ``Ready``, and a machine whose VM
already exists keeps it.

A real Manager running the vspheremachine controller against the API server (HTTP) and vcsim
(SOAP). The Provider reconciler is not running: the tests write the status it would write.
"""

from __future__ import annotations

from typing import Any

import pytest
from reconciler_harness import b64, vms_with_uid
from test_vspheremachine_vcsim import (  # sibling helpers
    machine,
    make_provider,
    ready_of,
    running,
    wait_reason,
)

from banlieue.reconcilers.kinds import PROVIDER, SECRET, VSPHERE_MACHINE
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]
PROVIDER_FINALIZER = "banlieue.io/provider"


async def _boot_secret(client: Client, ns: str) -> None:
    await client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": ns},
                                 "data": {"value": b64("#cloud-config\n")}})


async def test_a_provider_being_deleted_takes_no_new_vm_and_keeps_the_old_one(
        apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any) -> None:
    await make_provider(client, ns, vcsim)
    await client.patch(PROVIDER, "vc1", ns, {"metadata": {"finalizers": [PROVIDER_FINALIZER]}})
    await _boot_secret(client, ns)
    try:
        async with running(apiserver, ns):
            old = await client.create(VSPHERE_MACHINE, machine("m1", ns, bootstrapDataSecretRef={"name": "boot"}))
            await wait_reason(client, ns, "m1", "WaitingForIPAddress", "Provisioned")
            await client.delete(PROVIDER, "vc1", ns)  # held by its finalizer: deletionTimestamp set
            assert (await client.get(PROVIDER, "vc1", ns))["metadata"].get("deletionTimestamp")

            new = await client.create(VSPHERE_MACHINE, machine("m2", ns, bootstrapDataSecretRef={"name": "boot"}))
            obj = await wait_reason(client, ns, "m2", "ProviderDeleting", "Cloning", "WaitingForIPAddress", "Provisioned")
            status, reason, message = ready_of(obj)  # type: ignore[misc]
            assert (status, reason) == ("False", "ProviderDeleting"), message
            assert "Provider vc1 is being deleted" in message and "another Provider" in message
            assert vms_with_uid(si, new["metadata"]["uid"]) == []
            # The machine that has a VM keeps it and stays as it was.
            assert len(vms_with_uid(si, old["metadata"]["uid"])) == 1
            assert ready_of(await client.get(VSPHERE_MACHINE, "m1", ns))[1] in ("WaitingForIPAddress", "Provisioned")  # type: ignore[index]
    finally:
        await client.patch(PROVIDER, "vc1", ns, {"metadata": {"finalizers": None}})


async def test_a_duplicate_vcenter_provider_clones_nothing_for_a_direct_machine(
        apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any) -> None:
    await make_provider(client, ns, vcsim)
    # What the Provider reconciler writes on the younger of two Providers reaching one vCenter.
    await client.patch_status(PROVIDER, "vc1", ns, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "DuplicateVCenter", "lastTransitionTime": "2026-01-01T00:00:00Z",
         "message": "Provider vc0 also reaches this vCenter"},
        {"type": "VCenterUnique", "status": "False", "reason": "DuplicateVCenter", "lastTransitionTime": "2026-01-01T00:00:00Z",
         "message": "Provider vc0 also reaches this vCenter"}]}})
    await _boot_secret(client, ns)
    async with running(apiserver, ns):
        for name, by_domain in (("by-ref", False), ("by-domain", True)):
            body = machine(name, ns, bootstrapDataSecretRef={"name": "boot"})
            if by_domain:
                for key in ("providerRef", "datacenter", "cluster"):
                    del body["spec"][key]
                body["spec"]["failureDomain"] = "vc1-dc0-c0"
            created = await client.create(VSPHERE_MACHINE, body)
            obj = await wait_reason(client, ns, name, "DuplicateVCenter", "Cloning", "WaitingForIPAddress", "Provisioned")
            status, reason, message = ready_of(obj)  # type: ignore[misc]
            assert (status, reason) == ("False", "DuplicateVCenter"), message
            assert "same vCenter as an older Provider" in message
            assert vms_with_uid(si, created["metadata"]["uid"]) == []
