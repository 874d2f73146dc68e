"""VSphereMachineTemplate reconciler end to end: a real Manager against the API-server double;
status.capacity / status.nodeInfo read back over HTTP, following VMImage changes."""

from __future__ import annotations

from typing import Any

from provider_role import running_role
from reconciler_harness import eventually

from banlieue.reconcilers.kinds import VM_IMAGE, VSPHERE_MACHINE_TEMPLATE
from banlieue.reconcilers.vspheremachinetemplate import controller as vspheremachinetemplate
from banlieue.runtime.client import Client


def template_body(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachineTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 4096, **spec}}},
    }


async def status_is(client: Client, name: str, namespace: str, want: dict[str, Any]) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await client.get(VSPHERE_MACHINE_TEMPLATE, name, namespace)
        return obj if obj.get("status") == want else None

    result: dict[str, Any] = await eventually(check, timeout=20.0, what=f"VSphereMachineTemplate status {want}")
    return result


async def test_capacity_and_node_info_follow_spec_and_vmimages(apiserver: Any, client: Client, namespace: str) -> None:
    await client.create(VSPHERE_MACHINE_TEMPLATE, template_body("md", namespace))
    await client.create(VSPHERE_MACHINE_TEMPLATE, template_body("other", namespace, template="rhel-9", numCPUs=8, memoryMiB=16384))
    async with running_role(apiserver, [vspheremachinetemplate.setup]):
        await status_is(client, "md", namespace, {
            "capacity": {"cpu": "2", "memory": "4096Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        })
        await status_is(client, "other", namespace, {
            "capacity": {"cpu": "8", "memory": "16384Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        })
        # A VMImage for the template says arm64: the VMImage watch updates only the templates using it.
        await client.create(VM_IMAGE, {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": "ubuntu-arm"},
            "spec": {"osFamily": "linux", "architecture": "arm64",
                     "sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "ubuntu-22.04"}]},
        })
        await status_is(client, "md", namespace, {
            "capacity": {"cpu": "2", "memory": "4096Mi"}, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"},
        })
        # A template's spec is immutable (CAPI; admission policy banlieue-vspheremachinetemplate-
        # immutable-spec): a change is a new template, which gets its own status at once.
        await client.create(VSPHERE_MACHINE_TEMPLATE, template_body("md-v2", namespace, numCPUs=4))
        await status_is(client, "md-v2", namespace, {
            "capacity": {"cpu": "4", "memory": "4096Mi"}, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"},
        })
    other = await client.get(VSPHERE_MACHINE_TEMPLATE, "other", namespace)
    assert other["status"]["nodeInfo"]["architecture"] == "amd64"
    managers = {m["manager"] for m in other["metadata"].get("managedFields") or [] if m.get("subresource") == "status"}
    assert managers <= {"banlieue.io/provider-vsphere"} and managers
