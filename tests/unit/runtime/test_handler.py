"""Handlers: events -> Requests (cr pkg/handler), predicates first, tombstones unwrapped."""

from __future__ import annotations

from typing import Any

from banlieue.runtime.event import DeletedFinalStateUnknown
from banlieue.runtime.handler import (
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
)
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.predicate import Funcs, GenerationChangedPredicate
from banlieue.runtime.queue import WorkQueue
from banlieue.runtime.reconcile import Request

VM = ResourceKind("vm.banlieue.io", "v1alpha1", "VirtualMachine", "virtualmachines")
VM_CLASS = ResourceKind(
    "vm.banlieue.io", "v1alpha1", "VirtualMachineClass", "virtualmachineclasses", namespaced=False
)


def obj(
    name: str, ns: str = "ns", rv: str = "1", generation: int = 1, owners: list[Any] | None = None
) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv, "generation": generation}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"kind": "Thing", "metadata": meta}


def owner_ref(
    name: str,
    kind: str = "VirtualMachine",
    api_version: str = "vm.banlieue.io/v1alpha1",
    controller: bool = True,
) -> Any:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": controller,
    }


def drain(q: WorkQueue[Request]) -> list[Request]:
    items = list(q._queue)
    q._queue.clear()
    q._dirty.clear()
    return items


def test_for_object_add_update_delete() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForObject(q)
    h.on_add(obj("a"), True)
    assert drain(q) == [Request("ns", "a")]
    h.on_update(obj("a", rv="1"), obj("a", rv="2"))
    assert drain(q) == [Request("ns", "a")]
    h.on_delete(obj("b"))
    assert drain(q) == [Request("ns", "b")]
    h.generic(obj("c", ns=""))
    assert drain(q) == [Request("", "c")]


def test_for_object_unwraps_tombstones_and_drops_objects_without_name() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForObject(q)
    h.on_delete(DeletedFinalStateUnknown("ns/gone", obj("gone")))
    assert drain(q) == [Request("ns", "gone")]
    h.on_add({"metadata": {}}, False)
    h.on_delete(DeletedFinalStateUnknown("ns/x", {}))
    assert drain(q) == []


def test_predicates_are_applied_before_enqueue() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForObject(q, [GenerationChangedPredicate(), Funcs(delete=lambda o: False)])
    h.on_update(obj("a", rv="1"), obj("a", rv="2"))  # status-only: dropped
    assert drain(q) == []
    h.on_update(obj("a", generation=1), obj("a", generation=2))
    assert drain(q) == [Request("ns", "a")]
    h.on_delete(DeletedFinalStateUnknown("ns/a", obj("a")))  # predicate sees the unwrapped object
    assert drain(q) == []


def test_owner_matches_group_and_kind_only_and_controller_ref() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForOwner(q, VM)
    child = obj(
        "child",
        owners=[
            owner_ref("vm-v2", api_version="vm.banlieue.io/v1beta9"),  # version ignored
            owner_ref("other-group", api_version="other.io/v1alpha1", controller=True),
            owner_ref("other-kind", kind="VirtualMachineSet"),
        ],
    )
    h.on_add(child, False)
    assert drain(q) == [Request("ns", "vm-v2")]


def test_owner_only_controller_and_match_every_owner() -> None:
    owners = [owner_ref("ctrl", controller=True), owner_ref("plain", controller=False)]
    q: WorkQueue[Request] = WorkQueue()
    EnqueueRequestForOwner(q, VM).on_add(obj("c", owners=owners), False)
    assert drain(q) == [Request("ns", "ctrl")]
    EnqueueRequestForOwner(q, VM, only_controller=False).on_add(obj("c", owners=owners), False)
    assert drain(q) == [Request("ns", "ctrl"), Request("ns", "plain")]


def test_owner_update_enqueues_old_and_new_owners() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForOwner(q, VM)
    h.on_update(obj("c", owners=[owner_ref("old")]), obj("c", rv="2", owners=[owner_ref("new")]))
    assert drain(q) == [Request("ns", "old"), Request("ns", "new")]
    h.on_update(obj("c", owners=[owner_ref("same")]), obj("c", rv="2", owners=[owner_ref("same")]))
    assert drain(q) == [Request("ns", "same")]


def test_owner_cluster_scoped_owner_gets_empty_namespace() -> None:
    q: WorkQueue[Request] = WorkQueue()
    h = EnqueueRequestForOwner(q, VM_CLASS)
    h.on_delete(
        DeletedFinalStateUnknown("ns/c", obj("c", owners=[owner_ref("small", kind="VirtualMachineClass")]))
    )
    assert drain(q) == [Request("", "small")]


def test_owner_core_group() -> None:
    q: WorkQueue[Request] = WorkQueue()
    secret_kind = ResourceKind("", "v1", "Secret", "secrets")
    h = EnqueueRequestForOwner(q, secret_kind)
    h.on_add(obj("c", owners=[owner_ref("s", kind="Secret", api_version="v1")]), False)
    assert drain(q) == [Request("ns", "s")]


def test_map_func_runs_on_old_and_new() -> None:
    q: WorkQueue[Request] = WorkQueue()
    seen: list[str] = []

    def fn(o: Any) -> list[Request]:
        seen.append(o["metadata"]["resourceVersion"])
        return [Request("ns", "vm-" + o["metadata"]["resourceVersion"])]

    h = EnqueueRequestsFromMapFunc(q, fn)
    h.on_update(obj("s", rv="1"), obj("s", rv="2"))
    assert seen == ["1", "2"]
    assert drain(q) == [Request("ns", "vm-1"), Request("ns", "vm-2")]
    h.on_delete(DeletedFinalStateUnknown("ns/s", obj("s", rv="9")))
    assert drain(q) == [Request("ns", "vm-9")]


def test_map_func_exception_drops_the_event() -> None:
    q: WorkQueue[Request] = WorkQueue()

    def boom(o: Any) -> list[Request]:
        raise RuntimeError("bad map")

    EnqueueRequestsFromMapFunc(q, boom).on_add(obj("a"), False)
    assert drain(q) == []
