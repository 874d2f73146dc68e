"""VSphereMachine own writes: the cache-behind check, the predicate that drops only our own
status writes, and Events recorded on Ready transitions only."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.reconcilers.vspheremachine.decide import Event
from banlieue.reconcilers.vspheremachine.writes import OwnWrites, recordable


def obj(rv: str, uid: str = "u1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "m1", "namespace": "ns", "uid": uid, "resourceVersion": rv, "generation": 2,
                         "finalizers": ["f"], **meta}, "status": {"rv": rv}}


def test_cache_behind_until_it_shows_our_write_or_what_a_get_returned() -> None:
    w = OwnWrites()
    assert not w.cache_behind(obj("5")), "nothing written: the cache is trusted"
    w.wrote(obj("7"), status=True)
    assert w.cache_behind(obj("5")), "the cache predates our write"
    w.observed(obj("9"))  # a GET: the server is at 9 (someone wrote after us)
    assert w.cache_behind(obj("7")), "the cache must reach what the GET returned"
    assert not w.cache_behind(obj("9"))
    assert not w.cache_behind(obj("5")), "caught up once: trusted again until the next write"


def test_informer_event_of_our_write_marks_the_cache_caught_up() -> None:
    w = OwnWrites()
    w.wrote(obj("7"), status=True)
    assert w.own_status_update(obj("6"), obj("7"))
    assert not w.cache_behind(obj("8"))


@pytest.mark.parametrize(("old", "new", "passes"), [
    pytest.param(obj("6"), obj("7"), False, id="own-status-write-dropped"),
    pytest.param(obj("7"), obj("8"), True, id="someone-elses-write-passes"),
    pytest.param(obj("6", annotations={"cluster.x-k8s.io/paused": ""}), obj("7"), True, id="paused-annotation-removed-passes"),
    pytest.param(obj("6"), obj("7", annotations={"cluster.x-k8s.io/paused": ""}), True, id="paused-annotation-added-passes"),
    pytest.param(obj("6"), obj("7", deletionTimestamp="2026-01-01T00:00:00Z"), True, id="deletion-passes"),
    pytest.param(obj("6"), obj("7", finalizers=[]), True, id="finalizer-change-passes"),
    pytest.param(obj("6"), obj("7", labels={"a": "b"}), True, id="label-change-passes"),
    pytest.param(obj("6"), obj("7", generation=3), True, id="spec-change-passes"),
    pytest.param(obj("6"), obj("7", ownerReferences=[{"kind": "Machine", "name": "m"}]), True, id="owner-change-passes"),
    pytest.param(obj("6", uid="u2"), obj("7", uid="u2"), True, id="another-objects-version-passes"),
])
def test_predicate_drops_only_our_own_status_writes(old: dict[str, Any], new: dict[str, Any], passes: bool) -> None:
    w = OwnWrites()
    w.wrote(obj("7"), status=True)
    w.wrote(obj("8"), status=False)  # spec.providerID: never dropped
    pred = w.predicate()
    assert pred.update(old, new) is passes
    assert pred.create(new) and pred.delete(new) and pred.generic(new)


def test_delete_forgets_the_object() -> None:
    w = OwnWrites()
    w.wrote(obj("7"), status=True)
    w.predicate().delete(obj("7"))
    assert not w.cache_behind(obj("5"))
    assert w.predicate().update(obj("6"), obj("7"))


CLONING = Event("Normal", "Cloning", "cloning", transition=True)
FAILED = Event("Warning", "ConnectFailed", "cannot reach vCenter", transition=True)
PROVISIONED = Event("Normal", "Provisioned", "up", transition=True)
POWERED = Event("Normal", "PoweredOn", "VM m1 is PoweredOn")


@pytest.mark.parametrize(("events", "initial", "final", "last", "want", "want_last"), [
    pytest.param([CLONING, FAILED], None, "ConnectFailed", None, [CLONING, FAILED], "ConnectFailed", id="first-failure-recorded"),
    pytest.param([CLONING, FAILED], "ConnectFailed", "ConnectFailed", "ConnectFailed", [], "ConnectFailed",
                 id="failed-retry-records-nothing"),
    pytest.param([FAILED], "Cloning", "ConnectFailed", "ConnectFailed", [], "ConnectFailed",
                 id="same-reason-twice-no-new-event"),
    pytest.param([CLONING, POWERED, PROVISIONED], "ConnectFailed", "Provisioned", "ConnectFailed",
                 [CLONING, POWERED, PROVISIONED], "Provisioned", id="recovery-recorded"),
    pytest.param([POWERED, POWERED], "Provisioned", "Provisioned", "Provisioned", [POWERED], "Provisioned",
                 id="non-transition-events-once"),
])
def test_recordable_events_are_transitions_only(events: list[Event], initial: str | None, final: str | None,
                                                last: str | None, want: list[Event], want_last: str | None) -> None:
    assert recordable(events, initial, final, last) == (want, want_last)
