"""Cluster API installed after banlieue started (issue 21, item 4): a CAPI-labelled
VSphereMachine says at once what it waits for, and the CAPI kinds are picked up within seconds
of their CRDs being created (as ``clusterctl init`` would: POST customresourcedefinitions).

A real Manager running the VSphereMachine controller against the API-server double; no vCenter
is needed (the machine never gets past waiting for CAPI). With ``BANLIEUE_TEST_APISERVER=real``
the test gets a kube-apiserver of its own: the session's shared one has Cluster API installed by
the tests before it (the CAPI tier, the CAPI VSphereMachine tests), and "installed later" needs a
server without it."""

from __future__ import annotations

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
