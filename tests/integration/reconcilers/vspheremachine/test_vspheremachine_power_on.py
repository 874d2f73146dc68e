"""Issue 22: a machine's power-on is followed in the background (vspheremachine.power_ons), not
inside its reconcile: the vCenter slot goes to the next clone as soon as the PowerOnVM_Task is
sent, and a power-on that fails is reported as a waited-for one was. Real Manager, API-server
double over HTTP, vcsim over SOAP (its PowerOn task held back by ``task_delay``)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from reconciler_harness import eventually, vms_with_uid
from test_vspheremachine_vcenter_slots import two_workers
from test_vspheremachine_vcsim import _events_with, _powered_on, machine, make_provider, running, wait_reason

from banlieue.reconcilers.kinds import VSPHERE_MACHINE
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]

POWER_ON_MS = 5000
"""How long vcsim holds each PowerOn task back (``task_delay``) before it runs."""


def _power_states(vc: VcsimProcess, uid: str) -> list[str]:
    """``runtime.powerState`` of every VM of ``vc`` carrying ``uid`` (blocking SOAP calls)."""
    ctx = ssl.create_default_context(cafile=vc.ca_file)
    si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password, sslContext=ctx)
    try:
        return [str(vm.runtime.powerState) for vm in vms_with_uid(si, uid)]
    finally:
        Disconnect(si)


async def test_the_vcenter_slot_is_free_while_a_power_on_runs(
    apiserver: Any, client: Client, ns: str, vcsim_factory: Callable[..., VcsimProcess],
) -> None:
    """Two workers: one slot for the vCenter. m1's power-on takes 5 s; m2 is cloned and its own
    power-on sent meanwhile (before: m2's clone waited for m1's power-on to end)."""
    vc = vcsim_factory(dc=1, cluster=1, task_delay={"LockHandoff": 0, "PowerOn": POWER_ON_MS})
    await make_provider(client, ns, vc)
    async with two_workers(apiserver, ns):
        m1 = await client.create(VSPHERE_MACHINE, machine("m1", ns))
        m2 = await client.create(VSPHERE_MACHINE, machine("m2", ns))
        await eventually(lambda: _powered_on(client, ns, "m1"), what="m1 cloned, power-on sent")
        sent = time.monotonic()
        await eventually(lambda: _powered_on(client, ns, "m2"), timeout=30, what="m2 cloned, power-on sent")
        took = time.monotonic() - sent
        m1_states = _power_states(vc, m1["metadata"]["uid"])
        assert m1_states == ["poweredOff"], (
            f"m2 was cloned {took:.1f} s after m1's power-on was sent, with m1's VM {m1_states}: "
            "m2 waited for m1's power-on")
        assert _power_states(vc, m2["metadata"]["uid"]) == ["poweredOff"]
        # Both power-ons end; each machine is powered on, with its Event, and reaches its last
        # step (vcsim's guests report no address here).
        for name in ("m1", "m2"):
            obj = await wait_reason(client, ns, name, "WaitingForIPAddress", timeout=30)
            assert obj["status"]["powerState"] == "PoweredOn"
        events = await eventually(lambda: _events_with(client, ns, "PoweredOn"), what="PoweredOn Events")
        assert events is not None
        on = [e for e in (await client.list(_event_kind(), ns))["items"] if e["reason"] == "PoweredOn"]
        assert sorted(e["regarding"]["name"] for e in on) == ["m1", "m2"], on
        assert _power_states(vc, m1["metadata"]["uid"]) == ["poweredOn"]


def _event_kind() -> Any:
    from banlieue.runtime.kinds import EVENT
    return EVENT


async def test_a_power_on_vcenter_refuses_is_reported_then_sent_again(
    apiserver: Any, client: Client, ns: str, vcsim_factory: Callable[..., VcsimProcess],
) -> None:
    """vcsim refuses the first PowerOnVM_Task (InsufficientResourcesFault). The refusal, met in the
    background, reaches the machine's status and a Warning Event; the power-on is sent again
    and the machine goes on to its last step with one VM, powered on."""
    vc = vcsim_factory(dc=1, cluster=1, fault=["PowerOnVM_Task:InsufficientResourcesFault:1"])
    await make_provider(client, ns, vc)
    async with running(apiserver, ns):
        m = await client.create(VSPHERE_MACHINE, machine("m", ns))
        warned = await eventually(lambda: _warnings(client, ns, "m"), timeout=30, what="a Warning Event for the refusal")
        assert any("InsufficientResources" in e["note"] or "insufficient" in e["note"].lower() for e in warned), warned
        obj = await wait_reason(client, ns, "m", "WaitingForIPAddress", timeout=30)
        assert obj["status"]["powerState"] == "PoweredOn"
    assert _power_states(vc, m["metadata"]["uid"]) == ["poweredOn"]


async def _warnings(client: Client, ns: str, name: str) -> list[dict[str, Any]] | None:
    items = (await client.list(_event_kind(), ns))["items"]
    found = [e for e in items if e["type"] == "Warning" and e["regarding"]["name"] == name]
    return found or None
