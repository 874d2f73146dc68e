"""VMImage reconciler end to end: Provider + VMImage controllers in one real Manager against the
API-server double and two vcsims (one with the template in both datacenters, one without)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from provider_role import (
    condition,
    provider_body,
    provider_with,
    running_role,
    secret_body,
)
from reconciler_harness import eventually

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import PROVIDER, SECRET, VM_IMAGE
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.reconcilers.vmimage import controller as vmimage_reconciler
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess


def image_body(name: str, ref: str = "ubuntu-22.04") -> dict[str, Any]:
    return {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": name},
        "spec": {"osFamily": "linux", "osDistribution": "ubuntu", "osVersion": "22.04",
                 "sources": [{"providerClass": "vsphere", "kind": "Template", "ref": ref}]},
    }


async def rows_of(client: Client, name: str, want: int) -> dict[str, Any] | None:
    obj = await client.get(VM_IMAGE, name)
    rows = (obj.get("status") or {}).get("perProvider") or []
    return obj if len(rows) == want and all(r.get("reason") != "LookupFailed" for r in rows) else None


@pytest.mark.vcsim
async def test_vmimage_rows_for_two_providers(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, vcsim_factory: Callable[..., VcsimProcess],
    backend: VSphereBackend,
) -> None:
    bare = vcsim_factory(templates=["debian-12"])
    name = f"ubuntu-{namespace}"
    for prov, vc in (("with", vcsim), ("without", bare)):
        await client.create(SECRET, secret_body(f"{prov}-creds", namespace, username=vc.username, password=vc.password))
        await client.create(PROVIDER, provider_body(prov, namespace, vc))
    await client.create(PROVIDER, provider_body("nosecret", namespace, vcsim))
    await client.create(VM_IMAGE, image_body(name))
    async with running_role(apiserver, [provider_reconciler.setup, vmimage_reconciler.setup], backend):
        await provider_with(client, "with", namespace, "Reconciled", "True")
        await provider_with(client, "without", namespace, "Reconciled", "True")

        async def settled() -> dict[str, Any] | None:
            obj = await rows_of(client, name, 3)
            if obj is None:
                return None
            rows = {r["providerName"]: r for r in obj["status"]["perProvider"]}
            # the rows of the two reachable Providers are final once both datacenters were searched
            return obj if rows["with"]["ready"] and "DC1" in rows["without"].get("message", "") else None

        obj = await eventually(settled, timeout=20.0, what="VMImage rows for both Providers")
    rows = {r["providerName"]: r for r in obj["status"]["perProvider"]}
    assert all(r["providerNamespace"] == namespace for r in rows.values())
    assert rows["with"]["reason"] == "Reconciled"
    refs = rows["with"]["resolvedRef"].split(",")
    assert [r.split(":")[0] for r in refs] == ["DC0", "DC1"] and all(r.split(":")[1].startswith("vm-") for r in refs)
    assert rows["without"]["ready"] is False and rows["without"]["reason"] == "TemplateNotFound"
    assert "ubuntu-22.04" in rows["without"]["message"]
    assert rows["nosecret"]["ready"] is False and rows["nosecret"]["reason"] == "SecretUnavailable"
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")
    assert f"{namespace}/without (TemplateNotFound)" in ready["message"]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


@pytest.mark.vcsim
async def test_vmimage_follows_provider_changes(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend
) -> None:
    name = f"ubuntu-{namespace}"
    await client.create(VM_IMAGE, image_body(name))
    async with running_role(apiserver, [provider_reconciler.setup, vmimage_reconciler.setup], backend):

        async def no_provider() -> bool:
            ready = condition(await client.get(VM_IMAGE, name), "Ready")
            return (ready.get("status"), ready.get("reason")) == ("False", "NoMatchingProvider")

        await eventually(no_provider, timeout=20.0, what="VMImage without any Provider")
        # A Provider appears: the Provider watch re-reconciles the image (no 5-minute wait).
        await client.create(SECRET, secret_body("vc-creds", namespace, username=vcsim.username, password=vcsim.password))
        await client.create(PROVIDER, provider_body("vc", namespace, vcsim))

        async def ready_here() -> dict[str, Any] | None:
            obj = await client.get(VM_IMAGE, name)
            rows = [r for r in obj["status"].get("perProvider") or [] if r["providerNamespace"] == namespace]
            return obj if rows and rows[0]["ready"] and "," in rows[0].get("resolvedRef", "") else None

        await eventually(ready_here, timeout=20.0, what="VMImage ready on the new Provider")
        await client.delete(PROVIDER, "vc", namespace)

        async def row_gone() -> bool:
            obj = await client.get(VM_IMAGE, name)
            return not [r for r in obj["status"].get("perProvider") or [] if r["providerNamespace"] == namespace]

        await eventually(row_gone, timeout=20.0, what="row of the deleted Provider removed")


@pytest.mark.vcsim
async def test_unparsable_ca_bundle_same_reason_and_message_on_provider_and_image(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend
) -> None:
    name = f"ubuntu-{namespace}"
    await client.create(SECRET, secret_body("badca-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("badca", namespace, vcsim, ca={"inline": "not a pem"}))
    await client.create(VM_IMAGE, image_body(name))
    async with running_role(apiserver, [provider_reconciler.setup, vmimage_reconciler.setup], backend):
        prov = await provider_with(client, "badca", namespace, "TLSVerifyFailed", "False")

        async def row() -> dict[str, Any] | None:
            obj = await client.get(VM_IMAGE, name)
            rows = [r for r in obj["status"].get("perProvider") or [] if r["providerNamespace"] == namespace]
            return rows[0] if rows and rows[0].get("reason") == "ConnectFailed" else None

        got = await eventually(row, timeout=20.0, what="VMImage row ConnectFailed")
    message = condition(prov, "Ready")["message"]
    assert message.startswith("spec.connection.caBundle is not a valid PEM certificate bundle: ") and "(read from inline)" in message
    assert condition(prov, "ProviderReachable")["reason"] == "TLSVerifyFailed"
    assert got["message"] == message and got["ready"] is False
