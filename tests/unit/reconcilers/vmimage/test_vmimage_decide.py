"""VMImage decide: every rule of banlieue.reconcilers.vmimage.decide, plus never-raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from banlieue.api.conditions import READY, get_condition
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import Provider, ProviderImageStatus
from banlieue.api.vmimage import ImageReason, VMImage
from banlieue.backends.base import TemplateInfo
from banlieue.reconcilers.vmimage.decide import (
    MISSING_RECHECK_SECONDS,
    NO_MATCHING_PROVIDER,
    REFRESH_SECONDS,
    Lookup,
    Snapshot,
    Target,
    decide,
    merged_rows,
    row_for,
    source_ref,
    targets,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def image(sources: list[dict[str, Any]] | None = None, status: dict[str, Any] | None = None) -> VMImage:
    body: dict[str, Any] = {
        "apiVersion": "banlieue.io/v1alpha1",
        "kind": "VMImage",
        "metadata": {"name": "ubuntu", "generation": 2},
        "spec": {"sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "ubuntu-22.04"}] if sources is None else sources},
    }
    if status is not None:
        body["status"] = status
    return VMImage.from_wire(body)


def provider(name: str, ns: str = "ns", cls: str = "vsphere", dcs: tuple[str, ...] = ("DC0", "DC1")) -> Provider:
    fds = [{"name": f"{name}-{dc.lower()}-c0", "attributes": {"raw": {"datacenter": dc, "cluster": "C0"}}} for dc in dcs]
    return Provider.from_wire(
        {
            "apiVersion": "banlieue.io/v1alpha1",
            "kind": "Provider",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"providerClassRef": {"name": cls}, "connection": {"endpoint": "e", "credentialsRef": {"name": "c"}}},
            "status": {"failureDomains": fds},
        }
    )


def tpl(dc: str, moref: str) -> TemplateInfo:
    return TemplateInfo("ubuntu-22.04", dc, moref, "uuid", 2, 2048, 20, "efi", "ubuntu64Guest", False)


T2 = Target("ns", "vc1", "ubuntu-22.04", ("DC0", "DC1"))
T1 = Target("ns", "vc1", "ubuntu-22.04", ("DC0",))


@pytest.mark.parametrize(
    ("target", "lookup", "ready", "reason", "resolved", "in_message"),
    [
        pytest.param(T1, Lookup(found=(("DC0", tpl("DC0", "vm-1")),)), True, ImageReason.RECONCILED, "vm-1", "DC0", id="found-one-dc-moref"),
        pytest.param(T2, Lookup(found=(("DC0", tpl("DC0", "vm-1")), ("DC1", tpl("DC1", "vm-2")))), True, ImageReason.RECONCILED, "DC0:vm-1,DC1:vm-2", "DC0, DC1", id="found-every-dc-pairs"),
        pytest.param(T2, Lookup(found=(("DC0", tpl("DC0", "vm-1")), ("DC1", None))), False, ImageReason.TEMPLATE_NOT_FOUND, None, "missing in DC1", id="missing-in-one-dc-not-ready"),
        pytest.param(T2, Lookup(found=(("DC0", None), ("DC1", None))), False, ImageReason.TEMPLATE_NOT_FOUND, None, "not found in DC0, DC1", id="missing-everywhere"),
        pytest.param(Target("ns", "vc1", "x", ()), Lookup(found=((None, None),)), False, ImageReason.TEMPLATE_NOT_FOUND, None, "any datacenter", id="no-known-dc-searched-all"),
        pytest.param(Target("ns", "vc1", "x", ()), Lookup(found=((None, tpl("DC7", "vm-9")),)), True, ImageReason.RECONCILED, "vm-9", "DC7", id="no-known-dc-found"),
        pytest.param(T1, Lookup(found=()), False, ImageReason.TEMPLATE_NOT_FOUND, None, "no datacenter", id="nothing-searched"),
        pytest.param(T1, Lookup(config_error=("SecretMissing", "Secret ns/c not found")), False, ImageReason.SECRET_UNAVAILABLE, None, "connection settings are not usable", id="secret-unavailable"),
        pytest.param(T1, Lookup(backend_error=("AuthFailed", "InvalidLogin")), False, ImageReason.CONNECT_FAILED, None, "could not be reached or refused the login", id="auth-is-connect-failed"),
        pytest.param(T1, Lookup(backend_error=("TLSVerifyFailed", "x")), False, ImageReason.CONNECT_FAILED, None, "could not be reached", id="tls-is-connect-failed"),
        pytest.param(T1, Lookup(backend_error=("Transient", "connection reset by 10.0.0.9")), False, ImageReason.CONNECT_FAILED, None, "could not be reached", id="transient-is-connect-failed"),
        pytest.param(T1, Lookup(backend_error=("TaskFailed", "boom")), False, ImageReason.LOOKUP_FAILED, None, "(TaskFailed)", id="other-is-lookup-failed"),
        pytest.param(T1, None, False, ImageReason.LOOKUP_FAILED, None, "not looked up", id="no-lookup"),
    ],
)
def test_row_rules(target: Target, lookup: Lookup | None, ready: bool, reason: str, resolved: str | None, in_message: str) -> None:
    row = row_for("ubuntu", target, lookup)
    assert (row.name, row.ready, row.reason, row.resolved_ref) == ("ubuntu", ready, reason, resolved)
    assert in_message in (row.message or "")
    # Issue 23 case 5: what answered (refused, not a VIM server, login text) stays in the log.
    if lookup is not None and (lookup.backend_error or lookup.config_error) and not ready:
        detail = (lookup.backend_error or lookup.config_error or ("", ""))[1]
        assert detail not in (row.message or "")


def test_targets_match_class_and_sort_and_collect_datacenters() -> None:
    ps = [provider("b"), provider("a", ns="z"), provider("k", cls="kubevirt"), provider("a", dcs=("DC1", "DC0", "DC1"))]
    got = targets(image(), ps)
    assert [(t.namespace, t.name, t.datacenters) for t in got] == [("ns", "a", ("DC0", "DC1")), ("ns", "b", ("DC0", "DC1")), ("z", "a", ("DC0", "DC1"))]
    assert all(t.ref == "ubuntu-22.04" for t in got)


def test_first_vsphere_source_wins_other_classes_ignored() -> None:
    img = image([{"providerClass": "kubevirt", "ref": "k"}, {"providerClass": "vsphere", "ref": "a"}, {"providerClass": "vsphere", "ref": "b"}])
    assert source_ref(img) == "a"
    assert source_ref(image([{"providerClass": "kubevirt", "ref": "k"}])) is None
    assert targets(image([]), [provider("a")]) == []


def test_ready_on_one_provider_lists_missing() -> None:
    snap = Snapshot(
        image(),
        (provider("with"), provider("without")),
        NOW,
        {("ns", "with"): Lookup(found=(("DC0", tpl("DC0", "vm-1")), ("DC1", tpl("DC1", "vm-2")))), ("ns", "without"): Lookup(found=(("DC0", None), ("DC1", None)))},
    )
    plan = decide(snap)
    rows = plan.rows
    assert [(k, r.name, r.ready, r.reason) for k, r in sorted(rows.items())] == [
        (("ns", "with"), "ubuntu", True, "Reconciled"), (("ns", "without"), "ubuntu", False, "TemplateNotFound")]
    ready = get_condition(plan.status.conditions, READY)
    assert ready is not None and (ready.status, ready.reason) == (ConditionStatus.TRUE, ImageReason.RECONCILED)
    assert ready.message == "ready on 1 of 2 Providers; not ready on 1 (TemplateNotFound: 1)" and ready.observed_generation == 2
    assert (plan.status.providers, plan.status.ready_providers) == (2, 1)
    # A template missing somewhere is looked for again soon (put back, the VMs waiting for it go).
    assert plan.status.observed_generation == 2 and plan.write_status and plan.requeue_after == MISSING_RECHECK_SECONDS
    found = decide(Snapshot(image(), (provider("with"),), NOW, {("ns", "with"): snap.lookups[("ns", "with")]}))
    assert found.requeue_after == REFRESH_SECONDS
    assert [e[:2] for e in plan.events] == [("Normal", "Reconciled")]
    # the same observation again writes nothing
    again = decide(Snapshot(image(status=plan.status.to_wire()), snap.providers, NOW + timedelta(minutes=5), snap.lookups))
    assert not again.write_status and again.events == ()


def test_ready_nowhere_takes_the_most_frequent_reason_and_names_no_provider() -> None:
    snap = Snapshot(image(), (provider("tenant-a-vc", "tenant-a"), provider("b"), provider("c")), NOW, {
        ("tenant-a", "tenant-a-vc"): Lookup(config_error=("SecretMissing", "Secret tenant-a/admin-creds not found")),
        ("ns", "b"): Lookup(backend_error=("Transient", "connection refused by 10.1.2.3:443")),
        ("ns", "c"): Lookup(backend_error=("Transient", "not a VIM server"))})
    plan = decide(snap)
    ready = get_condition(plan.status.conditions, READY)
    assert ready is not None and (ready.status, ready.reason) == (ConditionStatus.FALSE, ImageReason.CONNECT_FAILED)
    assert ready.message == "ready on none of 3 Providers (ConnectFailed: 2, SecretUnavailable: 1); each Provider's status.images says why"
    # Issue 23 case 8: the cluster-scoped status names no namespace, Provider, Secret or address.
    wire = str(plan.status.to_wire()) + str(plan.events)
    for secret in ("tenant-a", "admin-creds", "10.1.2.3", "VIM", "refused"):
        assert secret not in wire


@pytest.mark.parametrize(
    ("img", "providers", "in_message"),
    [
        pytest.param(image(), (), "no Provider of class", id="no-vsphere-provider"),
        pytest.param(image([{"providerClass": "kubevirt", "ref": "k"}]), (provider("a"),), "spec.sources has no entry", id="no-vsphere-source"),
    ],
)
def test_no_matching_provider(img: VMImage, providers: tuple[Provider, ...], in_message: str) -> None:
    plan = decide(Snapshot(img, providers, NOW))
    ready = get_condition(plan.status.conditions, READY)
    assert ready is not None and (ready.status, ready.reason) == (ConditionStatus.FALSE, NO_MATCHING_PROVIDER)
    assert in_message in ready.message and plan.rows == {} and (plan.status.providers, plan.status.ready_providers) == (0, 0)
    assert [e[0] for e in plan.events] == ["Warning"]


def test_counts_follow_deleted_providers() -> None:
    first = decide(Snapshot(image(), (provider("a"), provider("b")), NOW, {}))
    plan = decide(Snapshot(image(status=first.status.to_wire()), (provider("a"),), NOW, {}))
    assert list(plan.rows) == [("ns", "a")] and plan.status.providers == 1 and plan.write_status


def row(name: str, ready: bool = True) -> ProviderImageStatus:
    return ProviderImageStatus(name=name, ready=ready, reason="Reconciled" if ready else "TemplateNotFound")


def test_merged_rows_replace_remove_prune_and_report_no_change() -> None:
    current = [row("b"), row("a", False)]
    assert merged_rows(current, row("a", False), "a") is None  # unchanged, order does not matter
    assert [(r.name, r.ready) for r in merged_rows(current, row("a"), "a") or []] == [("a", True), ("b", True)]
    assert [r.name for r in merged_rows(current, None, "a") or []] == ["b"]
    assert [r.name for r in merged_rows(current, row("c"), "c", frozenset({"a", "c"})) or []] == ["a", "c"]
    assert merged_rows(None, None, "a") is None


_tpl = st.none() | st.builds(tpl, st.text(max_size=10), st.text(max_size=10))
_lookup = st.none() | st.builds(
    Lookup,
    st.none() | st.tuples(st.text(max_size=10), st.text(max_size=2000)),
    st.none() | st.tuples(st.sampled_from(["AuthFailed", "Transient", "TaskFailed", ""]), st.text(max_size=50)),
    st.lists(st.tuples(st.none() | st.text(max_size=10), _tpl), max_size=3).map(tuple),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    sources=st.lists(st.fixed_dictionaries({"providerClass": st.sampled_from(["vsphere", "x"]), "ref": st.text(min_size=1, max_size=10)}), max_size=3),
    names=st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
    lookups=st.lists(_lookup, min_size=3, max_size=3),
)
def test_decide_never_raises(sources: list[dict[str, Any]], names: list[str], lookups: list[Lookup | None]) -> None:
    ps = tuple(provider(n, cls="vsphere" if n != "c" else "other") for n in names)
    table = {("ns", n): lk for n, lk in zip(["a", "b", "c"], lookups, strict=True) if lk is not None}
    plan = decide(Snapshot(image(sources), ps, NOW, table))
    assert get_condition(plan.status.conditions, READY) is not None
