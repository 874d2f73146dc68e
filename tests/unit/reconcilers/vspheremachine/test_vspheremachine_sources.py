"""VSphereMachine event mapping: Provider/Secret/ConfigMap/CAPI/vCenter changes -> machines."""

from __future__ import annotations

from typing import Any

from banlieue.backends.base import VMChange
from banlieue.reconcilers.kinds import PROVIDER, VSPHERE_MACHINE
from banlieue.reconcilers.vspheremachine.sources import MapFuncs, register_indexes
from banlieue.runtime.cache import Cache, Indexer
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.reconcile import Request


class _Informer:
    def __init__(self) -> None:
        self.store = Indexer()

    def has_synced(self) -> bool:
        return True


def make_cache(objects: dict[ResourceKind, list[dict[str, Any]]]) -> Cache:
    informers: dict[ResourceKind, _Informer] = {}

    def informer_for(kind: ResourceKind) -> _Informer:
        return informers.setdefault(kind, _Informer())

    cache = Cache(informer_for, lambda: list(informers.values()))
    register_indexes(cache)
    for kind, objs in objects.items():
        for obj in objs:
            informer_for(kind).store.add(obj)
    return cache


def vsm(name: str, ns: str = "ns", spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels or {}},
            "spec": spec or {}, "status": status or {}}


READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
         "instanceUUID": "iu-ready"}
PROV = {"metadata": {"name": "vc1", "namespace": "ns"},
        "spec": {"providerClassRef": {"name": "vsphere"}, "connection": {
            "endpoint": "vc", "credentialsRef": {"name": "creds"}, "caBundle": {"configMapRef": {"name": "ca"}}}}}


def test_provider_maps_users_and_unready_machines_of_its_namespace() -> None:
    cache = make_cache({VSPHERE_MACHINE: [
        vsm("uses", spec={"providerRef": {"name": "vc1"}}, status=READY),
        vsm("ready-other", spec={"providerRef": {"name": "vc2"}}, status=READY),
        vsm("waiting", spec={"failureDomain": "x"}),
        vsm("elsewhere", ns="other"),
    ]})
    assert sorted(r.name for r in MapFuncs(cache).provider(PROV)) == ["uses", "waiting"]


def test_secret_maps_bootstrap_users_and_provider_credentials() -> None:
    cache = make_cache({
        VSPHERE_MACHINE: [vsm("boot", spec={"bootstrapDataSecretRef": {"name": "b1"}}, status=READY),
                          vsm("p", spec={"providerRef": {"name": "vc1"}}, status=READY)],
        PROVIDER: [PROV],
    })
    maps = MapFuncs(cache)
    assert maps.secret({"metadata": {"name": "b1", "namespace": "ns"}}) == [Request("ns", "boot")]
    assert maps.secret({"metadata": {"name": "creds", "namespace": "ns"}}) == [Request("ns", "p")]
    assert maps.secret({"metadata": {"name": "unrelated", "namespace": "ns"}}) == []
    assert maps.config_map({"metadata": {"name": "ca", "namespace": "ns"}}) == [Request("ns", "p")]


def test_capi_machine_and_cluster_map_to_their_infra_machines() -> None:
    cache = make_cache({VSPHERE_MACHINE: [vsm("w1", labels={"cluster.x-k8s.io/cluster-name": "c1"}), vsm("w2")]})
    maps = MapFuncs(cache)
    ref = {"apiGroup": "infrastructure.banlieue.io", "kind": "VSphereMachine", "name": "w1"}
    assert maps.capi_machine({"metadata": {"name": "m", "namespace": "ns"}, "spec": {"infrastructureRef": ref}}) == [Request("ns", "w1")]
    other = {**ref, "apiGroup": "infrastructure.cluster.x-k8s.io"}
    assert maps.capi_machine({"metadata": {"name": "m", "namespace": "ns"}, "spec": {"infrastructureRef": other}}) == []
    assert maps.capi_cluster({"metadata": {"name": "c1", "namespace": "ns"}}) == [Request("ns", "w1")]


def test_vm_change_maps_by_uid_then_instance_uuid() -> None:
    cache = make_cache({VSPHERE_MACHINE: [vsm("a"), vsm("b", status=READY)]})
    maps = MapFuncs(cache)
    assert maps.vm_change(VMChange("vc", "vm-1", "uid-a", None, "modified")) == [Request("ns", "a")]
    assert maps.vm_change(VMChange("vc", "vm-2", None, "iu-ready", "removed")) == [Request("ns", "b")]
    assert maps.vm_change(VMChange("vc", "vm-3", "nobody", None, "modified")) == []


# --- a vCenter answers again: the machines waiting on it are enqueued ---------------------------

def test_vcenter_back_enqueues_machines_waiting_on_a_connection_error() -> None:
    from banlieue.backends.base import Connection
    from banlieue.backends.vsphere import VSphereBackend
    from banlieue.reconcilers.vspheremachine.reconnect import ReconnectNotifier, machines_waiting_on

    def status(reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}

    deleting = vsm("deleting", spec={"providerRef": {"name": "vc1"}}, status=status("Deleting"))
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache = make_cache({VSPHERE_MACHINE: [
        vsm("failed", spec={"providerRef": {"name": "vc1"}}, status=status("ConnectFailed")),
        vsm("by-label", labels={"banlieue.io/provider": "vc1"}, status=status("ConnectFailed")),
        vsm("unknown-provider", spec={"failureDomain": "fd"}, status=status("ConnectFailed")),
        deleting,
        vsm("ready", spec={"providerRef": {"name": "vc1"}}, status=READY),
        vsm("invalid", spec={"providerRef": {"name": "vc1"}}, status=status("InvalidSpec")),
        vsm("other-vcenter", spec={"providerRef": {"name": "vc2"}}, status=status("ConnectFailed")),
        vsm("other-namespace", ns="ns2", spec={"providerRef": {"name": "vc1"}}, status=status("ConnectFailed")),
    ]})
    backend = VSphereBackend(max_workers=1)
    assert isinstance(backend, ReconnectNotifier)
    conns = [Connection("ns/vc1", "https://vc-a.example/sdk", "u", "p"), Connection("ns/vc2", "vc-b.example:8443", "u", "p"),
             Connection("ns2/vc3", "vc-b.example:8443", "u", "p")]
    got = machines_waiting_on("vc-a.example:443", conns, backend, cache)
    assert sorted(r.name for r in got) == ["by-label", "deleting", "failed", "unknown-provider"]
    assert all(r.namespace == "ns" for r in got)
    assert machines_waiting_on("elsewhere:443", conns, backend, cache) == []
