"""Provider finalizer ``banlieue.io/provider`` with a real Manager (Provider controller only)
against the API-server double and vcsim: a Provider in use is held (``Ready`` False
``Deleting``) while VSphereMachines reference it, by ``spec.providerRef`` or by a failure domain
it publishes; the last one going releases it at once (VSphereMachine -> Provider watch)."""

from __future__ import annotations

from typing import Any

import pytest
from provider_role import (
    provider_body,
    provider_with,
    running_role,
    secret_body,
)
from reconciler_harness import eventually

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import PROVIDER, SECRET, VSPHERE_MACHINE
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.runtime.client import Client
from banlieue.runtime.errors import NotFound
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]
FIN = "banlieue.io/provider"


def machine_body(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": "t", "numCPUs": 1, "memoryMiB": 512, **spec}}


async def gone(client: Client, kind: Any, name: str, ns: str) -> bool:
    try:
        await client.get(kind, name, ns)
    except NotFound:
        return True
    return False


async def test_provider_held_while_machines_use_it(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess,
                                                   backend: VSphereBackend) -> None:
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        ready = await provider_with(client, "vc1", namespace, "Reconciled", "True")
        assert FIN in ready["metadata"]["finalizers"]
        fd = ready["status"]["failureDomains"][0]["name"]
        # One machine names the Provider, one only a failure domain it publishes, one another Provider.
        await client.create(VSPHERE_MACHINE, machine_body("by-ref", namespace, providerRef={"name": "vc1"}))
        await client.create(VSPHERE_MACHINE, machine_body("by-fd", namespace, failureDomain=fd))
        await client.create(VSPHERE_MACHINE, machine_body("other", namespace, providerRef={"name": "vc2"}))

        await client.delete(PROVIDER, "vc1", namespace)
        held = await provider_with(client, "vc1", namespace, "Deleting", "False")
        message = next(c for c in held["status"]["conditions"] if c["type"] == "Ready")["message"]
        assert "2 VSphereMachine(s)" in message and "by-fd, by-ref" in message and "other" not in message
        assert held["metadata"]["finalizers"] == [FIN] and held["status"]["failureDomains"]

        await client.delete(VSPHERE_MACHINE, "by-ref", namespace)
        await provider_with(client, "vc1", namespace, "Deleting", "False")

        async def one_left() -> bool:
            obj = await client.get(PROVIDER, "vc1", namespace)
            return "1 VSphereMachine(s)" in next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")["message"]

        await eventually(one_left, timeout=20.0, what="message counts one machine")
        await client.delete(VSPHERE_MACHINE, "by-fd", namespace)
        # Released by the machine's delete event, well before the 60 s safety re-check.
        await eventually(lambda: gone(client, PROVIDER, "vc1", namespace), timeout=10.0, what="Provider removed")


async def test_unused_provider_goes_at_once(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess,
                                            backend: VSphereBackend) -> None:
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "vc1", namespace, "Reconciled", "True")
        await client.delete(PROVIDER, "vc1", namespace)
        await eventually(lambda: gone(client, PROVIDER, "vc1", namespace), timeout=10.0, what="Provider removed")
