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


def _cluster(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "c1", "namespace": "ns", "uid": "u-c1", "resourceVersion": "1", "labels": {}},
            "spec": {"controlPlaneEndpoint": {"host": "127.22.0.1", "port": 6443}},
            "status": {"initialization": {"infrastructureProvisioned": True}, **status}}


def test_cluster_status_rewrites_by_capi_core_reconcile_no_machine() -> None:
    """CAPI core rewrites a Cluster's status (conditions, replica counts) at every change of its
    Machines; none of it is read by the VSphereMachine reconciler, and mapping each rewrite to
    every machine of the Cluster made reconciles grow with the square of the machines."""
    from banlieue.reconcilers.vspheremachine.sources import CAPI_CLUSTER_READS, ReadsChanged

    pred = ReadsChanged(CAPI_CLUSTER_READS)
    old = _cluster(conditions=[{"type": "Available", "status": "False"}], workers={"replicas": 3, "readyReplicas": 1})
    new = _cluster(conditions=[{"type": "Available", "status": "True"}], workers={"replicas": 3, "readyReplicas": 2})
    new["metadata"]["resourceVersion"] = "2"
    assert not pred.update(old, new)
    assert not pred.update(old, old)  # a resync


def test_cluster_changes_the_reconciler_reads_pass() -> None:
    from banlieue.reconcilers.vspheremachine.sources import CAPI_CLUSTER_READS, ReadsChanged

    pred = ReadsChanged(CAPI_CLUSTER_READS)
    base = _cluster()
    unprovisioned = _cluster(initialization={"infrastructureProvisioned": False})
    paused = _cluster()
    paused["spec"]["paused"] = True
    annotated = _cluster()
    annotated["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": ""}
    domains = _cluster(failureDomains=[{"name": "fd-a", "controlPlane": True}])
    deleting = _cluster()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    for new in (unprovisioned, paused, annotated, domains, deleting):
        assert pred.update(base, new), new
    assert pred.create(base) and pred.delete(base)


def test_capi_machine_status_writes_reconcile_nothing_but_spec_and_owner_changes_do() -> None:
    from banlieue.reconcilers.vspheremachine.sources import CAPI_MACHINE_READS, ReadsChanged

    pred = ReadsChanged(CAPI_MACHINE_READS)
    old: dict[str, Any] = {"metadata": {"name": "m1", "namespace": "ns", "uid": "u-m1", "resourceVersion": "5"},
           "spec": {"clusterName": "c1", "bootstrap": {}, "infrastructureRef": {"kind": "VSphereMachine", "name": "vm1"}},
           "status": {"phase": "Provisioning"}}
    status_only = {**old, "metadata": {**old["metadata"], "resourceVersion": "6"}, "status": {"phase": "Provisioned"}}
    assert not pred.update(old, status_only)
    bootstrap = {**old, "spec": {**old["spec"], "bootstrap": {"dataSecretName": "m1-bootstrap"}}}
    assert pred.update(old, bootstrap)
    replaced = {**old, "metadata": {**old["metadata"], "uid": "u-m1-new"}}  # deleted and re-created between events
    assert pred.update(old, replaced)


async def test_the_capi_watch_enqueues_machines_only_for_what_the_reconciler_reads() -> None:
    """The wiring: CapiWatch's Cluster and Machine handlers carry the predicates (a Cluster
    status rewrite enqueues none of its machines; an unpause enqueues all of them)."""
    import asyncio

    from banlieue.reconcilers.kinds import CAPI_CLUSTER, CAPI_MACHINE
    from banlieue.reconcilers.vspheremachine.sources import CapiWatch

    handlers: dict[Any, Any] = {}

    class _Inf:
        def __init__(self, kind: Any) -> None:
            self.kind = kind

        def add_event_handler(self, h: Any) -> None:
            handlers[self.kind] = h

    class _Mgr:
        def get_informer(self, kind: Any) -> _Inf:
            return _Inf(kind)

    class _Client:
        async def request(self, method: str, path: str) -> dict[str, Any]:
            return {"resources": [{"name": CAPI_MACHINE.plural}, {"name": CAPI_CLUSTER.plural}]}

    label = {"cluster.x-k8s.io/cluster-name": "c1"}
    cache = make_cache({VSPHERE_MACHINE: [vsm("w1", labels=label), vsm("w2", labels=label)]})
    watch = CapiWatch(_Mgr(), _Client(), MapFuncs(cache))  # type: ignore[arg-type]
    gen: Any = watch.requests()
    first = asyncio.ensure_future(gen.__anext__())
    for _ in range(50):
        if handlers:
            break
        await asyncio.sleep(0.01)
    cluster = handlers[CAPI_CLUSTER]
    old = _cluster(conditions=[{"type": "Available", "status": "False"}])
    cluster.on_update(old, _cluster(conditions=[{"type": "Available", "status": "True"}]))
    await asyncio.sleep(0.01)
    assert not first.done()
    paused = _cluster()
    paused["spec"]["paused"] = True
    cluster.on_update(paused, _cluster())
    got = {await first, await gen.__anext__()}
    assert got == {Request("ns", "w1"), Request("ns", "w2")}
    await gen.aclose()


def _provider(capacity_mib: int, rv: str = "1", reachable: str = "True") -> dict[str, Any]:
    return {"metadata": {"name": "vc", "namespace": "ns", "uid": "u-vc", "resourceVersion": rv},
            "spec": {"connection": {"endpoint": "https://127.0.0.1:8989/sdk"}},
            "status": {"failureDomains": [{"name": "fd-a", "attributes": {
                "availableStorageClasses": ["standard"],
                "capacity": {"memoryMiB": capacity_mib, "updateTime": f"2026-12-02T00:00:{rv.zfill(2)}Z"}}}],
                "conditions": [{"type": "ProviderReachable", "status": reachable, "reason": "Reconciled", "message": ""}]}}


def test_a_provider_capacity_rewrite_reconciles_only_machines_not_placed() -> None:
    """A Provider's capacity is rewritten about every 30 s while VMs come and go: each rewrite
    mapped to every machine not Ready made a 1,000-machine wave's reconciles quadratic. Only a
    machine with no domain and no VM yet can be decided by a capacity."""
    from banlieue.reconcilers.provider_changes import PROVIDER_CAPACITY_CHANGED, PROVIDER_CHANGED

    old, new = _provider(10_000), _provider(9_000, rv="2")
    assert not PROVIDER_CHANGED.update(old, new)
    assert PROVIDER_CAPACITY_CHANGED.update(old, new)
    unreachable = _provider(10_000, reachable="False")
    assert PROVIDER_CHANGED.update(old, unreachable)
    assert not PROVIDER_CAPACITY_CHANGED.update(old, unreachable)
    assert PROVIDER_CHANGED.create(new) and PROVIDER_CAPACITY_CHANGED.create(new)
    def ready(reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "m",
                                "lastTransitionTime": "2026-12-02T00:00:00Z"}]}

    cache = make_cache({VSPHERE_MACHINE: [
        vsm("no-room", status=ready("FailureDomainNotFound")),
        vsm("new"),  # reconciled by its own add event; a vCenter slot wakes it if it waits for one
        vsm("other-reason", status=ready("ProviderNotFound")),  # a Provider change other than capacity maps it
        vsm("placed", status={"failureDomain": "fd-a", **ready("Cloning")}),
        vsm("cloned", status={"instanceUUID": "5000-1", **ready("FailureDomainNotFound")}),
    ]})
    assert MapFuncs(cache).provider_capacity(new) == [Request("ns", "no-room")]


async def test_capi_discovery_backs_off_while_nobody_waits_and_speeds_up_for_a_waiting_machine(monkeypatch: Any) -> None:
    """Issue 22: without CAPI installed, discovery looked every 5 s forever (12 idle requests a
    minute for standalone users). The interval now doubles up to ``CAPI_DISCOVERY_MAX_SECONDS``,
    and a CAPI-labelled machine waiting for CAPI (``wanted``) brings it back to the shortest one
    (issue 21: such a machine sees CAPI within seconds of its installation). Times scaled down
    250x: 0.02 s doubling up to 0.16 s."""
    import asyncio

    from banlieue.reconcilers.kinds import CAPI_CLUSTER, CAPI_MACHINE
    from banlieue.reconcilers.vspheremachine import sources
    from banlieue.reconcilers.vspheremachine.sources import CapiWatch

    monkeypatch.setattr(sources, "CAPI_DISCOVERY_SECONDS", 0.02)
    monkeypatch.setattr(sources, "CAPI_DISCOVERY_MAX_SECONDS", 0.16)
    installed = False

    class _Inf:
        def add_event_handler(self, h: Any) -> None:
            return None

    class _Mgr:
        def get_informer(self, kind: Any) -> _Inf:
            return _Inf()

    class _Client:
        async def request(self, method: str, path: str) -> dict[str, Any]:
            if not installed:
                raise RuntimeError("404 page not found")
            return {"resources": [{"name": CAPI_MACHINE.plural}, {"name": CAPI_CLUSTER.plural}]}

    watch = CapiWatch(_Mgr(), _Client(), MapFuncs(make_cache({})))  # type: ignore[arg-type]
    task = asyncio.ensure_future(watch.requests().__anext__())
    try:
        await asyncio.sleep(0.8)
        # Looks at 0, 0.02, 0.06, 0.14, 0.30, 0.46, 0.62, 0.78 s: 8; every 0.02 s would be 40.
        idle = watch.looks
        assert 5 <= idle <= 10, idle
        for _ in range(50):  # a machine waits, its reconcile requeued every 10 ms for 0.5 s
            watch.wanted()
            await asyncio.sleep(0.01)
        waiting = watch.looks - idle
        assert waiting >= 8, f"{waiting} looks in 0.5 s while a machine waits (nominal 25)"
        installed = True
        for _ in range(50):
            if watch.served_seen:
                break
            watch.wanted()
            await asyncio.sleep(0.01)
        assert watch.served_seen, "CAPI installed while a machine waits is seen at the next short interval"
    finally:
        task.cancel()
