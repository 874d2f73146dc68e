"""Writes per VSphereMachine (ADR 0011) with a real Manager against the API-server double (HTTP)
and vcsim (SOAP): a machine born with the provider's finalizer (as the VirtualMachine controller
applies it) gets no finalizer patch, and a progress-only status change is coalesced while the
last status write is younger than ``PROGRESS_WRITE_INTERVAL_SECONDS``: a fast IP goes from
``Cloning`` to ``Provisioned`` in one write, a slow one still shows ``WaitingForIPAddress``.
Every status write is counted from the double's request log and seen on a watch."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs

import pytest
from pyVmomi import vim
from reconciler_harness import eventually, vms_with_uid
from test_vspheremachine_vcsim import (
    FIN,
    _gone,
    _powered_on,
    machine,
    make_provider,
    ready_of,
    running,
    wait_reason,
)

from banlieue.reconcilers.kinds import (
    FIELD_MANAGER_CONTROLLER,
    FIELD_MANAGER_PROVIDER_VSPHERE,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.vspheremachine.progress import PROGRESS_WRITE_INTERVAL_SECONDS
from banlieue.runtime.client import Client
from banlieue.runtime.kinds import EVENT
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]


async def _no_memo(rec: Any, uid: str) -> bool:
    return uid not in rec._written_status and uid not in rec._written_provider_id


async def _born_with_finalizer(client: Client, ns: str, name: str) -> dict[str, Any]:
    """Create machine ``name`` as the VirtualMachine controller does: one server-side apply
    under its field manager, carrying the provider's finalizer."""
    body = machine(name, ns)
    body["metadata"]["finalizers"] = [FIN]
    return await client.apply(VSPHERE_MACHINE, body, field_manager=FIELD_MANAGER_CONTROLLER, force=True)


async def _ready_reasons(client: Client, ns: str, name: str, rv: str, final: str) -> list[str]:
    """The Ready reason of every version of ``name`` stored after ``rv``, until ``final``: a
    watch sends one event per write that changed the object, so this lists every status write."""
    seen: list[str] = []
    async for event in client.watch(VSPHERE_MACHINE, ns, resource_version=rv, timeout_seconds=60):
        obj = event.get("object") or {}
        if event["type"] != "MODIFIED" or obj.get("metadata", {}).get("name") != name:
            continue
        r = ready_of(obj)
        if r is not None and (not seen or seen[-1] != r[1]):
            seen.append(r[1])
        if r is not None and r[1] == final:
            break
    return seen


def _writes(apiserver: Any, name: str) -> list[str]:
    """Successful writes to VSphereMachine ``name``: ``PATCH`` / ``PATCH status`` with the field
    manager, or ``PATCH merge`` (a finalizer patch)."""
    out = []
    for r in apiserver.server.request_log(path_contains=f"/vspheremachines/{name}"):
        if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.status < 300:
            sub = " status" if r.path.endswith("/status") else ""
            fm = parse_qs(r.query).get("fieldManager", [""])[0]
            manager = {FIELD_MANAGER_CONTROLLER: "controller", FIELD_MANAGER_PROVIDER_VSPHERE: "provider"}.get(fm, "merge")
            out.append(f"{r.method}{sub} {manager}")
    return out


async def test_fast_ip_goes_from_cloning_to_provisioned_in_one_status_write(
    apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any,
) -> None:
    """The IP comes within the interval: no WaitingForIPAddress write, no finalizer patch. Writes:
    the controller's apply, Cloning, providerID, Provisioned."""
    await make_provider(client, ns, vcsim)
    async with running(apiserver, ns) as r:
        created = await _born_with_finalizer(client, ns, "quick")
        reasons = asyncio.create_task(_ready_reasons(client, ns, "quick", created["metadata"]["resourceVersion"], "Provisioned"))
        await eventually(lambda: _powered_on(client, ns, "quick"), what="spec.providerID written")
        [vm] = vms_with_uid(si, created["metadata"]["uid"])
        vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value="10.0.0.7")]))
        async with asyncio.timeout(30):
            assert await reasons == ["Cloning", "Provisioned"]
        assert _writes(apiserver, "quick") == ["PATCH controller", "PATCH status provider", "PATCH provider", "PATCH status provider"]
        obj = await client.get(VSPHERE_MACHINE, "quick", ns)
        assert obj["metadata"]["finalizers"] == [FIN] and obj["status"]["initialization"] == {"provisioned": True}
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        # Once the object shows what was written, the reconciler keeps no copy of it (10,000
        # provisioned machines kept 10,000 status copies): a label change makes one more
        # reconcile, which writes nothing and drops the memos.
        await client.patch(VSPHERE_MACHINE, "quick", ns, {"metadata": {"labels": {"touched": "yes"}}})
        rec = r.controller.reconciler
        uid = created["metadata"]["uid"]
        await eventually(lambda: _no_memo(rec, uid), what="status and providerID memos dropped")
        assert _writes(apiserver, "quick")[4:] == ["PATCH merge"]  # the label patch only
        # Events follow what was written: the Cloning and Provisioned transitions, no WaitingForIPAddress.
        events = await client.list(EVENT, ns)
        reasons = [e["reason"] for e in events["items"] if (e.get("regarding") or {}).get("name") == "quick"]
        assert {"Cloning", "Provisioned"} <= set(reasons) and "WaitingForIPAddress" not in reasons, reasons
        # Deletion: the provider drops the finalizer the controller's apply owns, after the VM is destroyed.
        await client.delete(VSPHERE_MACHINE, "quick", ns)
        await eventually(lambda: _gone(client, ns, "quick"), what="object deleted")
        assert vms_with_uid(si, created["metadata"]["uid"]) == []


async def test_slow_ip_still_shows_waiting_for_ip_address_within_the_interval(
    apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any,
) -> None:
    """No IP within the interval: WaitingForIPAddress is written once the interval since the
    Cloning write is over (not before, not much later), then Provisioned when the IP comes."""
    await make_provider(client, ns, vcsim)
    async with running(apiserver, ns):
        created = await _born_with_finalizer(client, ns, "slow-ip")
        reasons = asyncio.create_task(_ready_reasons(client, ns, "slow-ip", created["metadata"]["resourceVersion"], "Provisioned"))
        await wait_reason(client, ns, "slow-ip", "WaitingForIPAddress", timeout=PROGRESS_WRITE_INTERVAL_SECONDS + 20)
        cloning, waiting = [r.time for r in apiserver.server.request_log(path_contains="/vspheremachines/slow-ip/status")
                            if r.method == "PATCH" and r.status < 300]
        # The Cloning time is recorded to the second, so the deferral may end up to 1 s early.
        assert PROGRESS_WRITE_INTERVAL_SECONDS - 1.5 <= waiting - cloning <= PROGRESS_WRITE_INTERVAL_SECONDS + 5, waiting - cloning
        [vm] = vms_with_uid(si, created["metadata"]["uid"])
        vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value="10.0.0.8")]))
        async with asyncio.timeout(30):
            assert await reasons == ["Cloning", "WaitingForIPAddress", "Provisioned"]
        assert _writes(apiserver, "slow-ip") == ["PATCH controller", "PATCH status provider", "PATCH provider",
                                                 "PATCH status provider", "PATCH status provider"]
