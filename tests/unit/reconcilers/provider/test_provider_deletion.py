"""Deletion without leaking VMs: the Provider's finalizer held while VSphereMachines use it
(``provider.deletion``), the last known Connection store (``last_connection``), and the
VSphereMachine delete branches that use it (``vspheremachine.decide``). Table tests, one row per
rule, and hypothesis: no input makes the new decide raise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from banlieue.api.conditions import READY, get_condition
from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.provider import Provider
from banlieue.backends.base import Connection, VMInfo
from banlieue.reconcilers.kinds import FINALIZER_PROVIDER
from banlieue.reconcilers.last_connection import LastKnownConnections
from banlieue.reconcilers.provider.deletion import (
    USERS_IN_MESSAGE,
    decide_deletion,
    machine_uses_provider,
)
from banlieue.reconcilers.vspheremachine.decide import Snapshot, decide, recorded_provider
from banlieue.reconcilers.vspheremachine.placement import PlacementError, resolve_placement

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UID = "11111111-2222-3333-4444-555555555555"
FIN_VSM = "infrastructure.banlieue.io/vspheremachine"
FD = "vc1-dc0-c0"


def provider(*, deleting: bool = True, finalizer: bool = True, ready: str | None = "Reconciled", name: str = "vc1",
             paused: bool = False) -> Provider:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "generation": 3}
    if finalizer:
        meta["finalizers"] = [FINALIZER_PROVIDER]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:00:00Z"
    status: dict[str, Any] = {"failureDomains": [{"name": FD, "attributes": {"raw": {"datacenter": "DC0", "cluster": "DC0_C0"}}}]}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True", "reason": ready, "message": "1 failure domain(s)",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2}]
    return Provider.from_wire({
        "metadata": meta,
        "spec": {"providerClassRef": {"name": "vsphere"}, "connection": {"endpoint": "vc", "credentialsRef": {"name": "creds"}},
                 "paused": paused},
        "status": status,
    })


def wire_machine(name: str = "m1", ns: str = "ns", spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec or {}, **({"status": status} if status else {})}


@pytest.mark.parametrize(("machine", "uses"), [
    pytest.param(wire_machine(spec={"providerRef": {"name": "vc1"}}), True, id="providerRef-names-it"),
    pytest.param(wire_machine(spec={"providerRef": {"name": "vc2"}, "failureDomain": FD}), False, id="providerRef-wins-over-failure-domain"),
    pytest.param(wire_machine(ns="other", spec={"providerRef": {"name": "vc1"}}), False, id="other-namespace"),
    pytest.param(wire_machine(spec={"failureDomain": FD}), True, id="spec-failure-domain-of-the-provider"),
    pytest.param(wire_machine(status={"failureDomain": FD}), True, id="status-failure-domain-capi-path"),
    pytest.param(wire_machine(spec={"failureDomain": "elsewhere"}), False, id="failure-domain-of-another-provider"),
    pytest.param(wire_machine(), False, id="no-reference"),
])
def test_machine_uses_provider(machine: dict[str, Any], uses: bool) -> None:
    assert machine_uses_provider(machine, provider()) is uses


@pytest.mark.parametrize(("p", "users", "ready", "write", "remove", "requeue", "event"), [
    pytest.param(provider(), ["m1", "m2"], ("False", "Deleting"), True, False, 60.0, "Deleting", id="in-use-keeps-finalizer-and-says-how-many"),
    pytest.param(provider(paused=True), ["m1"], ("False", "Deleting"), True, False, 60.0, "Deleting", id="paused-in-use-still-kept"),
    pytest.param(provider(), [], None, False, True, None, None, id="unused-drops-finalizer"),
    pytest.param(provider(finalizer=False), [], None, False, False, None, None, id="no-finalizer-nothing-to-do"),
    pytest.param(provider(ready="Deleting"), ["m1"], ("False", "Deleting"), True, False, 60.0, None, id="still-deleting-no-second-event"),
    pytest.param(provider(ready=None), ["m1"], ("False", "Deleting"), True, False, 60.0, "Deleting", id="no-ready-yet"),
])
def test_decide_deletion(p: Provider, users: list[str], ready: tuple[str, str] | None, write: bool, remove: bool,
                         requeue: float | None, event: str | None) -> None:
    plan = decide_deletion(p, users, NOW)
    assert plan.remove_finalizer is remove
    assert plan.requeue_after == requeue
    assert [e.reason for e in plan.events] == ([event] if event else [])
    if ready is not None:
        cond = get_condition(plan.status.conditions, READY)
        assert cond is not None and (cond.status.value, cond.reason) == ready
        assert f"{len(users)} VSphereMachine(s)" in (cond.message or "") and users[0] in (cond.message or "")
        assert cond.observed_generation == 3
        # The failure domains stay: the machines still resolve their placement through them.
        assert [fd.name for fd in plan.status.failure_domains or []] == [FD]
    # A repeated reconcile with the status already written writes nothing.
    assert plan.write_status is write
    if write:
        again = decide_deletion(p.model_copy(update={"status": plan.status}), users, NOW)
        assert not again.write_status and not again.events


def test_deletion_message_lists_a_few_names() -> None:
    users = [f"m{i:02d}" for i in range(12)]
    cond = get_condition(decide_deletion(provider(), users, NOW).status.conditions, READY)
    assert cond is not None and "12 VSphereMachine(s)" in cond.message
    assert users[USERS_IN_MESSAGE - 1] in cond.message and users[USERS_IN_MESSAGE] not in cond.message and "..." in cond.message


@settings(max_examples=60, deadline=None)
@given(users=st.lists(st.text(min_size=1, max_size=8), max_size=10), deleting=st.booleans(), finalizer=st.booleans(),
       ready=st.sampled_from([None, "Reconciled", "Deleting", "ConnectFailed"]))
def test_decide_deletion_never_raises(users: list[str], deleting: bool, finalizer: bool, ready: str | None) -> None:
    plan = decide_deletion(provider(deleting=deleting, finalizer=finalizer, ready=ready), sorted(users), NOW)
    assert not (plan.remove_finalizer and users)


# --- last known connections ---------------------------------------------------------------------

def conn(provider_key: str = "ns/vc1", password: str = "s3cret") -> Connection:
    return Connection(provider=provider_key, endpoint="vc", username="u", password=password)


def test_last_known_connections_keep_the_latest_and_never_show_secrets() -> None:
    store = LastKnownConnections()
    assert store.get("ns/vc1") is None and store.known("ns") == frozenset()
    store.remember(conn(password="old"))
    store.remember(conn(password="new"))
    store.remember(conn("other/vc1"))
    got = store.get("ns/vc1")
    assert got is not None and got.password == "new"
    assert store.known("ns") == frozenset({"vc1"}) and store.known("other") == frozenset({"vc1"})
    assert "new" not in repr(store) and "s3cret" not in repr(store) and "new" not in repr(got)
    store.forget("ns/vc1")
    assert store.get("ns/vc1") is None and store.known("ns") == frozenset()


# --- VSphereMachine deletion with the last known connection ------------------------------------

def machine(spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None, provisioned: bool = True) -> VSphereMachine:
    meta: dict[str, Any] = {"name": "m1", "namespace": "ns", "uid": UID, "generation": 2, "finalizers": [FIN_VSM],
                            "deletionTimestamp": "2026-01-02T03:00:00Z"}
    if labels:
        meta["labels"] = labels
    base = {"providerRef": {"name": "vc1"}, "failureDomain": FD, "template": "ubuntu", "numCPUs": 2, "memoryMiB": 2048}
    status = {"status": {"instanceUUID": "inst-1", "failureDomain": FD}} if provisioned else {}
    return VSphereMachine.from_wire({"metadata": meta, "spec": {**base, **(spec or {})}, **status})


def vm() -> VMInfo:
    return VMInfo(uid=UID, moref="vm-42", name="m1", power_state="PoweredOn", bios_uuid="b", instance_uuid="inst-1",
                  num_cpus=2, num_cores_per_socket=1, memory_mib=2048, disks_gib=(20,), nics=(), ip_address="10.0.0.5")


PROV = (provider(),)
NO_FD_REF = {"providerRef": None}


@pytest.mark.parametrize(("snap", "expect"), [
    pytest.param(Snapshot(machine(), NOW, providers=PROV, connection_error=("SecretMissing", "Secret ns/creds not found"),
                          known_connections=frozenset({"vc1"})),
                 {"connect": True, "last_known": "vc1", "message": "last known connection of Provider vc1"},
                 id="secret-gone-uses-last-known-connection"),
    pytest.param(Snapshot(machine(), NOW, providers=PROV, connection_error=("SecretMissing", "Secret ns/creds not found"),
                          known_connections=frozenset({"other"})),
                 {"connect": False, "requeue_after": 60.0, "message": "cannot reach vCenter"},
                 id="secret-gone-no-last-known-keeps-retrying"),
    pytest.param(Snapshot(machine(), NOW, providers=(), known_connections=frozenset({"vc1"})),
                 {"connect": True, "last_known": "vc1", "message": "Provider vc1 not found"},
                 id="provider-gone-uses-last-known-connection"),
    pytest.param(Snapshot(machine(spec=NO_FD_REF, labels={"banlieue.io/provider": "vc1"}), NOW, providers=(),
                          known_connections=frozenset({"vc1"})),
                 {"connect": True, "last_known": "vc1"}, id="provider-gone-found-by-label"),
    pytest.param(Snapshot(machine(), NOW, providers=(), looked_up=True, vm=vm(), known_connections=frozenset({"vc1"})),
                 {"action": "destroy", "last_known": "vc1"}, id="provider-gone-destroys-through-last-known"),
    pytest.param(Snapshot(machine(), NOW, providers=(), looked_up=True, destroyed=True, known_connections=frozenset({"vc1"})),
                 {"remove_finalizer": True, "event": "Deleted"}, id="provider-gone-destroyed-drops-finalizer"),
    pytest.param(Snapshot(machine(), NOW, providers=()),
                 {"remove_finalizer": True, "event": "ProviderGone"}, id="provider-gone-no-last-known-leaves-vm"),
    pytest.param(Snapshot(machine(provisioned=False), NOW, providers=(), known_connections=frozenset({"vc1"})),
                 {"connect": True, "last_known": "vc1"}, id="provider-gone-never-provisioned-still-looks-by-uid"),
    pytest.param(Snapshot(machine(), NOW, providers=(provider(),), known_connections=frozenset({"vc1"})),
                 {"connect": True, "last_known": None}, id="secret-present-builds-a-fresh-connection"),
])
def test_delete_with_last_known_connection(snap: Snapshot, expect: dict[str, Any]) -> None:
    plan = decide(snap)
    assert plan.connect is expect.get("connect", False)
    if "last_known" in expect:
        assert plan.last_known == expect["last_known"]
    if "action" in expect:
        assert plan.action is not None and plan.action.kind == expect["action"]
    assert plan.remove_finalizer is expect.get("remove_finalizer", False)
    if "requeue_after" in expect:
        assert plan.requeue_after == expect["requeue_after"]
    if "event" in expect:
        assert expect["event"] in {e.reason for e in plan.events}
    if "message" in expect:
        cond = get_condition(plan.status.conditions if plan.status else None, READY)
        assert cond is not None and cond.reason == "Deleting" and expect["message"] in (cond.message or "")


def test_recorded_provider() -> None:
    assert recorded_provider(machine()) == "vc1"
    assert recorded_provider(machine(spec=NO_FD_REF, labels={"banlieue.io/provider": "vc9"})) == "vc9"
    assert recorded_provider(machine(spec=NO_FD_REF)) is None


def test_provider_gone_is_provider_not_found_not_failure_domain() -> None:
    with pytest.raises(PlacementError) as err:
        resolve_placement(machine(), FD, ())
    assert err.value.reason == "ProviderNotFound" and "Provider vc1 not found" in err.value.message
    # Without providerRef, a failure domain nobody lists is still FailureDomainNotFound.
    with pytest.raises(PlacementError) as err:
        resolve_placement(machine(spec=NO_FD_REF), FD, ())
    assert err.value.reason == "FailureDomainNotFound"


@settings(max_examples=80, deadline=None)
@given(known=st.frozensets(st.sampled_from(["vc1", "vc2"])), has_provider=st.booleans(), looked_up=st.booleans(),
       err=st.none() | st.just(("SecretMissing", "gone")), label=st.booleans(), ref=st.booleans())
def test_delete_decide_never_raises(known: frozenset[str], has_provider: bool, looked_up: bool, err: tuple[str, str] | None,
                                    label: bool, ref: bool) -> None:
    m = machine(spec=None if ref else NO_FD_REF, labels={"banlieue.io/provider": "vc1"} if label else None)
    plan = decide(Snapshot(m, NOW, providers=PROV if has_provider else (), looked_up=looked_up, connection_error=err,
                           known_connections=known))
    assert plan.status is not None or plan.connect or plan.remove_finalizer
