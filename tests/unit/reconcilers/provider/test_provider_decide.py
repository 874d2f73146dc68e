"""Provider decide: every rule of banlieue.reconcilers.provider.decide, plus never-raise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from banlieue.api.conditions import READY, get_condition
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import PROVIDER_REACHABLE, Provider, ProviderConditionReason
from banlieue.backends.base import (
    AuthFailed,
    BackendError,
    Capacity,
    FailureDomainInfo,
    Inventory,
    TaskFailed,
    TLSVerifyFailed,
    Transient,
    VCenterAbout,
    taxonomy,
)
from banlieue.reconcilers.provider.decide import (
    CONFIG_RECHECK_SECONDS,
    REFRESH_SECONDS,
    UNREACHABLE_MESSAGE,
    UNSUPPORTED_PROVIDER_CLASS,
    Failure,
    Peer,
    Snapshot,
    capabilities_of,
    decide,
    reason_of,
)

R = ProviderConditionReason
NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


def provider(status: dict[str, Any] | None = None, **spec: Any) -> Provider:
    body: dict[str, Any] = {
        "apiVersion": "banlieue.io/v1alpha1",
        "kind": "Provider",
        "metadata": {"name": "vc1", "namespace": "ns", "generation": 3},
        "spec": {
            "providerClassRef": {"name": "vsphere"},
            "connection": {"endpoint": "vc.example:443", "credentialsRef": {"name": "creds"}},
            "capabilities": {
                "storageClasses": [{"name": "fast", "target": {"datastore": "ds0"}}],
                "networkClasses": [{"name": "lan", "target": {"portGroup": "VM Network"}}],
            },
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return Provider.from_wire(body)


def fd(dc: str, cl: str, cpu: int = 1000, mem: int = 2048, disk: int = 100, storage: tuple[str, ...] = ("fast",)) -> FailureDomainInfo:
    return FailureDomainInfo(dc, cl, Capacity(cpu, mem, disk), storage, ("lan",), ("efi",))


INVENTORY = Inventory((fd("DC1", "C0"), fd("DC0", "C1"), fd("DC0", "C0")), "8.0")


def cond(plan_status: Any, type_: str) -> tuple[ConditionStatus, str, str]:
    c = get_condition(plan_status.conditions, type_)
    assert c is not None
    return c.status, c.reason, c.message


def reconciled(inv: Inventory = INVENTORY) -> Provider:
    """A Provider whose status is what a successful reconcile of ``inv`` wrote."""
    p = provider()
    plan = decide(Snapshot(p, NOW, inventory=inv, api_version="8.0"))
    return provider(status=plan.status.to_wire())


def test_success_failure_domains_names_labels_attributes() -> None:
    plan = decide(Snapshot(provider(), NOW, inventory=INVENTORY, api_version="8.0"))
    fds = plan.status.failure_domains or []
    assert [f.name for f in fds] == ["vc1-dc0-c0", "vc1-dc0-c1", "vc1-dc1-c0"]
    first = fds[0].to_wire()
    assert first["labels"] == {"dc": "DC0", "cluster": "C0"}
    assert first["attributes"] == {
        "availableStorageClasses": ["fast"],
        "availableNetworkClasses": ["lan"],
        "features": ["efi"],
        "capacity": {"cpuMHz": 1000, "memoryMiB": 2048, "storageGiB": 100, "updateTime": "2026-01-01T00:00:00Z"},
        "raw": {"datacenter": "DC0", "cluster": "C0"},
    }
    assert cond(plan.status, READY)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    assert cond(plan.status, PROVIDER_REACHABLE)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    assert "8.0" in cond(plan.status, PROVIDER_REACHABLE)[2]
    assert plan.status.observed_generation == 3
    assert all(c.observed_generation == 3 for c in plan.status.conditions or [])
    assert plan.write_status and plan.requeue_after == REFRESH_SECONDS and not plan.requeue
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", R.RECONCILED)]


def test_second_identical_reconcile_writes_nothing_and_records_no_event() -> None:
    plan = decide(Snapshot(reconciled(), LATER, inventory=INVENTORY, api_version="8.0"))
    assert not plan.write_status and plan.events == ()


def test_capacity_jitter_below_one_percent_keeps_current_numbers() -> None:
    jitter = Inventory((fd("DC1", "C0", cpu=1005), fd("DC0", "C1", mem=2050), fd("DC0", "C0", disk=100)), "8.0")
    plan = decide(Snapshot(reconciled(), LATER, inventory=jitter, api_version="8.0"))
    assert not plan.write_status


def test_capacity_change_of_one_percent_or_more_is_written() -> None:
    moved = Inventory((fd("DC1", "C0", cpu=500), fd("DC0", "C1"), fd("DC0", "C0")), "8.0")
    plan = decide(Snapshot(reconciled(), LATER, inventory=moved, api_version="8.0"))
    assert plan.write_status
    by_name = {f.name: f for f in plan.status.failure_domains or []}
    cap = by_name["vc1-dc1-c0"].attributes.capacity  # type: ignore[union-attr]
    assert cap is not None and cap.cpu_mhz == 500


def capacity_times(plan: Any) -> dict[str, datetime | None]:
    return {f.name: f.attributes.capacity.update_time for f in plan.status.failure_domains or []}


def test_capacity_update_time_moves_only_with_the_figures_written() -> None:
    # The scheduler counts VMs provisioned at or after updateTime against the domain: it must
    # say when the written figures were measured, and a kept figure keeps its time.
    jitter = Inventory((fd("DC1", "C0", mem=2050), fd("DC0", "C1", mem=1024), fd("DC0", "C0")), "8.0")
    plan = decide(Snapshot(reconciled(), LATER, inventory=jitter, api_version="8.0"))
    assert capacity_times(plan) == {"vc1-dc0-c0": NOW, "vc1-dc0-c1": LATER, "vc1-dc1-c0": NOW}


def test_a_capacity_without_update_time_gets_one_in_a_single_write() -> None:
    # Written by a version without updateTime: stamped once, then steady (zero writes).
    old = reconciled().status.to_wire()  # type: ignore[union-attr]
    for f in old["failureDomains"]:
        del f["attributes"]["capacity"]["updateTime"]
    plan = decide(Snapshot(provider(status=old), LATER, inventory=INVENTORY, api_version="8.0"))
    assert plan.write_status and set(capacity_times(plan).values()) == {LATER}
    again = decide(Snapshot(provider(status=plan.status.to_wire()), LATER + timedelta(minutes=5),
                            inventory=INVENTORY, api_version="8.0"))
    assert not again.write_status


def test_cluster_removed_from_inventory_disappears() -> None:
    plan = decide(Snapshot(reconciled(), LATER, inventory=Inventory((fd("DC0", "C0"),), "8.0"), api_version="8.0"))
    assert [f.name for f in plan.status.failure_domains or []] == ["vc1-dc0-c0"]


def test_class_not_available_anywhere_named_in_ready_message() -> None:
    inv = Inventory((fd("DC0", "C0", storage=()),), "8.0")
    plan = decide(Snapshot(provider(), NOW, inventory=inv, api_version="8.0"))
    status, reason, message = cond(plan.status, READY)
    assert (status, reason) == (ConditionStatus.TRUE, R.RECONCILED)
    assert "storageClass fast" in message


def test_empty_inventory_reachable_but_not_ready() -> None:
    plan = decide(Snapshot(provider(), NOW, inventory=Inventory((), "8.0"), api_version="8.0"))
    assert cond(plan.status, PROVIDER_REACHABLE)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    assert cond(plan.status, READY)[:2] == (ConditionStatus.FALSE, R.INVENTORY_FAILED)
    assert plan.status.failure_domains == []


@pytest.mark.parametrize(
    ("failure", "reason", "reachable", "requeue", "requeue_after"),
    [
        pytest.param(Failure("config", R.SECRET_MISSING, "Secret ns/creds not found"), R.SECRET_MISSING, ConditionStatus.FALSE, False, CONFIG_RECHECK_SECONDS, id="secret-missing"),
        pytest.param(Failure("config", R.SECRET_INVALID, "no key 'password'"), R.SECRET_INVALID, ConditionStatus.FALSE, False, CONFIG_RECHECK_SECONDS, id="secret-invalid"),
        pytest.param(Failure("config", R.TLS_VERIFY_FAILED, "caBundle is not PEM"), R.TLS_VERIFY_FAILED, ConditionStatus.FALSE, False, CONFIG_RECHECK_SECONDS, id="ca-bundle-not-pem"),
        pytest.param(Failure("config", "Weird", "?"), R.SECRET_INVALID, ConditionStatus.FALSE, False, CONFIG_RECHECK_SECONDS, id="config-unknown-reason-is-secret-invalid"),
        pytest.param(Failure("connect", "AuthFailed", "InvalidLogin"), R.SECRET_INVALID, ConditionStatus.FALSE, True, None, id="auth-failed-is-secret-invalid"),
        pytest.param(Failure("connect", "TLSVerifyFailed", "bad cert"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="tls-verify-failed-is-connect-failed"),
        pytest.param(Failure("connect", "Transient", "refused"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="transient-is-connect-failed"),
        pytest.param(Failure("connect", "NotFound", "?"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="other-connect-error-is-connect-failed"),
        pytest.param(Failure("inventory", "ConnectFailed", "refused"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="inventory-connect-failed-reason"),
        pytest.param(Failure("inventory", "Transient", "reset"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="inventory-transient-is-connect-failed"),
        pytest.param(Failure("inventory", "AuthFailed", "no permission"), R.SECRET_INVALID, ConditionStatus.FALSE, True, None, id="inventory-auth-failed"),
        pytest.param(Failure("inventory", "TLSVerifyFailed", "x"), R.CONNECT_FAILED, ConditionStatus.FALSE, True, None, id="inventory-tls"),
        pytest.param(Failure("inventory", "TaskFailed", "walk broke"), R.INVENTORY_FAILED, ConditionStatus.TRUE, True, None, id="inventory-failed-still-reachable"),
    ],
)
def test_failures_keep_failure_domains_and_set_reason(
    failure: Failure, reason: str, reachable: ConditionStatus, requeue: bool, requeue_after: float | None
) -> None:
    before = reconciled()
    plan = decide(Snapshot(before, LATER, failure=failure))
    assert reason_of(failure) == reason
    assert plan.status.failure_domains == before.status.failure_domains  # type: ignore[union-attr]
    assert cond(plan.status, READY)[:2] == (ConditionStatus.FALSE, reason)
    assert cond(plan.status, PROVIDER_REACHABLE)[0] == reachable
    assert plan.write_status
    assert (plan.requeue, plan.requeue_after) == (requeue, requeue_after)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", reason)]
    ready = get_condition(plan.status.conditions, READY)
    assert ready is not None and ready.last_transition_time == LATER.replace(microsecond=0)


def test_failure_messages_are_actionable() -> None:
    plan = decide(Snapshot(provider(), NOW, failure=Failure("connect", "TLSVerifyFailed", "self-signed")))
    assert "caBundle" in cond(plan.status, READY)[2] and "self-signed" not in cond(plan.status, READY)[2]  # among the causes
    plan = decide(Snapshot(provider(), NOW, failure=Failure("connect", "AuthFailed", "InvalidLogin")))
    assert "spec.connection.credentialsRef" in cond(plan.status, READY)[2]
    plan = decide(Snapshot(provider(), NOW, failure=Failure("connect", "Transient", "x" * 5000)))
    assert len(cond(plan.status, READY)[2]) < 1200


@pytest.mark.parametrize(("taxonomy", "answer"), [
    ("Transient", "[Errno 111] Connection refused"), ("Transient", "not a vSphere API endpoint: HTTP 404 from nginx"),
    ("Transient", "timed out after 120 s"), ("Transient", "vCenter has not answered since 2026-01-01T00:00:00Z (CurrentTime probe)"),
    ("TLSVerifyFailed", "TLS certificate verification failed: self-signed certificate")])
def test_what_answered_on_the_endpoint_is_not_told_in_status(taxonomy: str, answer: str) -> None:
    """Issue 23 case 5: refused, not a VIM server, silent and (new-user finding) a TLS server
    whose certificate does not verify collapse into one reason and message (SSRF: a tenant
    pointing a Provider anywhere learns nothing about what is there)."""
    plan = decide(Snapshot(provider(), NOW, failure=Failure("connect", taxonomy, answer)))
    for c in plan.status.conditions or []:
        assert answer not in c.message and "127.0.0.1" not in c.message
    assert cond(plan.status, READY)[1:] == (R.CONNECT_FAILED, UNREACHABLE_MESSAGE)


def test_no_inventory_and_no_failure_is_connect_failed() -> None:
    plan = decide(Snapshot(provider(), NOW))
    assert cond(plan.status, READY)[:2] == (ConditionStatus.FALSE, R.CONNECT_FAILED)


def test_paused_keeps_status_values_sets_reason_paused() -> None:
    before = reconciled()
    p = provider(status=before.status.to_wire(), paused=True)  # type: ignore[union-attr]
    plan = decide(Snapshot(p, LATER))
    assert cond(plan.status, READY)[:2] == (ConditionStatus.TRUE, R.PAUSED)
    assert cond(plan.status, PROVIDER_REACHABLE)[:2] == (ConditionStatus.TRUE, R.PAUSED)
    assert plan.status.failure_domains == before.status.failure_domains  # type: ignore[union-attr]
    assert plan.requeue_after is None and not plan.requeue
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", R.PAUSED)]


def test_paused_never_observed_is_unknown() -> None:
    plan = decide(Snapshot(provider(paused=True), NOW))
    assert cond(plan.status, READY)[:2] == (ConditionStatus.UNKNOWN, R.PAUSED)
    assert cond(plan.status, PROVIDER_REACHABLE)[:2] == (ConditionStatus.UNKNOWN, R.PAUSED)


def test_unsupported_provider_class() -> None:
    plan = decide(Snapshot(provider(providerClassRef={"name": "kubevirt"}), NOW))
    status, reason, message = cond(plan.status, READY)
    assert (status, reason) == (ConditionStatus.FALSE, UNSUPPORTED_PROVIDER_CLASS)
    assert "kubevirt" in message and "vsphere" in message
    assert cond(plan.status, PROVIDER_REACHABLE)[0] == ConditionStatus.UNKNOWN
    assert plan.requeue_after is None and not plan.requeue


@pytest.mark.parametrize(
    ("err", "want"),
    [
        pytest.param(Transient("refused", reason="ConnectFailed"), "Transient", id="class-wins-over-specific-reason"),
        pytest.param(AuthFailed("no"), "AuthFailed", id="auth"),
        pytest.param(TLSVerifyFailed("no"), "TLSVerifyFailed", id="tls"),
        pytest.param(TaskFailed("no"), "TaskFailed", id="task"),
        pytest.param(BackendError("odd", reason="Weird"), "Weird", id="base-keeps-reason"),
    ],
)
def test_taxonomy_by_class(err: BackendError, want: str) -> None:
    assert taxonomy(err) == want


def test_capabilities_of_maps_spec() -> None:
    caps = capabilities_of(provider())
    assert caps.storage_classes[0].datastore == "ds0" and caps.network_classes[0].port_group == "VM Network"
    assert capabilities_of(provider(capabilities=None)).storage_classes == ()


_names = st.text(max_size=70)
_inventories = st.builds(
    Inventory,
    st.lists(
        st.builds(
            FailureDomainInfo,
            _names,
            _names,
            st.builds(Capacity, st.integers(-10, 10**9), st.integers(-10, 10**9), st.integers(-10, 10**9)),
            st.lists(_names, max_size=3).map(tuple),
            st.lists(_names, max_size=3).map(tuple),
            st.lists(_names, max_size=3).map(tuple),
        ),
        max_size=6,
    ).map(tuple),
    st.text(max_size=5),
)
_failures = st.builds(Failure, st.sampled_from(["config", "connect", "inventory"]), st.text(max_size=20), st.text(max_size=3000))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    cls=st.sampled_from(["vsphere", "other"]),
    paused=st.sampled_from([None, False, True]),
    inv=st.none() | _inventories,
    failure=st.none() | _failures,
    first=st.none() | _inventories,
)
def test_decide_never_raises(cls: str, paused: bool | None, inv: Inventory | None, failure: Failure | None, first: Inventory | None) -> None:
    p = provider(providerClassRef={"name": cls}, paused=paused)
    if first is not None:
        p = provider(
            status=decide(Snapshot(provider(), NOW, inventory=first)).status.to_wire(), providerClassRef={"name": cls}, paused=paused
        )
    plan = decide(Snapshot(p, LATER, inventory=inv, failure=failure))
    assert get_condition(plan.status.conditions, READY) is not None
    names = [f.name for f in plan.status.failure_domains or []]
    assert len(names) == len(set(names))


def test_hung_vcenter_conditions_change_when_it_stopped_answering() -> None:
    # Issue 21: lastTransitionTime is when the vCenter stopped answering (the backend's probe),
    # not when the reconcile noticed.
    before = reconciled()
    silent = LATER - timedelta(seconds=6)
    failure = Failure("connect", "Transient", "vCenter has not answered since ...")
    plan = decide(Snapshot(before, LATER, failure=failure, unreachable_since=silent))
    for type_ in (PROVIDER_REACHABLE, READY):
        c = get_condition(plan.status.conditions, type_)
        assert c is not None and c.status is ConditionStatus.FALSE and c.reason == R.CONNECT_FAILED
        assert c.last_transition_time == silent.replace(microsecond=0)
    assert plan.requeue


# --- the vCenter's identity (ADR 0013) ---------------------------------------------------------

VC_A = VCenterAbout("aaaaaaaa-0000-4000-8000-000000000001", "8.0.2", "VirtualCenter", "8.0")
VC_B = VCenterAbout("bbbbbbbb-0000-4000-8000-000000000002", "8.0.2", "VirtualCenter", "8.0")


def on_vcenter(about: VCenterAbout) -> Provider:
    """A Provider whose status records ``about`` (a reconcile of INVENTORY there)."""
    plan = decide(Snapshot(provider(), NOW, inventory=INVENTORY, api_version="8.0", vcenter=about))
    return provider(status=plan.status.to_wire())


def test_first_connection_records_the_vcenter() -> None:
    plan = decide(Snapshot(provider(), NOW, inventory=INVENTORY, api_version="8.0", vcenter=VC_A))
    assert plan.status.vcenter is not None
    assert plan.status.to_wire()["vcenter"] == {"instanceUUID": VC_A.instance_uuid, "version": "8.0.2", "apiType": "VirtualCenter"}
    assert cond(plan.status, "VCenterUnique")[:2] == (ConditionStatus.TRUE, R.UNIQUE)


def test_another_vcenter_with_machines_is_refused_and_keeps_what_was_recorded() -> None:
    p = on_vcenter(VC_A)
    other = Inventory((fd("X", "Y"),), "8.0")
    users = tuple(f"m{i}" for i in range(7))
    plan = decide(Snapshot(p, LATER, inventory=other, api_version="8.0", vcenter=VC_B, users=users))
    status, reason, message = cond(plan.status, READY)
    assert (status, reason) == (ConditionStatus.FALSE, R.VCENTER_IDENTITY_CHANGED)
    assert cond(plan.status, PROVIDER_REACHABLE)[:2] == (ConditionStatus.FALSE, R.VCENTER_IDENTITY_CHANGED)
    assert VC_A.instance_uuid in message and VC_B.instance_uuid in message and "7 VSphereMachine(s)" in message
    assert "m0, m1, m2, m3, m4, ..." in message and "m5" not in message  # capped
    assert plan.status.vcenter is not None and plan.status.vcenter.instance_uuid == VC_A.instance_uuid
    assert p.status is not None and plan.status.failure_domains == p.status.failure_domains  # not the other vCenter's
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", R.VCENTER_IDENTITY_CHANGED)]
    assert plan.requeue_after is not None


def test_another_vcenter_without_machines_is_recorded_with_an_event() -> None:
    plan = decide(Snapshot(on_vcenter(VC_A), LATER, inventory=INVENTORY, api_version="8.0", vcenter=VC_B))
    assert plan.status.vcenter is not None and plan.status.vcenter.instance_uuid == VC_B.instance_uuid
    assert cond(plan.status, READY)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    assert [e.reason for e in plan.events] == ["VCenterChanged"]


@pytest.mark.parametrize("failure", [Failure("connect", "Transient", "down"), Failure("config", R.SECRET_MISSING, "gone")])
def test_failures_and_pause_keep_the_recorded_vcenter(failure: Failure) -> None:
    p = on_vcenter(VC_A)
    for snap in (Snapshot(p, LATER, failure=failure), Snapshot(provider(status=p.status.to_wire() if p.status else None, paused=True), LATER)):
        plan = decide(snap)
        assert plan.status.vcenter is not None and plan.status.vcenter.instance_uuid == VC_A.instance_uuid


def test_duplicates_are_flagged_and_only_the_oldest_places() -> None:
    p = on_vcenter(VC_A)
    older = Peer("ns", "vc0", NOW - timedelta(days=1))
    remote = Peer("other-ns", "theirs", NOW + timedelta(days=1))
    plan = decide(Snapshot(p, LATER, inventory=INVENTORY, api_version="8.0", vcenter=VC_A, same_vcenter=(older, remote)))
    status, reason, message = cond(plan.status, "VCenterUnique")
    assert (status, reason) == (ConditionStatus.FALSE, R.DUPLICATE_VCENTER)
    assert "Provider vc0" in message and "other-ns" not in message and "theirs" not in message
    assert "namespace" not in message  # nothing about other tenants, not even a count
    assert cond(plan.status, READY)[:2] == (ConditionStatus.FALSE, R.DUPLICATE_VCENTER)
    assert cond(plan.status, PROVIDER_REACHABLE)[0] == ConditionStatus.TRUE
    # The oldest one keeps placing; flagged with a Warning too.
    first = provider(status=p.status.to_wire() if p.status else None)
    first.metadata.creation_timestamp = NOW - timedelta(days=2)
    plan = decide(Snapshot(first, LATER, inventory=INVENTORY, api_version="8.0", vcenter=VC_A, same_vcenter=(older,)))
    assert cond(plan.status, READY)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    assert cond(plan.status, "VCenterUnique")[:2] == (ConditionStatus.FALSE, R.DUPLICATE_VCENTER)
    assert ("Warning", R.DUPLICATE_VCENTER) in [(e.type, e.reason) for e in plan.events]


@pytest.mark.parametrize(("names", "said"), [
    pytest.param(("vc0",), "Provider vc0 also reaches vCenter ", id="one"),
    pytest.param(("vc0", "vc1"), "Providers vc0 and vc1 also reach vCenter ", id="two"),
    pytest.param(("vc0", "vc1", "vc2"), "Providers vc0, vc1 and vc2 also reach vCenter ", id="three"),
])
def test_the_duplicate_message_names_the_others_in_english(names: tuple[str, ...], said: str) -> None:
    """New-user finding: two others read "Provider vc0, Provider vc1 also reach"."""
    peers = tuple(Peer("ns", n, NOW - timedelta(days=1)) for n in names)
    plan = decide(Snapshot(on_vcenter(VC_A), LATER, inventory=INVENTORY, api_version="8.0", vcenter=VC_A, same_vcenter=peers))
    assert cond(plan.status, "VCenterUnique")[2].startswith(said)


def test_providers_of_other_namespaces_on_the_same_vcenter_are_other_tenants() -> None:
    """One vCenter shared by tenants, each with its own Provider and credentials, is the normal
    multi-tenant set-up (docs/security.md): an older Provider in another namespace neither stops
    this one from placing nor shows up in its status (hostile-tenant finding: it did both)."""
    p = on_vcenter(VC_A)
    elsewhere = (Peer("team-b", "shared", NOW - timedelta(days=1)), Peer("team-c", "x", NOW - timedelta(days=3)))
    plan = decide(Snapshot(p, LATER, inventory=INVENTORY, api_version="8.0", vcenter=VC_A, same_vcenter=elsewhere))
    assert cond(plan.status, READY)[:2] == (ConditionStatus.TRUE, R.RECONCILED)
    status, reason, message = cond(plan.status, "VCenterUnique")
    assert (status, reason) == (ConditionStatus.TRUE, R.UNIQUE)
    assert "team-" not in message and "shared" not in message
    assert R.DUPLICATE_VCENTER not in [e.reason for e in plan.events]


def test_a_busy_vcenter_leaves_the_status_as_it_is_and_looks_again() -> None:
    """``Snapshot.busy``: the first call waits its turn behind requests the vCenter answers."""
    ready = reconciled()
    plan = decide(Snapshot(ready, LATER, busy=True, recheck_after=5.0))
    assert not plan.write_status and plan.events == ()
    assert plan.status == ready.status
    assert plan.requeue_after == 5.0 and not plan.requeue
    fresh = decide(Snapshot(provider(), LATER, busy=True))
    assert not fresh.write_status and fresh.requeue and fresh.requeue_after is None
