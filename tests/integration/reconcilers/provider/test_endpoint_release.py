"""Issue 23 cases 6 and 5 (allow-list). Case 6: every distinct endpoint a Provider ever named kept a thread pool, its probe,
caches and Prometheus series for the life of the process. Providers with distinct endpoints are
created (each one dialled) and deleted; the endpoint threads, the backend's endpoint table and
the metric series labelled with those Providers return to what they were before."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY
from provider_role import condition, provider_body, provider_with, running_role, secret_body
from reconciler_harness import eventually

from banlieue.backends.vsphere.allowlist import parse_networks
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import PROVIDER, SECRET
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.runtime.client import Client
from banlieue.runtime.errors import NotFound
from banlieue.testing.vcsim import VcsimProcess

N = 8


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released): a dial is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def endpoint_threads(labels: set[str]) -> list[str]:
    """Names of live threads of those endpoints (pool ``vsphere-<label>_N``, probe ``vsphere-probe-<label>``)."""
    return sorted(t.name for t in threading.enumerate() if any(label in t.name for label in labels))


def series_of(providers: set[str]) -> list[tuple[str, dict[str, str]]]:
    """Samples of banlieue_vsphere_* whose ``provider`` label is one of ``providers``."""
    out = []
    for family in REGISTRY.collect():
        if not family.name.startswith("banlieue_vsphere_"):
            continue
        out += [(s.name, s.labels) for s in family.samples if s.labels.get("provider") in providers]
    return out


@pytest.mark.vcsim
async def test_deleted_providers_release_their_endpoint_threads_caches_and_series(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend,
) -> None:
    names = [f"gone-{i}" for i in range(N)]
    refused = {name: f"127.0.0.1:{closed_port()}" for name in names}
    providers = {f"{namespace}/{n}" for n in [*names, "live"]}
    labels = {*refused.values(), vcsim.endpoint}
    assert endpoint_threads(labels) == [] and series_of(providers) == []
    for name in [*names, "live"]:
        await client.create(SECRET, secret_body(f"{name}-creds", namespace, username=vcsim.username, password=vcsim.password))
        body = provider_body(name, namespace, vcsim)
        if name in refused:
            body["spec"]["connection"]["endpoint"] = refused[name]
        await client.create(PROVIDER, body)
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "live", namespace, "Reconciled", "True")
        for name in names:
            await provider_with(client, name, namespace, "ConnectFailed", "False")
        # Every endpoint was dialled: a pool thread each, the live one's session, probe and series.
        assert set(refused.values()) <= set(backend.sessions.endpoints)
        assert len(endpoint_threads(labels)) >= N + 1
        assert {s[1]["provider"] for s in series_of(providers)} == providers
        # A Provider moved to another endpoint: the old endpoint's session, pool and probe go.
        moved = f"127.0.0.1:{closed_port()}"
        labels.add(moved)
        await client.patch(PROVIDER, "live", namespace, {"spec": {"connection": {"endpoint": moved}}})

        async def old_endpoint_released() -> bool:
            return vcsim.endpoint not in backend.sessions.endpoints and not endpoint_threads({vcsim.endpoint})

        await eventually(old_endpoint_released, timeout=30.0, what="the endpoint the Provider left released")
        for name in [*names, "live"]:
            await client.delete(PROVIDER, name, namespace)

        async def all_gone() -> bool:
            for name in [*names, "live"]:
                try:
                    await client.get(PROVIDER, name, namespace)
                    return False
                except NotFound:
                    pass
            return True

        await eventually(all_gone, timeout=30.0, what="Providers deleted (finalizer released)")

        def left() -> tuple[list[str], list[str], list[tuple[str, dict[str, str]]]]:
            return sorted(labels & set(backend.sessions.endpoints)), endpoint_threads(labels), series_of(providers)

        async def released() -> bool:
            return left() == ([], [], [])

        try:
            await eventually(released, timeout=30.0, what="endpoints, their threads and metric series released")
        except AssertionError as err:
            raise AssertionError(f"{err}; left (endpoints, threads, series): {left()}") from None
    assert not [k for k in backend.sessions.sessions if k[0] in providers]
    assert not [k for k in backend._templates if k[0] in labels] and not labels & set(backend._indexes)


@pytest.mark.vcsim
async def test_an_endpoint_outside_the_allow_list_is_never_dialled(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess,
) -> None:
    """Issue 23 case 5, --allowed-endpoint-cidrs: a Provider whose endpoint resolves outside
    the allowed networks gets EndpointNotAllowed and no round trip is made (the vcsim would
    answer)."""
    fenced = VSphereBackend(max_workers=2, request_timeout=10.0, allowed_networks=parse_networks("10.0.0.0/8"))
    try:
        await client.create(SECRET, secret_body("fenced-creds", namespace, username=vcsim.username, password=vcsim.password))
        await client.create(PROVIDER, provider_body("fenced", namespace, vcsim))
        async with running_role(apiserver, [provider_reconciler.setup], fenced):
            obj = await provider_with(client, "fenced", namespace, "EndpointNotAllowed", "False")
        reachable = condition(obj, "ProviderReachable")
        assert (reachable["status"], reachable["reason"]) == ("False", "EndpointNotAllowed")
        assert "--allowed-endpoint-cidrs" in reachable["message"] and "127.0.0.1" not in reachable["message"]
        ep = fenced.sessions.endpoints.get(vcsim.endpoint)
        assert ep is None or ep.soap_requests == 0, "a request reached the fenced-off endpoint"
        assert not fenced.sessions.sessions
    finally:
        await fenced.close()
