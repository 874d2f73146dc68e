"""Condition helper semantics (SPEC §1; apimachinery meta.SetStatusCondition)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from banlieue.api.conditions import get_condition, is_false, is_true, remove_condition, set_condition
from banlieue.api.meta import Condition, ConditionStatus

T0 = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 5, 0, tzinfo=UTC)


def _ready(status: ConditionStatus, reason: str = "Old", gen: int = 1) -> Condition:
    return Condition(type="Ready", status=status, reason=reason, message="m", observed_generation=gen, last_transition_time=T0)


@pytest.mark.parametrize(
    ("existing", "status", "want_transition"),
    [
        pytest.param([], True, T1, id="new-condition-gets-now"),
        pytest.param([_ready(ConditionStatus.TRUE)], True, T0, id="same-status-keeps-transition-time"),
        pytest.param([_ready(ConditionStatus.TRUE)], False, T1, id="status-change-moves-transition-time"),
        pytest.param([_ready(ConditionStatus.UNKNOWN)], "Unknown", T0, id="wire-string-status-same"),
        pytest.param([_ready(ConditionStatus.FALSE)], ConditionStatus.TRUE, T1, id="enum-status-change"),
    ],
)
def test_set_condition_transition_time(existing: list[Condition], status: object, want_transition: datetime) -> None:
    out = set_condition(existing, "Ready", status, "New", "msg", 7, T1)  # type: ignore[arg-type]
    cond = get_condition(out, "Ready")
    assert cond is not None
    assert cond.last_transition_time == want_transition
    assert cond.reason == "New" and cond.message == "msg" and cond.observed_generation == 7


def test_set_condition_upserts_by_type_and_keeps_order() -> None:
    a = Condition(type="Scheduled", status=ConditionStatus.TRUE, reason="R", last_transition_time=T0)
    b = _ready(ConditionStatus.FALSE)
    out = set_condition([a, b], "Scheduled", False, "NoProviderMatched", "none", 2, T1)
    assert [c.type for c in out] == ["Scheduled", "Ready"]
    assert out[1] is b
    out2 = set_condition(out, "Paused", False, "NotPaused", "", 2, T1)
    assert [c.type for c in out2] == ["Scheduled", "Ready", "Paused"]


def test_set_condition_does_not_mutate_input_and_is_idempotent() -> None:
    start = [_ready(ConditionStatus.TRUE, reason="Provisioned", gen=3)]
    once = set_condition(start, "Ready", True, "Provisioned", "m", 3, T1)
    assert start[0].last_transition_time == T0 and start[0].reason == "Provisioned"
    twice = set_condition(once, "Ready", True, "Provisioned", "m", 3, T1)
    assert once == twice == start  # a write that changes nothing is detectable by equality


def test_set_condition_rejects_bad_status_and_reason() -> None:
    with pytest.raises(ValueError):
        set_condition([], "Ready", "Maybe", "R", "", 1, T0)
    with pytest.raises(ValueError):
        set_condition([], "Ready", True, "not a reason!", "", 1, T0)


@pytest.mark.parametrize(
    ("conditions", "true", "false"),
    [
        pytest.param(None, False, False, id="none"),
        pytest.param([], False, False, id="absent"),
        pytest.param([_ready(ConditionStatus.TRUE)], True, False, id="true"),
        pytest.param([_ready(ConditionStatus.FALSE)], False, True, id="false"),
        pytest.param([_ready(ConditionStatus.UNKNOWN)], False, False, id="unknown"),
    ],
)
def test_is_true_is_false(conditions: list[Condition] | None, true: bool, false: bool) -> None:
    assert is_true(conditions, "Ready") is true
    assert is_false(conditions, "Ready") is false


def test_remove_condition() -> None:
    assert remove_condition([_ready(ConditionStatus.TRUE)], "Ready") == []
    assert get_condition(None, "Ready") is None


def test_condition_wire_time_is_rfc3339_seconds() -> None:
    cond = Condition(
        type="Ready", status=ConditionStatus.TRUE, reason="R", last_transition_time=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    )
    wire = cond.to_wire()
    assert wire == {"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-02T03:04:05Z"}
    assert Condition.from_wire(wire).last_transition_time == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
