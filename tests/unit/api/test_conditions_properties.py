"""Property tests of set_condition: any sequence of writes keeps the metav1 condition invariants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from banlieue.api.conditions import get_condition, set_condition
from banlieue.api.meta import Condition, ConditionStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WRITE = st.tuples(
    st.sampled_from(["Ready", "Scheduled", "Paused"]),
    st.sampled_from(list(ConditionStatus)),
    st.sampled_from(["Reconciled", "NoProviderMatched", "Paused"]),
)


@given(st.lists(WRITE, max_size=30))
def test_unique_types_and_transition_only_on_status_change(writes: list[tuple[str, ConditionStatus, str]]) -> None:
    conditions: list[Condition] = []
    for step, (type_, status, reason) in enumerate(writes):
        now = T0 + timedelta(seconds=step + 1)
        before = get_condition(conditions, type_)
        conditions = set_condition(conditions, type_, status, reason, "", step, now)
        after = get_condition(conditions, type_)
        assert after is not None and after.status == status and after.observed_generation == step
        if before is not None and before.status == status:
            assert after.last_transition_time == before.last_transition_time
        else:
            assert after.last_transition_time == now
        types = [c.type for c in conditions]
        assert len(types) == len(set(types))
