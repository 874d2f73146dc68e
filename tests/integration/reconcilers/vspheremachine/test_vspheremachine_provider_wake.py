"""The VSphereMachine controller's vCenter watch starts as soon as a Provider appears (Provider
informer events wake the watcher; the periodic resync is only a safety net).

A real Manager against the API-server double (HTTP) and vcsim (SOAP through pyVmomi). The resync
is raised to 300 s here, so only the Provider event can start the watch in time: a VM powered off
behind banlieue's back must be noticed (and, the spec wanting it on, powered on again) within a
couple of seconds; the machine's own polls are 10 s or more apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_harness import b64, eventually, new_client, vms_with_uid

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import FIELD_MANAGER_PROVIDER_VSPHERE, PROVIDER, SECRET, VSPHERE_MACHINE
from banlieue.reconcilers.vspheremachine import controller as vspheremachine
from banlieue.reconcilers.vspheremachine import sources as vspheremachine_sources
from banlieue.runtime.client import Client
from banlieue.runtime.manager import Manager
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]
NOTICE_WITHIN = 3.0
"""Seconds within which a power change made behind banlieue's back must reach the status (the
watch waits at most ``watch_max_wait`` = 1 s per round; the old idle resync alone took up to 5 s
to start a new Provider's watch, and 300 s here)."""


@contextlib.asynccontextmanager
async def provider_manager(apiserver: Any, ns: str) -> AsyncIterator[vspheremachine_sources.VMWatch]:
    """A provider-role Manager running the vspheremachine controller in ``ns``; yields its VMWatch."""
    client = new_client(apiserver.url)
    mgr = Manager(client, namespace=ns, metrics_bind_address="0", health_probe_bind_address="0",
                  graceful_shutdown_timeout=5.0, handle_signals=False)
    backend = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=30.0, watch_max_wait=1.0)
    ctx = RoleContext(client=client, cache=mgr.cache, recorder=mgr.get_event_recorder(FIELD_MANAGER_PROVIDER_VSPHERE),
                      field_manager=FIELD_MANAGER_PROVIDER_VSPHERE, backend=backend, namespace=ns,
                      watch_filter=None, vsphere_task_timeout=60.0)
    watches: list[vspheremachine_sources.VMWatch] = []
    original = vspheremachine.VMWatch

    def recording(*args: Any, **kwargs: Any) -> vspheremachine_sources.VMWatch:
        watch = original(*args, **kwargs)
        watches.append(watch)
        return watch

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vspheremachine, "VMWatch", recording)
        vspheremachine.setup(mgr, ctx)
    task = asyncio.create_task(mgr.start())
    try:
        [watch] = watches
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await backend.close()
        await client.close()


async def test_provider_created_after_start_is_watched_at_once(
    apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a Provider event can start the watch in time: the safety-net resync is 300 s.
    monkeypatch.setattr(vspheremachine_sources, "WATCH_RESYNC_SECONDS", 300.0)
    async with provider_manager(apiserver, ns) as watch:
        await asyncio.sleep(1.0)  # the controller runs and its watcher has evaluated (no Provider)
        assert watch.wakes == 0 and not watch.watched
        await client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vc1-creds", "namespace": ns},
                                     "data": {"username": b64(vcsim.username), "password": b64(vcsim.password)}})
        await client.create(PROVIDER, {
            "apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": "vc1", "namespace": ns},
            "spec": {"providerClassRef": {"name": "vsphere"},
                     "connection": {"endpoint": vcsim.endpoint, "credentialsRef": {"name": "vc1-creds"},
                                    "caBundle": {"inline": vcsim.ca_pem}}},
        })
        await client.patch_status(PROVIDER, "vc1", ns, {"status": {"failureDomains": [
            {"name": "vc1-dc0-c0", "labels": {"dc": "DC0", "cluster": "DC0_C0"},
             "attributes": {"raw": {"datacenter": "DC0", "cluster": "DC0_C0"}}}]}})
        await eventually(lambda: _async(watch.watched == {f"{ns}/vc1"}), 5.0, "a Provider event started its vCenter watch",
                         interval=0.05)
        assert watch.wakes > 0

        created = await client.create(VSPHERE_MACHINE, {
            "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine", "metadata": {"name": "m1", "namespace": ns},
            "spec": {"providerRef": {"name": "vc1"}, "datacenter": "DC0", "cluster": "DC0_C0", "template": "ubuntu-22.04",
                     "numCPUs": 1, "memoryMiB": 512}})
        await eventually(lambda: _power(client, ns, "PoweredOn"), 30.0, "m1 provisioned and PoweredOn", interval=0.05)
        found = vms_with_uid(si, created["metadata"]["uid"])
        assert len(found) == 1, found
        vm = found[0]

        # Behind banlieue's back; _wait_task asserts the power-off succeeded. (Reading the power
        # state right after raced with the correction under test: banlieue, answered from the
        # change watch, had often powered the VM on again already.)
        await asyncio.to_thread(_wait_task, vm.PowerOffVM_Task())
        started = time.monotonic()
        await eventually(lambda: asyncio.to_thread(lambda: vm.runtime.powerState == "poweredOn"), NOTICE_WITHIN,
                         "the power-off noticed through the watch and the VM powered on again (spec powerState PoweredOn)",
                         interval=0.05)
        assert time.monotonic() - started < NOTICE_WITHIN

        # Deleting the Provider stops its watch at once too (not at the 300 s resync).
        assert watch.watched == {f"{ns}/vc1"}
        await client.delete(PROVIDER, "vc1", ns)
        await eventually(lambda: _async(not watch.watched), 5.0, "the deleted Provider's watch stopped", interval=0.05)


def _wait_task(task: Any) -> None:
    while task.info.state in ("queued", "running"):
        time.sleep(0.05)
    assert task.info.state == "success", task.info.error


async def _async(value: bool) -> bool:
    return value


async def _power(client: Client, ns: str, state: str) -> bool:
    obj = await client.get(VSPHERE_MACHINE, "m1", ns)
    return bool((obj.get("status") or {}).get("powerState") == state)
