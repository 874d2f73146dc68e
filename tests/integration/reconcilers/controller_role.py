"""The controller role for the reconciler integration tests: the VirtualMachine and VSphereCluster
controllers in a running Manager (``running_controllers``), and an ``Env`` through which the test
plays the provider role (Provider failure domains, VMImage rows, VSphereMachine status).

Imported as ``from controller_role import ...`` (this directory is on ``sys.path``, see
reconciler_harness.py) by the VirtualMachine and VSphereCluster tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import reconciler_harness
from reconciler_harness import CRD_DIR, new_client

from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    FIELD_MANAGER_CONTROLLER,
    PROVIDER,
    VIRTUAL_MACHINE,
    VM_CLASS,
    VM_IMAGE,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.virtualmachine import controller as virtualmachine
from banlieue.reconcilers.vspherecluster import controller as vspherecluster
from banlieue.runtime.client import Client
from banlieue.runtime.errors import NotFound
from banlieue.runtime.kinds import NAMESPACE
from banlieue.runtime.manager import Manager

WRITES = ("POST", "PUT", "PATCH", "DELETE")


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    """``reconciler_harness.eventually`` as these tests wait: ``timeout`` 10 s by default, a poll
    every 50 ms, and NotFound (the object not created yet, or already gone) counts as "not yet"."""
    return await reconciler_harness.eventually(check, timeout, interval=0.05, ignore=(NotFound,))


@dataclass
class Env:
    """A namespace with the controller role's controllers running, and a client for the test."""

    client: Client
    namespace: str
    server: Any

    def controller_writes(self, name: str) -> list[str]:
        """Writes the controller made for VM ``name``: its VM and VSphereMachine, except the VM
        creation and the VSphereMachine status and finalizer writes the test makes as provider."""
        out = []
        for r in self.server.request_log():
            if r.method not in WRITES or f"/namespaces/{self.namespace}/" not in r.path:
                continue
            if r.path.endswith(f"/virtualmachines/{name}") or r.path.endswith(f"/virtualmachines/{name}/status"):
                out.append(f"{r.method} {r.path.rsplit('/', 2)[-2:]} {r.query}")
            elif r.path.endswith(f"/vspheremachines/{name}") and (r.method == "DELETE" or "fieldManager" in r.query):
                out.append(f"{r.method} vsm {r.query}")
        return out

    # --- the provider role, played by the test ---------------------------------------------
    async def provider(self, name: str, domains: list[dict[str, Any]], labels: dict[str, str] | None = None) -> None:
        body = {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
                "spec": {"providerClassRef": {"name": "vsphere"},
                         "connection": {"endpoint": f"https://{name}.invalid/sdk", "credentialsRef": {"name": "creds"}},
                         "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "LocalDS_0"}}],
                                          "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}}}
        await self.client.create(PROVIDER, body)
        await self.provider_status(name, domains)

    async def provider_status(self, name: str, domains: list[dict[str, Any]]) -> None:
        await self.client.patch_status(PROVIDER, name, self.namespace, {"status": {"failureDomains": domains}})

    async def image_ready(self, providers: list[str], image: str = "ubuntu") -> None:
        # The row lives on the Provider (issue 23: the cluster-scoped VMImage names no Provider).
        row = {"name": image, "ready": True, "reason": "Reconciled", "resolvedRef": "vm-42"}
        for p in providers:
            await self.client.patch_status(PROVIDER, p, self.namespace, {"status": {"images": [row]}})

    async def machine_status(self, name: str, status: dict[str, Any], provider_id: str | None = None) -> None:
        if provider_id is not None:
            await self.client.patch(VSPHERE_MACHINE, name, self.namespace, {"spec": {"providerID": provider_id}})
        await self.client.patch_status(VSPHERE_MACHINE, name, self.namespace, {"status": status})

    async def provision(self, name: str, power: str = "PoweredOn") -> None:
        await self.machine_status(name, {
            "initialization": {"provisioned": True}, "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            "powerState": power, "failureDomain": "x",
            "conditions": [cond("Ready", "True", "Provisioned")]}, provider_id=f"vsphere://{name}-uuid")

    # --- the user's objects ---------------------------------------------------------------
    async def vm(self, name: str, **spec: Any) -> dict[str, Any]:
        labels = spec.pop("labels", {"app": "web"})
        body = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
                "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"}, **spec}}
        return await self.client.create(VIRTUAL_MACHINE, body)

    async def get_vm(self, name: str) -> dict[str, Any]:
        return await self.client.get(VIRTUAL_MACHINE, name, self.namespace)

    async def get_vsm(self, name: str) -> dict[str, Any]:
        return await self.client.get(VSPHERE_MACHINE, name, self.namespace)

    async def condition(self, name: str, type_: str) -> dict[str, Any]:
        vm = await self.get_vm(name)
        return next((c for c in (vm.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def cond(type_: str, status: str, reason: str) -> dict[str, Any]:
    """A condition as the provider role writes it (lastTransitionTime fixed)."""
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def fd(name: str, cluster: str, mem: int = 65536, dc: str = "dc0") -> dict[str, Any]:
    return {"name": name, "labels": {"dc": dc, "cluster": cluster}, "attributes": {
        "availableStorageClasses": ["standard"], "availableNetworkClasses": ["default"], "features": ["bios", "efi"],
        "capacity": {"cpuMHz": 10000, "memoryMiB": mem, "storageGiB": 1000},
        "raw": {"datacenter": dc.upper(), "cluster": cluster.upper()}}}


async def _shared_objects(client: Client) -> None:
    """VMClass ``small`` and VMImage ``ubuntu`` (cluster-scoped)."""
    for kind, body in (
        (VM_CLASS, {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "small"}, "spec": {
            "hardware": {"cpus": 2, "memoryMiB": 4096, "disks": [{"name": "os", "sizeGiB": 20, "storageClass": "standard"}]},
            "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}, "firmware": "efi"}}),
        (VM_IMAGE, {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": "ubuntu"}, "spec": {
            "osDistribution": "ubuntu", "osVersion": "22.04",
            "sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "ubuntu-2204"}]}}),
    ):
        await client.create(kind, body)


@contextlib.asynccontextmanager
async def running_controllers(apiserver: Any, *, shared: bool = True, watch_filter: str | None = None) -> AsyncIterator[Env]:
    apiserver.server.load_crd_dir(CRD_DIR)
    client = new_client(apiserver.url)
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if shared:
        await _shared_objects(client)
    mgr = Manager(new_client(apiserver.url), namespace=namespace, metrics_bind_address="127.0.0.1:0",
                  health_probe_bind_address="127.0.0.1:0", handle_signals=False, graceful_shutdown_timeout=2.0)
    recorder = mgr.get_event_recorder(FIELD_MANAGER_CONTROLLER)
    ctx = RoleContext(client=mgr.client, cache=mgr.cache, recorder=recorder, field_manager=FIELD_MANAGER_CONTROLLER,
                      namespace=namespace, max_concurrent_reconciles=2, watch_filter=watch_filter)
    virtualmachine.setup(mgr, ctx)
    vspherecluster.setup(mgr, ctx)
    task = asyncio.create_task(mgr.start())
    try:
        async with asyncio.timeout(15):
            await mgr.elected.wait()
        yield Env(client, namespace, apiserver.server)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
