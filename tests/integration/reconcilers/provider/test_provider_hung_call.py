"""A vCenter that hangs while the Provider's own reconcile has a call in flight (issue 21, found
trying ``banlieue dev`` as a new user: 12 VMs deleted, the re-measure they triggered was walking
vcenter-a's inventory when its simulator was frozen with SIGSTOP; the probe noticed within 7 s,
but the Provider's re-check waited behind the hung call for the request timeout, so
``ProviderReachable`` stayed True for over 60 s and 3 new VMs were placed on the frozen vCenter).

Real processes: the Provider controller in a Manager against the API-server double, a vcsim
frozen with SIGSTOP (it accepts connections and never answers), a 60 s request timeout."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from provider_role import condition, provider_body, provider_with, running_role, secret_body
from reconciler_harness import eventually

from banlieue.api.provider import PROVIDER_REACHABLE
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import PROVIDER, SECRET
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]
REQUEST_TIMEOUT = 60.0


async def test_a_call_in_flight_when_the_vcenter_hangs_does_not_hide_it(
    apiserver: Any, client: Client, namespace: str, vcsim_factory: Callable[..., VcsimProcess]
) -> None:
    vc = vcsim_factory(dc=1, cluster=1)
    backend = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=REQUEST_TIMEOUT, watch_max_wait=5.0, index_ttl=1.0)
    secret = secret_body("vc1-creds", namespace, username=vc.username, password=vc.password)
    await client.create(SECRET, secret)
    await client.create(PROVIDER, provider_body("vc1", namespace, vc))
    try:
        async with running_role(apiserver, [provider_reconciler.setup], backend):
            await provider_with(client, "vc1", namespace, "Reconciled", "True")
            os.kill(vc.process.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            try:
                # A re-check starts at once (the Secret is re-read every 0.5 s here): its first
                # call hangs, before the probe has noticed anything.
                secret["metadata"]["annotations"] = {"touched": "1"}
                await client.update(SECRET, secret)

                async def unreachable() -> dict[str, Any] | None:
                    obj = await client.get(PROVIDER, "vc1", namespace)
                    return obj if condition(obj, PROVIDER_REACHABLE).get("status") == "False" else None

                obj = await eventually(unreachable, timeout=25.0, what="ProviderReachable False while a call hangs")
                took = time.monotonic() - frozen
                assert took < REQUEST_TIMEOUT / 2, f"noticed after {took:.1f} s: it waited for the hung call"
                # The probe's "has not answered since T" is the manager log's detail; the condition
                # carries the one generic ConnectFailed message (issue 23 case 5).
                assert condition(obj, PROVIDER_REACHABLE)["reason"] == "ConnectFailed"
            finally:
                os.kill(vc.process.pid, signal.SIGCONT)
            await provider_with(client, "vc1", namespace, "Reconciled", "True")
    finally:
        await backend.close()
