"""VMImage reconciler end to end: Provider + VMImage controllers in one real Manager against the
API-server double and two vcsims (one with the template in both datacenters, one without)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from provider_role import (
    answered_calls,
    condition,
    provider_body,
    provider_with,
    running_role,
    secret_body,
    silent_listener,
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


async def image_rows(client: Client, namespace: str, image: str) -> dict[str, dict[str, Any]]:
    """The ``status.images`` row of ``image`` on each Provider of ``namespace``, by Provider name
    (issue 23: the rows live on the namespaced Provider, not on the cluster-scoped VMImage)."""
    out: dict[str, dict[str, Any]] = {}
    for p in (await client.list(PROVIDER, namespace))["items"]:
        for r in (p.get("status") or {}).get("images") or []:
            if r["name"] == image:
                out[p["metadata"]["name"]] = r
    return out


async def rows_of(client: Client, namespace: str, name: str, want: int) -> dict[str, dict[str, Any]] | None:
    rows = await image_rows(client, namespace, name)
    return rows if len(rows) == want and all(r.get("reason") != "LookupFailed" for r in rows.values()) else None


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

        async def settled() -> dict[str, dict[str, Any]] | None:
            rows = await rows_of(client, namespace, name, 3)
            # The rows of the two reachable Providers are final once both datacenters were searched:
            # before a Provider's failure domains are known its row is the first match alone
            # ("vm-194", seen by a full run that read the rows in between).
            if (rows is None or not rows["with"]["ready"] or "DC1:" not in (rows["with"].get("resolvedRef") or "")
                    or "DC1" not in rows["without"].get("message", "")):
                return None
            obj = await client.get(VM_IMAGE, name)
            return rows if (obj.get("status") or {}).get("providers") == 3 else None

        rows = await eventually(settled, timeout=20.0, what="VMImage rows for both Providers")
        obj = await client.get(VM_IMAGE, name)
    assert rows["with"]["reason"] == "Reconciled"
    refs = rows["with"]["resolvedRef"].split(",")
    assert [r.split(":")[0] for r in refs] == ["DC0", "DC1"] and all(r.split(":")[1].startswith("vm-") for r in refs)
    assert rows["without"]["ready"] is False and rows["without"]["reason"] == "TemplateNotFound"
    assert "ubuntu-22.04" in rows["without"]["message"]
    assert rows["nosecret"]["ready"] is False and rows["nosecret"]["reason"] == "SecretUnavailable"
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")
    # Issue 23 case 8: the cluster-scoped VMImage counts; it names no namespace nor Provider.
    assert ready["message"] == "ready on 1 of 3 Providers; not ready on 2 (SecretUnavailable: 1, TemplateNotFound: 1)"
    assert (obj["status"]["providers"], obj["status"]["readyProviders"]) == (3, 1)
    assert namespace not in str(obj["status"]) and "nosecret" not in str(obj["status"])
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

        async def ready_here() -> bool:
            row = (await image_rows(client, namespace, name)).get("vc") or {}
            obj = await client.get(VM_IMAGE, name)
            return bool(row.get("ready")) and "," in row.get("resolvedRef", "") and obj["status"].get("readyProviders") == 1

        await eventually(ready_here, timeout=20.0, what="VMImage ready on the new Provider")
        # The Provider controller's own status writes leave the VMImage controller's rows alone
        # (separate field managers): touch its status and see the row stay.
        prov = await client.get(PROVIDER, "vc", namespace)
        managers = {m["manager"] for m in prov["metadata"].get("managedFields") or []}
        assert any(m.endswith("-vmimage") for m in managers), managers
        # The VMImage deleted: its row leaves the Provider.
        await client.delete(VM_IMAGE, name)

        async def row_gone() -> bool:
            return "vc" not in await image_rows(client, namespace, name)

        await eventually(row_gone, timeout=20.0, what="row of the deleted VMImage removed from the Provider")


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
            got = (await image_rows(client, namespace, name)).get("badca")
            return got if got and got.get("reason") == "ConnectFailed" else None

        got = await eventually(row, timeout=20.0, what="VMImage row ConnectFailed")
    message = condition(prov, "Ready")["message"]
    assert message.startswith("spec.connection.caBundle is not a valid PEM certificate bundle (read from inline)")
    assert condition(prov, "ProviderReachable")["reason"] == "TLSVerifyFailed"
    assert "see the Provider's Ready condition" in got["message"] and got["ready"] is False


@pytest.mark.vcsim
async def test_a_silent_vcenter_delays_no_other_providers_row(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 23 case 4: a Provider whose endpoint accepts TCP and never answers (a listener on
    127.0.0.1 that accepts and reads nothing) held every VMImage's status back until the SOAP
    request timeout (120 s). With a per-Provider lookup deadline the other row is written at once
    and the silent one reports ConnectFailed after the deadline."""
    monkeypatch.setattr(vmimage_reconciler, "LOOKUP_DEADLINE_SECONDS", 3.0)
    name = f"ubuntu-{namespace}"
    with silent_listener() as silent:
        for prov in ("good", "silent"):
            await client.create(SECRET, secret_body(f"{prov}-creds", namespace, username=vcsim.username, password=vcsim.password))
        await client.create(PROVIDER, provider_body("good", namespace, vcsim))
        hung = provider_body("silent", namespace, vcsim)
        hung["spec"]["connection"]["endpoint"] = silent.endpoint
        await client.create(PROVIDER, hung)
        await client.create(VM_IMAGE, image_body(name))
        async with running_role(apiserver, [vmimage_reconciler.setup], backend):
            started = time.monotonic()

            async def both_rows() -> dict[str, dict[str, Any]] | None:
                rows = await image_rows(client, namespace, name)
                return rows if rows.get("good", {}).get("ready") and "silent" in rows else None

            rows = await eventually(both_rows, timeout=20.0, what="the good Provider's row next to the silent one's")
            took = time.monotonic() - started
    assert rows["silent"]["ready"] is False and rows["silent"]["reason"] == "ConnectFailed", rows["silent"]
    assert silent.accepted, "the silent listener was never dialled: the test proves nothing"
    assert took < 15.0, f"status took {took:.1f} s"


@pytest.mark.vcsim
async def test_a_busy_vcenter_keeps_its_row_while_the_lookup_waits_its_turn(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found at the 10,000-VM cold start (``bench/e2e.py --only memory``, 2026-12-07): the lookup
    waited in the vCenter's thread pool behind thousands of VM reads that the vCenter answered,
    past ``LOOKUP_DEADLINE_SECONDS``, and the row turned ``ConnectFailed`` (then ready again),
    re-enqueuing every VM of the image each time. The deadline counts silence: here the pool's
    one worker is held for 4 s by calls the vCenter answers, and the lookup of a new generation
    waits its turn."""
    monkeypatch.setattr(vmimage_reconciler, "LOOKUP_DEADLINE_SECONDS", 1.0)
    one = VSphereBackend(max_workers=1, task_timeout=60.0, request_timeout=10.0, watch_max_wait=5.0, index_ttl=1.0)
    name = f"ubuntu-{namespace}"
    try:
        await client.create(SECRET, secret_body("good-creds", namespace, username=vcsim.username, password=vcsim.password))
        await client.create(PROVIDER, provider_body("good", namespace, vcsim))
        await client.create(VM_IMAGE, image_body(name))
        async with running_role(apiserver, [vmimage_reconciler.setup], one):
            await eventually(lambda: rows_of(client, namespace, name, 1), timeout=20.0, what="the first row")
            conn = next(iter(one.sessions.sessions.values())).conn
            busy = asyncio.ensure_future(one.sessions.run(conn, answered_calls(4.0)))
            await asyncio.sleep(0.2)  # the worker is taken
            image = await client.get(VM_IMAGE, name)
            image["spec"]["osVersion"] = "22.04.5"
            edited = await client.update(VM_IMAGE, image)
            seen: list[dict[str, Any]] = []
            while not busy.done():
                seen.append((await image_rows(client, namespace, name))["good"])
                await asyncio.sleep(0.2)
            sent = busy.result()

            async def new_generation() -> dict[str, Any] | None:
                got = await client.get(VM_IMAGE, name)
                return got if (got.get("status") or {}).get("observedGeneration") == edited["metadata"]["generation"] else None

            final = await eventually(new_generation, timeout=20.0, what="the new generation looked up")
            row = (await image_rows(client, namespace, name))["good"]
    finally:
        await one.close()
    assert sent >= 10, f"only {sent} calls answered while the pool was held"
    assert len(seen) >= 10 and all(r["ready"] for r in seen), [r for r in seen if not r["ready"]][:1]
    assert row["ready"] is True and row["reason"] == "Reconciled", row
    assert final["status"]["readyProviders"] == 1, final["status"]
