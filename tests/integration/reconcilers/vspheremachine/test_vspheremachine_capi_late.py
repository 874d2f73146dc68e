"""Cluster API installed after banlieue started (issue 21, item 4): a CAPI-labelled
VSphereMachine says at once what it waits for, and the CAPI kinds are picked up within seconds
of their CRDs being created (as ``clusterctl init`` would: POST customresourcedefinitions).

A real Manager running the VSphereMachine controller against the API-server double; no vCenter
is needed (the machine never gets past waiting for CAPI). With ``BANLIEUE_TEST_APISERVER=real``
the test gets a kube-apiserver of its own: the session's shared one has Cluster API installed by
the tests before it (the CAPI tier, the CAPI VSphereMachine tests), and "installed later" needs a
server without it."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from test_vspheremachine_vcsim import ready_of, running, wait_reason

from banlieue.reconcilers.kinds import VSPHERE_MACHINE
from banlieue.reconcilers.vspheremachine.sources import CAPI_DISCOVERY_SECONDS
from banlieue.runtime.client import Client
from banlieue.testing import apiservers
from banlieue.testing.apiserver.fixture import ApiServerHandle, running_double
from banlieue.testing.envtest import envtest_binaries_missing, start_envtest
from banlieue.testing.realtier import RealApiServerHandle, real_integration_server

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from capi.crds import install

pytestmark = [pytest.mark.timeout(90)]


@pytest_asyncio.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[ApiServerHandle | RealApiServerHandle]:
    """An API server without Cluster API: a fresh double, or (real) an envtest of this test's own
    with banlieue installed behind ``kubectl proxy``."""
    if apiservers.selected() == "real":
        reason = envtest_binaries_missing()
        if reason:
            pytest.skip(reason)
        with start_envtest(tmp_path / "envtest") as env, real_integration_server(env, tmp_path) as (server, url, kubeconfig):
            yield RealApiServerHandle(server, url, kubeconfig, env)
        return
    async with running_double(tmp_path) as handle:
        yield handle


async def test_capi_installed_later_is_picked_up_in_seconds(apiserver: Any, client: Client, ns: str) -> None:
    await client.create(VSPHERE_MACHINE, {
        "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
        "metadata": {"name": "w1", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 2048}})
    async with running(apiserver, ns):
        started = time.monotonic()
        obj = await wait_reason(client, ns, "w1", "WaitingForClusterAPI", timeout=10)
        said = time.monotonic() - started
        ready = ready_of(obj)
        assert ready is not None and ready[0] == "False"
        message = next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Ready")
        assert "not served" in message and "cluster.x-k8s.io/v1beta2" in message, message

        installed = time.monotonic()
        await install(client)
        await wait_reason(client, ns, "w1", "WaitingForOwner", timeout=CAPI_DISCOVERY_SECONDS + 10)
        picked_up = time.monotonic() - installed
        print(f"\nCAPI path: Ready WaitingForClusterAPI {said:.1f} s after start; "
              f"CAPI CRDs picked up {picked_up:.1f} s after they were created")
        assert picked_up <= CAPI_DISCOVERY_SECONDS + 5


async def test_a_restart_does_not_flap_ready_while_the_capi_caches_sync(apiserver: Any, client: Client, ns: str) -> None:
    """CAPI installed and the machine reported before: a (re)started manager writes nothing
    about waiting for Cluster API while discovery and the CAPI caches are on their way (seconds),
    and goes straight to the machine's own state. Before, every CAPI machine was written
    ``WaitingForClusterAPI`` and back at each restart: at 1,000 machines, 1,000 status writes
    that slowed the very cache list they waited for to 12 s (issue 22, restart figure)."""
    await install(client)
    obj = await client.create(VSPHERE_MACHINE, {
        "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine",
        "metadata": {"name": "w2", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 2048}})
    obj = await client.patch_status(VSPHERE_MACHINE, "w2", ns, {"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "Provisioned", "message": "VM w2 is PoweredOn",
        "lastTransitionTime": "2026-12-06T00:00:00Z", "observedGeneration": 1}]}})
    reasons: list[str] = []

    async def watch() -> None:
        async for event in client.watch(VSPHERE_MACHINE, ns, resource_version=obj["metadata"]["resourceVersion"],
                                        timeout_seconds=60, allow_bookmarks=False):
            if event["type"] in ("ADDED", "MODIFIED") and event["object"]["metadata"]["name"] == "w2":
                ready = ready_of(event["object"])
                if ready is not None and (not reasons or reasons[-1] != ready[1]):
                    reasons.append(ready[1])

    watcher = asyncio.create_task(watch())
    try:
        async with running(apiserver, ns):
            await wait_reason(client, ns, "w2", "WaitingForOwner", timeout=CAPI_DISCOVERY_SECONDS + 10)
            await asyncio.sleep(0.5)  # the watch delivers what came before
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert "WaitingForOwner" in reasons, reasons
    assert "WaitingForClusterAPI" not in reasons, reasons
