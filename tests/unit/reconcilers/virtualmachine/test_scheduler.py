"""Table tests of the VirtualMachine scheduler (banlieue.reconcilers.virtualmachine.scheduler), one row per rule,
plus a hypothesis test that no input makes ``schedule`` raise."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reconciler_objects import NS, fd, image, provider, vm_class, with_rows

from banlieue.api.provider import Provider
from banlieue.api.virtualmachine import AntiAffinityTerm, VirtualMachine, VirtualMachineReason
from banlieue.api.vmclass import VMClass
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.virtualmachine.placement_totals import PlacementTotals
from banlieue.reconcilers.virtualmachine.scheduler import (
    PeerPlacement,
    PeerTotals,
    SchedulingInput,
    capacity_report_times,
    schedule,
)


def vm(name: str = "vm-1", labels: dict[str, str] | None = None, placement: dict[str, Any] | None = None) -> VirtualMachine:
    return VirtualMachine.from_wire({"metadata": {"name": name, "namespace": NS, "labels": labels or {}},
                                     "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"},
                                              "placement": placement or {}}})


def inp(*, the_vm: VirtualMachine | None = None, cls: VMClass | None = None, img: VMImage | None = None,
        providers: list[Provider] | None = None, peers: tuple[PeerPlacement, ...] = (),
        current: tuple[str, str] | None = None) -> SchedulingInput:
    providers = providers if providers is not None else [provider("a", [fd("a-dc0-c0")])]
    img = img or image({p.metadata.name or "": True for p in providers})
    return SchedulingInput(the_vm or vm(), cls or vm_class(), img, with_rows(providers, img), peers, current)


DB_TERM = {"topologyKey": "cluster", "labelSelector": {"matchLabels": {"app": "db"}}, "mode": "required"}
TWO = [provider("a", [fd("a-dc0-c0", cluster="c0", mem=1000), fd("a-dc0-c1", cluster="c1", mem=2000)])]

# (id, input, expected (provider, domain) or reason, substring of the message)
CASES: list[tuple[str, SchedulingInput, tuple[str, str] | str, str]] = [
    ("places-on-the-only-domain", inp(), ("a", "a-dc0-c0"), ""),
    ("no-providers", inp(providers=[]), "NoProviderMatched", "Providers seen: none"),
    ("provider-selector-excludes-all", inp(the_vm=vm(placement={"providerSelector": {"matchLabels": {"site": "b"}}}),
                                            providers=[provider("a", [fd("x")], {"site": "a"})]),
     "NoProviderMatched", "providerSelector"),
    # New-user finding: the selector was printed as a Python dict; now as kubectl prints it.
    ("provider-selector-printed-the-kubernetes-way",
     inp(the_vm=vm(placement={"providerSelector": {"matchLabels": {"site": "c"}, "matchExpressions": [
         {"key": "tier", "operator": "In", "values": ["gold", "bronze"]}, {"key": "gpu", "operator": "Exists"}]}}),
         providers=[provider("a", [fd("x")], {"site": "a"})]),
     "NoProviderMatched", "matches placement.providerSelector gpu,site=c,tier in (bronze,gold) with a class"),
    ("provider-selector-picks-labelled", inp(the_vm=vm(placement={"providerSelector": {"matchLabels": {"site": "b"}}}),
                                              providers=[provider("a", [fd("a1", mem=99999)], {"site": "a"}),
                                                         provider("b", [fd("b1", mem=1)], {"site": "b"})],
                                              cls=vm_class(mem=1)), ("b", "b1"), ""),
    ("provider-class-without-image-source", inp(providers=[provider("a", [fd("x")], pclass="kvm")]),
     "NoProviderMatched", "has a source for (vsphere)"),
    ("unsupported-provider-class", inp(providers=[provider("a", [fd("x")], pclass="kvm")], img=image({"a": True}, ("kvm",))),
     "NoProviderMatched", "supports (vsphere)"),
    ("image-not-ready", inp(img=image({"a": False})), "ImageNotReady", "TemplateNotFound"),
    ("image-not-resolved-yet", inp(img=image({})), "ImageNotReady", "not resolved yet"),
    ("image-ready-only-on-b", inp(providers=[provider("a", [fd("a1", mem=99999)]), provider("b", [fd("b1", mem=8192)])],
                                  img=image({"a": False, "b": True})), ("b", "b1"), ""),
    ("no-failure-domains-yet", inp(providers=[provider("a", [])]), "NoFailureDomainMatched", "no failure domains yet"),
    ("fd-selector-excludes-all", inp(the_vm=vm(placement={"failureDomainSelector": {"matchLabels": {"dc": "dc9"}}})),
     "NoFailureDomainMatched", "failureDomainSelector"),
    ("fd-selector-picks", inp(the_vm=vm(placement={"failureDomainSelector": {"matchLabels": {"cluster": "c0"}}}),
                              providers=TWO, cls=vm_class(mem=1)), ("a", "a-dc0-c0"), ""),
    ("storage-class-missing", inp(cls=vm_class(sc="fast")), "NoFailureDomainMatched", "storage class fast"),
    ("network-class-missing", inp(cls=vm_class(nc="dmz")), "NoFailureDomainMatched", "network class dmz"),
    ("feature-missing", inp(cls=vm_class(features=("vtpm",))), "NoFailureDomainMatched", "feature vtpm"),
    ("feature-from-provider-capabilities", inp(cls=vm_class(features=("vtpm",)),
                                               providers=[provider("a", [fd("a1")], features=("vtpm",))]), ("a", "a1"), ""),
    ("firmware-unsupported", inp(cls=vm_class(firmware="efi-secure"), providers=[provider("a", [fd("a1", features=("bios", "efi"))])]),
     "FirmwareUnsupported", "efi-secure"),
    ("firmware-unreported-not-filtered", inp(providers=[provider("a", [fd("a1", features=())])]), ("a", "a1"), ""),
    ("memory-insufficient", inp(cls=vm_class(mem=8192), providers=[provider("a", [fd("a1", mem=4096)])]),
     "InsufficientCapacity", "memory 8192 MiB needed, 4096 free"),
    ("storage-insufficient", inp(cls=vm_class(disks=(20, 100)), providers=[provider("a", [fd("a1", storage=50)])]),
     "InsufficientCapacity", "storage 120 GiB needed, 50 free"),
    ("cpu-mhz-not-a-filter", inp(providers=[provider("a", [fd("a1", cpu=0)])]), ("a", "a1"), ""),
    ("unreported-capacity-not-filtered", inp(providers=[provider("a", [fd("a1", mem=None, storage=None)])]), ("a", "a1"), ""),
    ("most-free-memory-wins", inp(providers=TWO, cls=vm_class(mem=1)), ("a", "a-dc0-c1"), ""),
    ("tie-broken-by-name", inp(providers=[provider("b", [fd("b1")]), provider("a", [fd("a2"), fd("a1")])]), ("a", "a1"), ""),
    ("required-anti-affinity-avoids-peer-cluster",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [DB_TERM]}), providers=TWO, cls=vm_class(mem=1),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c1"),)), ("a", "a-dc0-c0"), ""),
    ("required-anti-affinity-unsatisfied",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [DB_TERM]}), providers=TWO, cls=vm_class(mem=1),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c1"), PeerPlacement("db-1", {"app": "db"}, "a", "a-dc0-c0"))),
     "AntiAffinityUnsatisfied", "db-0 (cluster=c1)"),
    ("anti-affinity-excludes-itself",
     inp(the_vm=vm("db-0", labels={"app": "db"}, placement={"antiAffinity": [DB_TERM]}),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c0"),)), ("a", "a-dc0-c0"), ""),
    ("anti-affinity-topology-value-across-providers",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [DB_TERM]}),
         providers=[provider("a", [fd("a1", cluster="c0")]), provider("b", [fd("b1", cluster="c0")])],
         peers=(PeerPlacement("db-0", {"app": "db"}, "b", "b1"),)), "AntiAffinityUnsatisfied", "cluster=c0"),
    ("anti-affinity-domain-without-topology-label-unconstrained",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [{**DB_TERM, "topologyKey": "rack"}]}),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c0"),)), ("a", "a-dc0-c0"), ""),
    ("anti-affinity-without-selector-selects-nothing",
     inp(the_vm=vm(placement={"antiAffinity": [{"topologyKey": "cluster", "mode": "required"}]}),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c0"),)), ("a", "a-dc0-c0"), ""),
    ("peer-required-term-is-symmetric",
     inp(the_vm=vm(labels={"app": "db"}), providers=TWO, cls=vm_class(mem=1),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c1", (AntiAffinityTerm.from_wire(DB_TERM),)),)),
     ("a", "a-dc0-c0"), ""),
    ("preferred-anti-affinity-scores",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [{**DB_TERM, "mode": "preferred"}]}), providers=TWO,
         cls=vm_class(mem=1), peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c1"),)), ("a", "a-dc0-c0"), ""),
    ("preferred-anti-affinity-never-blocks",
     inp(the_vm=vm(labels={"app": "db"}, placement={"antiAffinity": [{**DB_TERM, "mode": "preferred"}]}),
         peers=(PeerPlacement("db-0", {"app": "db"}, "a", "a-dc0-c0"),)), ("a", "a-dc0-c0"), ""),
    ("sticky-keeps-valid-current", inp(providers=TWO, cls=vm_class(mem=1), current=("a", "a-dc0-c0")), ("a", "a-dc0-c0"), ""),
    ("sticky-ignores-capacity", inp(providers=TWO, cls=vm_class(mem=50000), current=("a", "a-dc0-c0")), ("a", "a-dc0-c0"), ""),
    ("pending-peers-reduce-free-memory",
     inp(providers=TWO, cls=vm_class(mem=500),
         peers=(PeerPlacement("p", {}, "a", "a-dc0-c1", pending_memory_mib=1800),)), ("a", "a-dc0-c0"), ""),
    ("pending-peers-exhaust-capacity",
     inp(providers=TWO, cls=vm_class(mem=900),
         peers=(PeerPlacement("p", {}, "a", "a-dc0-c1", pending_memory_mib=1500),
                PeerPlacement("q", {}, "a", "a-dc0-c0", pending_memory_mib=500))), "InsufficientCapacity", "a-dc0-c1: memory 900 MiB needed, 500 free"),
    ("pending-self-not-counted",
     inp(providers=TWO, cls=vm_class(mem=1500), peers=(PeerPlacement("vm-1", {}, "a", "a-dc0-c1", pending_memory_mib=1500),)),
     ("a", "a-dc0-c1"), ""),
    ("most-specific-reason-is-deepest",
     inp(cls=vm_class(mem=8192), providers=[provider("a", [fd("a1", mem=1), fd("a2", sc=())])]),
     "InsufficientCapacity", "a1: memory"),
]


@pytest.mark.parametrize(("case", "expected", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_schedule_rules(case: SchedulingInput, expected: tuple[str, str] | str, needle: str) -> None:
    decision = schedule(case)
    if isinstance(expected, tuple):
        assert decision.placement is not None, decision.message
        assert (decision.placement.provider_name, decision.placement.failure_domain) == expected
        assert decision.reason is None
    else:
        assert decision.placement is None
        assert decision.reason == expected
        assert needle in decision.message


def test_placement_resolves_classes_and_template() -> None:
    decision = schedule(inp())
    assert decision.placement is not None
    p = decision.placement
    assert p.provider_class == "vsphere"
    assert p.template == "ubuntu-tpl"
    assert [(s.name, s.storage_class, s.datastore) for s in p.resolved_storage] == [("d0", "standard", "DS0")]
    assert [(n.name, n.network_class, n.port_group) for n in p.resolved_networks] == [("eth0", "default", "VM Network")]


DRIFT = [
    ("provider-selector-changed", vm(placement={"providerSelector": {"matchLabels": {"site": "b"}}}),
     [provider("a", [fd("a1")], {"site": "a"}), provider("b", [fd("b1")], {"site": "b"})], ("b", "b1"), "NoProviderMatched"),
    ("fd-selector-changed", vm(placement={"failureDomainSelector": {"matchLabels": {"cluster": "c1"}}}), TWO,
     ("a", "a-dc0-c1"), "NoFailureDomainMatched"),
    ("domain-vanished", vm(), [provider("a", [fd("a2")])], ("a", "a2"), "NoFailureDomainMatched"),
]


@pytest.mark.parametrize(("the_vm", "providers", "moved_to", "reason"), [d[1:] for d in DRIFT], ids=[d[0] for d in DRIFT])
def test_drift_reports_current_invalid_and_a_new_placement(
    the_vm: VirtualMachine, providers: list[Provider], moved_to: tuple[str, str], reason: str
) -> None:
    decision = schedule(inp(the_vm=the_vm, providers=providers, cls=vm_class(mem=1), current=("a", "a-dc0-c0")))
    assert decision.current_invalid is not None and decision.current_invalid[0] == reason
    assert not decision.kept
    assert decision.placement is not None
    assert (decision.placement.provider_name, decision.placement.failure_domain) == moved_to


_labels = st.dictionaries(st.sampled_from(["dc", "cluster", "site", "app"]), st.sampled_from(["a", "b", "c0", "c1"]), max_size=3)
_selector = st.one_of(st.none(), st.builds(lambda m: {"matchLabels": m}, _labels),
                      st.builds(lambda k, op, v: {"matchExpressions": [{"key": k, "operator": op, "values": v}]},
                                st.sampled_from(["dc", "cluster", "site"]), st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
                                st.lists(st.sampled_from(["a", "c0"]), max_size=2)))
_opt_int = st.one_of(st.none(), st.integers(0, 100000))


@st.composite
def _inputs(draw: st.DrawFn) -> SchedulingInput:
    providers = []
    for pname in draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)):
        domains = [fd(f"{pname}-{i}", dc=draw(st.sampled_from(["dc0", "dc1"])), cluster=draw(st.sampled_from(["c0", "c1"])),
                      mem=draw(_opt_int), storage=draw(_opt_int), cpu=draw(_opt_int),
                      sc=tuple(draw(st.lists(st.sampled_from(["standard", "fast"]), max_size=2))),
                      features=tuple(draw(st.lists(st.sampled_from(["bios", "efi", "vtpm"]), max_size=3))))
                   for i in range(draw(st.integers(0, 3)))]
        providers.append(provider(pname, domains, draw(_labels), pclass=draw(st.sampled_from(["vsphere", "kvm"]))))
    placement: dict[str, Any] = {}
    if (sel := draw(_selector)) is not None:
        placement["providerSelector"] = sel
    if (sel := draw(_selector)) is not None:
        placement["failureDomainSelector"] = sel
    terms = draw(st.lists(st.builds(lambda k, s, m: {"topologyKey": k, "labelSelector": s, "mode": m},
                                    st.sampled_from(["dc", "cluster", "rack"]), _selector, st.sampled_from(["required", "preferred"])),
                          max_size=2))
    placement["antiAffinity"] = [{k: v for k, v in t.items() if v is not None} for t in terms]
    peers = tuple(PeerPlacement(f"p{i}", draw(_labels), draw(st.sampled_from(["a", "b", "z"])), draw(st.sampled_from(["a-0", "b-1", "q"])))
                  for i in range(draw(st.integers(0, 3))))
    current = draw(st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b", "z"]), st.sampled_from(["a-0", "b-0", "q"]))))
    ready = {p: draw(st.booleans()) for p in ["a", "b", "c"]}
    cls = vm_class(mem=draw(st.integers(1, 70000)), disks=tuple(draw(st.lists(st.integers(1, 500), max_size=3))),
                   firmware=draw(st.sampled_from(["bios", "efi", "efi-secure"])),
                   features=tuple(draw(st.lists(st.sampled_from(["vtpm", "efi"]), max_size=2))))
    img = image(ready)
    return SchedulingInput(vm(labels=draw(_labels), placement=placement), cls, img, with_rows(providers, img), peers, current)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_inputs())
def test_schedule_never_raises_and_is_consistent(case: SchedulingInput) -> None:
    decision = schedule(case)
    assert (decision.placement is None) == (decision.reason is not None)
    if decision.placement is not None:
        names = {(p.metadata.name, d.name) for p in case.providers for d in (p.status.failure_domains if p.status else None) or ()}
        assert (decision.placement.provider_name, decision.placement.failure_domain) in names
    if decision.kept:
        assert case.current is not None and decision.current_invalid is None


# `banlieue dev`'s numbers: vcsim hosts have 4095 MiB and a fixed quickStats.overallMemoryUsage of
# 1404 MiB, so every failure domain (4 hosts) reports 10764 MiB free, and that figure never drops
# when VMs are created. Only the pending (placed, not provisioned) peers tell domains apart.
DEV_PROVIDERS = [provider(p, [fd(f"{p}-dc{d}-dc{d}-c{c}", f"dc{d}", f"DC{d}_C{c}", mem=10764, storage=228, cpu=18084)
                              for d in range(2) for c in range(3)], labels={"site": p[-1]})
                 for p in ("vcenter-a", "vcenter-b")]
DEV_DB = {"providerSelector": {"matchLabels": {"site": "a"}}, "antiAffinity": [DB_TERM]}
DEV_VMS = [("app-1", 4096, {}, {}), ("db-0", 8192, {"app": "db"}, DEV_DB), ("db-1", 8192, {"app": "db"}, DEV_DB),
           ("web-1", 4096, {}, {})]


@pytest.mark.parametrize(("provisioned", "expected"), [
    pytest.param(False, ["vcenter-a-dc0-dc0-c0", "vcenter-a-dc0-dc0-c1", "vcenter-a-dc0-dc0-c2", "vcenter-b-dc0-dc0-c0"],
                 id="burst-pending-peers-spread-over-equal-domains"),
    pytest.param(True, ["vcenter-a-dc0-dc0-c0", "vcenter-a-dc0-dc0-c1", "vcenter-a-dc0-dc0-c2", "vcenter-b-dc0-dc0-c0"],
                 id="provisioned-peers-in-the-reported-capacity-tie-then-spread-by-peer-count"),
])
def test_dev_samples_placed_one_after_another(provisioned: bool, expected: list[str]) -> None:
    """The four sample VMs placed in name order. In a burst, each placed peer is subtracted from
    its domain (memory first), so they spread. Placed after the earlier ones are provisioned, the
    rule counts those as reflected in the Provider's capacity (which vcsim never lowers): every
    domain ties at 10764 MiB and the peer counts spread them: the db VMs (selector site=a) over
    vcenter-a's domains, web-1 onto vcenter-b, which holds no VM yet."""
    peers: list[PeerPlacement] = []
    placed = []
    for name, mem, labels, placement in DEV_VMS:
        decision = schedule(inp(the_vm=vm(name, labels, placement), cls=vm_class(mem=mem, disks=(40,)),
                                providers=DEV_PROVIDERS, peers=tuple(peers)))
        assert decision.placement is not None, decision.message
        where = (decision.placement.provider_name, decision.placement.failure_domain)
        placed.append(where[1])
        terms = tuple(AntiAffinityTerm.model_validate(t) for t in placement.get("antiAffinity", []))
        peers.append(PeerPlacement(name, labels, *where, anti_affinity=terms,
                                   pending_memory_mib=0 if provisioned else mem))
    assert placed == expected


def _deleting(p: Provider) -> Provider:
    return p.model_copy(update={"metadata": p.metadata.model_copy(update={"deletion_timestamp": datetime(2026, 1, 1, tzinfo=UTC)})})


def test_provider_being_deleted_takes_no_new_vm_but_keeps_its_own() -> None:
    # It holds banlieue.io/provider while VMs use it: a new placement would keep it alive.
    gone, other = _deleting(provider("a", [fd("a-d0")])), provider("b", [fd("b-d0", mem=8192)])
    img = image({"a": True, "b": True})
    fresh = schedule(inp(providers=[gone, other], img=img))
    assert fresh.placement is not None and fresh.placement.provider_name == "b"
    only_gone = schedule(inp(providers=[gone], img=img))
    assert only_gone.placement is None and only_gone.reason == VirtualMachineReason.NO_PROVIDER_MATCHED
    # New-user finding: the message said only "no Provider matches", naming the deleting one as seen.
    assert "Provider a is being deleted and takes no new VM" in only_gone.message
    kept = schedule(inp(providers=[gone, other], img=img, current=("a", "a-d0")))
    assert kept.kept and kept.placement is not None and kept.placement.provider_name == "a"


def test_precomputed_totals_replace_the_sum_over_peers() -> None:
    """``SchedulingInput.totals`` (kept by the reconciler) is what capacity and ranking read; the
    peers then only serve anti-affinity."""
    peer = (PeerPlacement("p", {}, "a", "a-dc0-c1", pending_memory_mib=1800),)
    summed = schedule(inp(providers=TWO, cls=vm_class(mem=500), peers=peer))
    assert summed.placement is not None and summed.placement.failure_domain == "a-dc0-c0"
    kept = PeerTotals(pending={("a", "a-dc0-c0"): (900, 0)}, on_provider={"a": 1}, in_domain={("a", "a-dc0-c0"): 1})
    given_totals = schedule(replace(inp(providers=TWO, cls=vm_class(mem=500), peers=peer), totals=kept))
    assert given_totals.placement is not None and given_totals.placement.failure_domain == "a-dc0-c1"
    full = PeerTotals(pending={("a", "a-dc0-c0"): (1000, 0), ("a", "a-dc0-c1"): (2000, 0)}, on_provider={}, in_domain={})
    refused = schedule(replace(inp(providers=TWO, cls=vm_class(mem=500)), totals=full))
    assert refused.reason == VirtualMachineReason.INSUFFICIENT_CAPACITY


@pytest.mark.parametrize(("counts", "expected"), [
    pytest.param({"a": 2, "b": 1}, "b", id="fewest-peers-on-the-provider"),
    pytest.param({"a": 1, "b": 2}, "a", id="other-provider-fuller"),
])
def test_equal_capacity_spreads_by_the_peer_counts_of_the_totals(counts: dict[str, int], expected: str) -> None:
    providers = [provider("a", [fd("a-0", mem=8192)]), provider("b", [fd("b-0", mem=8192)])]
    totals = PeerTotals(pending={}, on_provider=counts, in_domain={(p, f"{p}-0"): n for p, n in counts.items()})
    decision = schedule(replace(inp(providers=providers), totals=totals))
    assert decision.placement is not None and decision.placement.provider_name == expected


@pytest.mark.parametrize(
    ("update_time", "reason"),
    [(None, VirtualMachineReason.INSUFFICIENT_CAPACITY),
     ("2026-01-01T00:09:00Z", VirtualMachineReason.INSUFFICIENT_CAPACITY),
     ("2026-01-01T00:10:00Z", VirtualMachineReason.INSUFFICIENT_CAPACITY),
     ("2026-01-01T00:11:00Z", None)],
    ids=["no-report-time", "report-before-provisioned", "report-same-second", "report-after-provisioned"],
)
def test_provisioned_peers_count_until_a_capacity_report_taken_after_them(update_time: str | None, reason: str | None) -> None:
    """Rule 5: two peers provisioned at 00:10 fill a 8192 MiB domain until its capacity is
    reported after 00:10 (the figures then include them)."""
    domain = fd("a-d0", mem=8192)
    if update_time is not None:
        domain["attributes"]["capacity"]["updateTime"] = update_time
    providers = [provider("a", [domain])]
    totals = PlacementTotals()
    for name in ("p0", "p1"):
        totals.on_add({"metadata": {"name": name, "namespace": NS}, "spec": {"classRef": {"name": "c"}},
                       "status": {"scheduled": {"providerName": "a", "failureDomain": "a-d0"},
                                  "initialization": {"provisioned": True},
                                  "conditions": [{"type": "InfrastructureReady", "status": "True",
                                                  "lastTransitionTime": "2026-01-01T00:10:00Z"}]}}, False)
    kept = totals.peer_totals(NS, f"{NS}/vm-1", lambda _: (4096, 20), capacity_report_times(providers))
    decision = schedule(replace(inp(providers=providers, cls=vm_class(mem=4096)), totals=kept))
    assert decision.reason == reason, decision.message


def _unreachable(p: Provider) -> Provider:
    status = p.status.to_wire() if p.status else {}
    status["conditions"] = [{"type": "ProviderReachable", "status": "False", "reason": "ConnectFailed",
                             "message": "vCenter has not answered since 2026-01-01T00:00:00Z",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    return Provider.from_wire({**p.to_wire(), "status": status})


def test_unreachable_provider_takes_no_new_vm_even_while_its_image_row_is_ready() -> None:
    # Issue 21: the VMImage row follows the Provider's Ready one reconcile later; a vCenter that
    # stopped answering must take no new VM at once. The placement it holds is kept (stickiness).
    dead, alive = _unreachable(provider("a", [fd("a-d0", mem=99999)])), provider("b", [fd("b-d0", mem=8192)])
    img = image({"a": True, "b": True})
    fresh = schedule(inp(providers=[dead, alive], img=img))
    assert fresh.placement is not None and fresh.placement.provider_name == "b"
    only_dead = schedule(inp(providers=[dead], img=img))
    assert only_dead.placement is None and only_dead.reason == VirtualMachineReason.IMAGE_NOT_READY
    assert "a (vCenter not reachable: vCenter has not answered since 2026-01-01T00:00:00Z)" in (only_dead.message or "")
    kept = schedule(inp(providers=[dead, alive], img=img, current=("a", "a-d0")))
    assert kept.kept and kept.placement is not None and kept.placement.provider_name == "a"
