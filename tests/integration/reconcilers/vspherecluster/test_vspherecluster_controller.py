"""The VSphereCluster controller in a real Manager against the API-server double: failure domains
aggregated from two Providers (two vCenters x three clusters = six), controlPlane flags,
re-aggregation when a Provider changes, no-op reconciles writing nothing."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from controller_role import Env, eventually, fd, running_controllers

from banlieue.reconcilers.kinds import CAPI_CLUSTER, PROVIDER, VSPHERE_CLUSTER

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from capi.crds import CLUSTER_CRD


def _cluster(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereCluster",
            "metadata": {"name": "demo", "namespace": namespace}, "spec": spec}


async def _status(env: Env) -> dict[str, Any]:
    obj = await env.client.get(VSPHERE_CLUSTER, "demo", env.namespace)
    return dict(obj.get("status") or {})


def _writes(env: Env) -> list[str]:
    return [f"{r.method} {r.path}" for r in env.server.request_log()
            if r.method in ("PATCH", "PUT") and r.path.endswith(f"/namespaces/{env.namespace}/vsphereclusters/demo/status")]


async def test_two_vcenters_three_clusters_six_failure_domains(apiserver: Any) -> None:
    async with running_controllers(apiserver, shared=False) as env:
        for p in ("vcenter-a", "vcenter-b"):
            await env.provider(p, [fd(f"{p}-dc0-c{i}", f"c{i}") for i in range(3)], {"site": p})
        await env.provider("other", [fd("other-dc0-c0", "c0")], {"site": "elsewhere"})
        await env.client.create(VSPHERE_CLUSTER, _cluster(env.namespace, {
            "controlPlaneEndpoint": {"host": "127.17.0.100", "port": 6443},
            "providerRefs": [{"name": "vcenter-a"}, {"name": "vcenter-b"}],
            "controlPlaneFailureDomainSelector": {"matchExpressions": [{"key": "cluster", "operator": "In", "values": ["c0", "c1"]}]},
        }))

        async def six() -> dict[str, Any] | None:
            status = await _status(env)
            return status if len(status.get("failureDomains") or []) == 6 else None

        status = await eventually(six)
        domains = {d["name"]: d for d in status["failureDomains"]}
        assert set(domains) == {f"{p}-dc0-c{i}" for p in ("vcenter-a", "vcenter-b") for i in range(3)}
        assert {n for n, d in domains.items() if d.get("controlPlane")} == {
            "vcenter-a-dc0-c0", "vcenter-a-dc0-c1", "vcenter-b-dc0-c0", "vcenter-b-dc0-c1"}
        assert domains["vcenter-b-dc0-c2"]["attributes"] == {"provider": "vcenter-b", "datacenter": "DC0", "cluster": "c2", "dc": "dc0"}
        assert status["initialization"] == {"provisioned": True}
        assert status["controlPlaneEndpoint"] == {"host": "127.17.0.100", "port": 6443}
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "Ready")

        # A selected Provider's inventory changes: the cluster follows.
        await env.provider_status("vcenter-b", [fd(f"vcenter-b-dc0-c{i}", f"c{i}") for i in range(4)])

        async def seven() -> bool:
            return len((await _status(env)).get("failureDomains") or []) == 7

        await eventually(seven)
        writes = _writes(env)
        # An unselected Provider changing re-enqueues the cluster but writes nothing.
        await env.provider_status("other", [fd("other-dc0-c9", "c9")])
        await asyncio.sleep(1.0)
        assert _writes(env) == writes


async def test_selector_and_paused(apiserver: Any) -> None:
    async with running_controllers(apiserver, shared=False) as env:
        await env.provider("vcenter-a", [fd("vcenter-a-dc0-c0", "c0")], {"site": "a"})
        await env.provider("vcenter-b", [fd("vcenter-b-dc0-c0", "c0")], {"site": "b"})
        await env.client.create(VSPHERE_CLUSTER, _cluster(env.namespace, {"providerSelector": {"matchLabels": {"site": "b"}}}))

        async def only_b() -> bool:
            return [d["name"] for d in (await _status(env)).get("failureDomains") or []] == ["vcenter-b-dc0-c0"]

        await eventually(only_b)
        await env.client.patch(VSPHERE_CLUSTER, "demo", env.namespace, {"spec": {"paused": True, "providerSelector": None}})

        async def paused() -> bool:
            conds = {c["type"]: c for c in (await _status(env)).get("conditions") or []}
            return conds.get("Paused", {}).get("status") == "True"

        await eventually(paused)
        assert [d["name"] for d in (await _status(env))["failureDomains"]] == ["vcenter-b-dc0-c0"]  # nothing else changed
        await env.client.patch(VSPHERE_CLUSTER, "demo", env.namespace, {"spec": {"paused": False}})

        async def both() -> bool:
            return len((await _status(env)).get("failureDomains") or []) == 2

        await eventually(both)


async def test_a_deleting_provider_and_a_domain_without_network_leave_the_failure_domains(apiserver: Any) -> None:
    """New-user findings: a Provider held by its finalizer while machines use it, and a domain
    offering no network class, were still advertised to CAPI, which placed new Machines there."""
    async with running_controllers(apiserver, shared=False) as env:
        no_net = fd("vcenter-a-dc0-c1", "c1")
        no_net["attributes"]["availableNetworkClasses"] = []
        await env.provider("vcenter-a", [fd("vcenter-a-dc0-c0", "c0"), no_net])
        await env.provider("vcenter-b", [fd("vcenter-b-dc0-c0", "c0")])
        await env.client.patch(PROVIDER, "vcenter-b", env.namespace, {"metadata": {"finalizers": ["banlieue.io/provider"]}})
        await env.client.create(VSPHERE_CLUSTER, _cluster(env.namespace, {}))

        async def advertised(names: list[str]) -> dict[str, Any] | None:
            status = await _status(env)
            return status if [d["name"] for d in status.get("failureDomains") or []] == names else None

        status = await eventually(lambda: advertised(["vcenter-a-dc0-c0", "vcenter-b-dc0-c0"]))
        [left_out] = status["excludedFailureDomains"]
        assert (left_out["name"], left_out["provider"]) == ("vcenter-a-dc0-c1", "vcenter-a")
        assert left_out["message"].startswith("offers no network class")
        try:
            await env.client.delete(PROVIDER, "vcenter-b", env.namespace)  # the finalizer holds it
            status = await eventually(lambda: advertised(["vcenter-a-dc0-c0"]))
            why = {e["name"]: e["message"] for e in status["excludedFailureDomains"]}
            assert why["vcenter-b-dc0-c0"] == "its Provider is being deleted and takes no new machines"
        finally:
            await env.client.patch(PROVIDER, "vcenter-b", env.namespace, {"metadata": {"finalizers": None}})


async def _owned_by_capi_cluster(env: Env, paused: bool) -> None:
    """Provider vcenter-a with one domain, CAPI Cluster ``demo`` (``spec.paused``) and the
    VSphereCluster ``demo`` it owns."""
    await env.provider("vcenter-a", [fd("vcenter-a-dc0-c0", "c0")])
    owner = await env.client.create(CAPI_CLUSTER, {
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": env.namespace}, "spec": {"paused": paused}})
    body = _cluster(env.namespace, {"providerRefs": [{"name": "vcenter-a"}]})
    body["metadata"]["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "demo",
                                           "uid": owner["metadata"]["uid"]}]
    await env.client.create(VSPHERE_CLUSTER, body)


async def test_owner_capi_cluster_paused_pauses_the_vspherecluster(apiserver: Any) -> None:
    apiserver.server.load_crd(CLUSTER_CRD)
    async with running_controllers(apiserver, shared=False) as env:
        await _owned_by_capi_cluster(env, paused=True)

        async def paused_by_owner() -> dict[str, Any] | None:
            conds = {c["type"]: c for c in (await _status(env)).get("conditions") or []}
            cond = conds.get("Paused", {})
            return cond if cond.get("status") == "True" else None

        cond = await eventually(paused_by_owner)
        assert "owner Cluster" in cond["message"]
        assert "failureDomains" not in await _status(env)
        await env.client.patch(CAPI_CLUSTER, "demo", env.namespace, {"spec": {"paused": False}})

        async def resumed() -> bool:
            status = await _status(env)
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            return conds.get("Paused") == "False" and len(status.get("failureDomains") or []) == 1

        await eventually(resumed, timeout=5)  # the Cluster watch, not a periodic re-read


async def test_provider_status_writes_never_get_the_owner_cluster(apiserver: Any) -> None:
    """Issue 22: a Provider's status writes (its re-measure during a wave) reconcile every
    VSphereCluster of the namespace; the owner Cluster's ``spec.paused`` comes from the Cluster
    watch (``OwnerClusters``), not from a GET per reconcile (1.27 GETs per machine at 1,000)."""
    apiserver.server.load_crd(CLUSTER_CRD)
    async with running_controllers(apiserver, shared=False) as env:
        await _owned_by_capi_cluster(env, paused=False)

        async def domains(n: int) -> bool:
            return len((await _status(env)).get("failureDomains") or []) == n

        await eventually(lambda: domains(1))
        gets = lambda: [r for r in env.server.request_log(method="GET")  # noqa: E731
                        if r.path.endswith(f"/namespaces/{env.namespace}/clusters/demo")]
        before = len(gets())
        names = ["c0", "c1", "c2", "c3", "c4"]
        for i in range(2, 6):  # four Provider status writes, each a VSphereCluster reconcile
            await env.provider_status("vcenter-a", [fd(f"vcenter-a-dc0-{n}", n) for n in names[:i]])
            await eventually(lambda i=i: domains(i))  # type: ignore[misc]
        assert len(gets()) == before, [r.path for r in gets()]
        # ... and a pause still reaches it through the watch.
        await env.client.patch(CAPI_CLUSTER, "demo", env.namespace, {"spec": {"paused": True}})

        async def paused() -> bool:
            conds = {c["type"]: c["status"] for c in (await _status(env)).get("conditions") or []}
            return conds.get("Paused") == "True"

        await eventually(paused, timeout=5)
