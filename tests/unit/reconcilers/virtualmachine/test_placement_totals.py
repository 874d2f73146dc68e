"""Incremental placement sums (banlieue.reconcilers.virtualmachine.placement_totals) against the walk they
replace: ``PeerTotals.of`` over every placed peer of the namespace, the VM itself excluded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from banlieue.api.virtualmachine import VirtualMachine
from banlieue.api.vmclass import VMClass
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.virtualmachine.placement_totals import PlacementTotals
from banlieue.reconcilers.virtualmachine.scheduler import PeerPlacement, PeerTotals, SchedulingInput
from banlieue.runtime.event import DeletedFinalStateUnknown

SIZES = {"small": (4096, 20), "large": (16384, 100)}


def size_of(sizes: dict[str, tuple[int, int]]) -> Any:
    return lambda name: sizes.get(name, (0, 0))


T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ready(when: datetime, status: str = "True") -> dict[str, Any]:
    """An InfrastructureReady condition that moved to ``status`` at ``when``."""
    return {"type": "InfrastructureReady", "status": status, "reason": "Ready", "message": "",
            "lastTransitionTime": when.strftime("%Y-%m-%dT%H:%M:%SZ")}


def vm(name: str, ns: str = "ns", where: tuple[str, str] | None = None, cls: str = "small",
       provisioned: bool | datetime = False, rv: int = 1) -> dict[str, Any]:
    """``provisioned``: a time -> provisioned with InfrastructureReady True since then; True ->
    provisioned with no InfrastructureReady condition (no known time)."""
    status: dict[str, Any] = {}
    if where is not None:
        status["scheduled"] = {"providerName": where[0], "failureDomain": where[1]}
    if provisioned is not False:
        status["initialization"] = {"provisioned": True}
    if isinstance(provisioned, datetime):
        status["conditions"] = [ready(provisioned)]
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)},
            "spec": {"classRef": {"name": cls}, "imageRef": {"name": "ubuntu"}}, "status": status}


def normal(t: PeerTotals) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
    """Without zero entries: the scheduler reads a missing key as zero."""
    return ({k: v for k, v in t.pending.items() if v != (0, 0)},
            {k: v for k, v in t.on_provider.items() if v},
            {k: v for k, v in t.in_domain.items() if v})


def walk(cache: dict[str, dict[str, Any]], assumed: dict[str, tuple[str, str]], ns: str, me: str,
         sizes: dict[str, tuple[int, int]], reported: dict[tuple[str, str], datetime] | None = None) -> PeerTotals:
    """The per-placement walk: a PeerPlacement for every placed VM of ``ns`` (the assumed
    placement winning), pending resources for those its domain's capacity report may not
    include (not provisioned, provisioned at an unknown time, or provisioned at or after the
    domain's report time in ``reported``), summed by PeerTotals.of."""
    reported = reported or {}
    peers = []
    for key, obj in cache.items():
        if obj["metadata"]["namespace"] != ns:
            continue
        scheduled = obj["status"].get("scheduled") or {}
        where = assumed.get(key) or (scheduled.get("providerName"), scheduled.get("failureDomain"))
        if not (isinstance(where[0], str) and isinstance(where[1], str)):
            continue
        pending = not (obj["status"].get("initialization") or {}).get("provisioned")
        conds = [c for c in obj["status"].get("conditions") or () if c["status"] == "True"]
        if not pending and conds:
            when = datetime.fromisoformat(conds[0]["lastTransitionTime"])
            pending = where not in reported or when >= reported[where]
        elif not pending:
            pending = True  # provisioned at an unknown time: always counts
        mem, storage = sizes.get(obj["spec"]["classRef"]["name"], (0, 0)) if pending else (0, 0)
        peers.append(PeerPlacement(obj["metadata"]["name"], {}, where[0], where[1], (), mem, storage))
    me_vm = VirtualMachine.from_wire({"metadata": {"name": me, "namespace": ns},
                                      "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"}}})
    cls = VMClass.from_wire({"metadata": {"name": "small"}, "spec": {"hardware": {"cpus": 1, "memoryMiB": 1}}})
    img = VMImage.from_wire({"metadata": {"name": "ubuntu"}, "spec": {"sources": []}})
    return PeerTotals.of(SchedulingInput(me_vm, cls, img, (), tuple(peers)))


# --- model-based: any sequence of informer events and assumptions ---------------------------------

NAMES = [f"{ns}/vm-{i}" for ns in ("ns", "other") for i in range(2)]
WHERE = st.sampled_from([None, ("vc-a", "c0"), ("vc-a", "c1"), ("vc-b", "c0")])
PROVISIONED = st.one_of(st.just(False), st.just(True), st.integers(0, 4).map(at))
PUT = st.tuples(st.just("put"), st.sampled_from(NAMES), WHERE, st.sampled_from(["small", "large", "gone"]), PROVISIONED)
OPS = st.one_of(
    PUT, PUT,
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("resync")),
    st.tuples(st.just("relist"), st.sets(st.sampled_from(NAMES))),
    st.tuples(st.just("assume"), st.sampled_from(NAMES), WHERE.filter(lambda w: w is not None)),
    st.tuples(st.just("drop_assumed"), st.sampled_from(NAMES)),
    st.tuples(st.just("resize"), st.sampled_from(["small", "large"]), st.integers(0, 50000), st.integers(0, 500)),
    st.tuples(st.just("report"), WHERE.filter(lambda w: w is not None), st.one_of(st.none(), st.integers(0, 4).map(at))),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(OPS, min_size=5, max_size=50), st.sampled_from(NAMES))
def test_sums_equal_the_walk_after_any_events(ops: list[tuple[Any, ...]], me: str) -> None:
    totals = PlacementTotals()
    cache: dict[str, dict[str, Any]] = {}  # what the informer's store holds
    assumed: dict[str, tuple[str, str]] = {}  # placements this process decided, not yet shown
    sizes = dict(SIZES)
    reported: dict[tuple[str, str], datetime] = {}  # capacity.updateTime per domain
    rv = 0
    for op in ops:
        rv += 1
        if op[0] == "put":
            _, key, where, cls, provisioned = op
            ns, name = key.split("/")
            obj = vm(name, ns, where, cls, provisioned, rv)
            old = cache.get(key)
            cache[key] = obj
            if where is not None and assumed.get(key) == where:
                del assumed[key]
            if old is None:
                totals.on_add(obj, False)
            else:
                totals.on_update(old, obj)
        elif op[0] == "delete":
            _, key, tombstone = op
            last = cache.pop(key, None)
            if last is not None or not tombstone:  # a relist has no tombstone for an unknown key
                assumed.pop(key, None)
                ns, name = key.split("/")
                gone = last or vm(name, ns)
                totals.on_delete(DeletedFinalStateUnknown(key, gone) if tombstone else gone)
        elif op[0] == "resync":
            for obj in cache.values():
                totals.on_update(obj, obj)
        elif op[0] == "relist":
            # The LIST returns the kept keys (each delivered again), the others vanish as tombstones.
            for key in list(cache):
                if key in op[1]:
                    totals.on_add(cache[key], False)
                else:
                    totals.on_delete(DeletedFinalStateUnknown(key, cache.pop(key)))
                    assumed.pop(key, None)
        elif op[0] == "assume":
            _, key, where = op
            shown = (cache.get(key) or {}).get("status", {}).get("scheduled") or {}
            if (shown.get("providerName"), shown.get("failureDomain")) == where:
                assumed.pop(key, None)
            else:
                assumed[key] = where
            totals.assume(key, where)
        elif op[0] == "drop_assumed":
            assumed.pop(op[1], None)
            totals.drop_assumed(op[1])
        elif op[0] == "report":
            _, where, when = op
            if when is None:
                reported.pop(where, None)
            else:
                reported[where] = when
        else:
            _, cls, mem, storage = op
            sizes[cls] = (mem, storage)
        for ns in ("ns", "other"):
            got = totals.peer_totals(ns, me, size_of(sizes), reported)
            mine = me.partition("/")[2] if me.partition("/")[0] == ns else ""
            assert normal(got) == normal(walk(cache, assumed, ns, mine, sizes, reported))
        for key in cache:
            assert totals.assumed(key) == assumed.get(key)


# --- one row per rule -----------------------------------------------------------------------------

A0, A1, B0 = ("vc-a", "c0"), ("vc-a", "c1"), ("vc-b", "c0")


def sums(totals: PlacementTotals, me: str = "ns/me") -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
    return normal(totals.peer_totals("ns", me, size_of(SIZES)))


def test_a_relist_or_resync_delivering_an_object_again_does_not_count_it_twice() -> None:
    totals = PlacementTotals()
    obj = vm("a", where=A0)
    totals.on_add(obj, True)
    totals.on_add(obj, False)
    totals.on_update(obj, obj)
    assert sums(totals) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})


def test_delete_and_tombstone_subtract() -> None:
    totals = PlacementTotals()
    totals.on_add(vm("a", where=A0), False)
    totals.on_add(vm("b", where=A0), False)
    totals.on_delete(vm("a", where=A0))
    assert sums(totals) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})
    totals.on_delete(DeletedFinalStateUnknown("ns/b", {}))
    totals.on_delete(vm("never-seen", where=A0))
    assert sums(totals) == ({}, {}, {})


def test_provisioned_counts_until_a_later_capacity_report_and_still_counts_as_a_peer() -> None:
    totals = PlacementTotals()
    pending = vm("a", where=A0)
    totals.on_add(pending, False)
    totals.on_update(pending, vm("a", where=A0, provisioned=at(10), rv=2))

    def read(reported: dict[tuple[str, str], datetime]) -> Any:
        return normal(totals.peer_totals("ns", "ns/me", size_of(SIZES), reported))

    assert read({}) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1}), "no report time: counts"
    assert read({A0: at(9)}) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1}), "report before: counts"
    assert read({A0: at(10)}) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1}), "same second: counts"
    assert read({A0: at(11)}) == ({}, {"vc-a": 1}, {A0: 1}), "report after: in the figures"
    assert read({A1: at(11)}) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1}), "another domain's report"


@pytest.mark.parametrize(
    "conditions",
    [[], [ready(at(10), "False")], [{"type": "InfrastructureReady", "status": "True", "lastTransitionTime": "soon"}]],
    ids=["no-condition", "infrastructure-not-ready", "unparsable-time"],
)
def test_provisioned_at_no_known_time_counts_as_pending(conditions: list[dict[str, Any]]) -> None:
    totals = PlacementTotals()
    obj = vm("a", where=A0, provisioned=True)
    obj["status"]["conditions"] = conditions
    totals.on_add(obj, False)
    assert normal(totals.peer_totals("ns", "ns/me", size_of(SIZES), {A0: at(60)})) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})


def test_reading_many_provisioned_vms_counts_those_after_the_report() -> None:
    totals = PlacementTotals()
    for i in range(100):
        totals.on_add(vm(f"v{i}", where=A0, provisioned=at(i)), False)
    got = totals.peer_totals("ns", "ns/v50", size_of(SIZES), {A0: at(40)})
    assert got.pending[A0] == (59 * 4096, 59 * 20)  # minutes 40..99, v50 itself left out
    totals.on_delete(vm("v99", where=A0, provisioned=at(99)))
    assert totals.peer_totals("ns", "ns/me", size_of(SIZES), {A0: at(99)}).pending.get(A0, (0, 0)) == (0, 0)


def test_class_change_and_move_carry_the_contribution() -> None:
    totals = PlacementTotals()
    first = vm("a", where=A0)
    totals.on_add(first, False)
    resized = vm("a", where=A0, cls="large", rv=2)
    totals.on_update(first, resized)
    assert sums(totals) == ({A0: (16384, 100)}, {"vc-a": 1}, {A0: 1})
    totals.on_update(resized, vm("a", where=B0, cls="large", rv=3))
    assert sums(totals) == ({B0: (16384, 100)}, {"vc-b": 1}, {B0: 1})


def test_class_sizes_are_read_when_asked() -> None:
    # A VMClass edit (or a class not in the cache) reads as a fresh walk would.
    totals = PlacementTotals()
    totals.on_add(vm("a", where=A0), False)
    totals.on_add(vm("b", where=A0, cls="missing"), False)
    got = totals.peer_totals("ns", "ns/me", size_of({"small": (1000, 5)}))
    assert got.pending[A0] == (1000, 5)


def test_an_assumed_placement_counts_at_once_and_once_when_the_cache_shows_it() -> None:
    totals = PlacementTotals()
    unplaced = vm("a")
    totals.on_add(unplaced, False)
    assert sums(totals) == ({}, {}, {})
    totals.assume("ns/a", A1)
    assert sums(totals) == ({A1: (4096, 20)}, {"vc-a": 1}, {A1: 1})
    # An unrelated update still showing the old (unplaced) state keeps the assumption.
    labelled = {**unplaced, "metadata": {**unplaced["metadata"], "resourceVersion": "2", "labels": {"x": "y"}}}
    totals.on_update(unplaced, labelled)
    assert totals.assumed("ns/a") == A1
    totals.on_update(labelled, vm("a", where=A1, rv=3))
    assert totals.assumed("ns/a") is None
    assert sums(totals) == ({A1: (4096, 20)}, {"vc-a": 1}, {A1: 1})


def test_an_assumed_move_replaces_the_shown_placement_and_can_be_dropped() -> None:
    totals = PlacementTotals()
    totals.on_add(vm("a", where=A0), False)
    totals.assume("ns/a", B0)
    assert sums(totals) == ({B0: (4096, 20)}, {"vc-b": 1}, {B0: 1})
    totals.drop_assumed("ns/a")
    assert sums(totals) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})


def test_assuming_a_vm_the_cache_does_not_hold_counts_nothing_until_it_appears() -> None:
    totals = PlacementTotals()
    totals.assume("ns/a", A0)
    assert sums(totals) == ({}, {}, {})
    totals.on_add(vm("a"), False)
    assert sums(totals) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})
    totals.on_delete(vm("a"))
    totals.on_add(vm("a"), False)  # recreated: the old assumption went with the delete
    assert sums(totals) == ({}, {}, {})


@pytest.mark.parametrize("assumed", [False, True], ids=["shown", "assumed"])
def test_the_vm_being_placed_is_left_out(assumed: bool) -> None:
    totals = PlacementTotals()
    totals.on_add(vm("peer", where=A0), False)
    totals.on_add(vm("me", where=None if assumed else A0), False)
    if assumed:
        totals.assume("ns/me", A0)
    assert sums(totals, "ns/me") == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})
    assert sums(totals, "ns/peer") == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})
    assert sums(totals, "ns/nobody") == ({A0: (8192, 40)}, {"vc-a": 2}, {A0: 2})


def test_namespaces_are_summed_apart() -> None:
    totals = PlacementTotals()
    totals.on_add(vm("a", "ns", where=A0), False)
    totals.on_add(vm("a", "other", where=B0), False)
    assert sums(totals) == ({A0: (4096, 20)}, {"vc-a": 1}, {A0: 1})
    assert normal(totals.peer_totals("other", "ns/a", size_of(SIZES))) == ({B0: (4096, 20)}, {"vc-b": 1}, {B0: 1})
    assert normal(totals.peer_totals("empty", "empty/x", size_of(SIZES))) == ({}, {}, {})


def test_an_object_of_unexpected_shape_counts_as_unplaced_and_does_not_raise() -> None:
    # A handler that raised would miss the event (the informer logs it and goes on).
    totals = PlacementTotals()
    totals.on_add({"metadata": {"name": "odd", "namespace": "ns"}, "spec": [], "status": "?"}, False)
    totals.on_add({"metadata": {"name": "half", "namespace": "ns"}, "status": {"scheduled": {"providerName": "vc-a"}}}, False)
    assert sums(totals) == ({}, {}, {})
    totals.assume("ns/odd", A0)
    assert sums(totals) == ({}, {"vc-a": 1}, {A0: 1})  # pending, of no known class
