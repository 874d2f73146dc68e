"""Condition helpers: metav1.Condition upsert semantics (apimachinery ``meta.SetStatusCondition``).

Rules (SPEC §1): upsert by type; ``lastTransitionTime`` changes only when ``status`` changes;
``observedGeneration`` is set on every write. Helpers never mutate their input, so the caller
can compare old and new lists and skip a write that changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from banlieue.api.meta import Condition, ConditionStatus

READY = "Ready"
"""The condition every object with status carries at all times (SPEC §1)."""
PAUSED = "Paused"
"""CAPI v1beta2 ``Paused`` condition type."""
HARDWARE_CHANGE_PENDING = "HardwareChangePending"
"""True while a VM's hardware differs from its spec in a way banlieue will not apply now (a
CPU/memory change waiting for the VM to be powered off, a disk shrink refused, a disk no longer
in the spec kept): docs/concepts.md "Changing things that are in use"."""


VM_UNIQUE = "VMUnique"
"""False (``DuplicateVM``) while another VM of the vCenter carries the machine's UID; True
(``Unique``) once none does, only on a machine that had a duplicate: docs/concepts.md
"Changing things that are in use", ADR 0012 decision 9."""


def _as_status(status: ConditionStatus | str | bool) -> ConditionStatus:
    if isinstance(status, bool):
        return ConditionStatus.TRUE if status else ConditionStatus.FALSE
    return ConditionStatus(status)


def set_condition(
    conditions: Sequence[Condition] | None,
    type: str,
    status: ConditionStatus | str | bool,
    reason: str,
    message: str,
    observed_generation: int | None,
    now: datetime,
) -> list[Condition]:
    """Return a copy of ``conditions`` with condition ``type`` inserted or updated.

    ``status`` may be a ConditionStatus, its wire string, or a bool (True/False). ``now`` becomes
    ``lastTransitionTime`` for a new condition or when the status changes; otherwise the
    existing ``lastTransitionTime`` is kept (apimachinery ``meta.SetStatusCondition``). Order of
    existing conditions is kept; a new type is appended. Raises ``ValueError`` for a status
    that is not True/False/Unknown and ``pydantic.ValidationError`` for a malformed reason/type.
    """
    wanted = _as_status(status)
    out: list[Condition] = []
    found = False
    for cond in conditions or ():
        if cond.type != type:
            out.append(cond)
            continue
        found = True
        transition = cond.last_transition_time if cond.status == wanted else now
        out.append(
            Condition(
                type=type,
                status=wanted,
                reason=reason,
                message=message,
                observed_generation=observed_generation,
                last_transition_time=transition,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type,
                status=wanted,
                reason=reason,
                message=message,
                observed_generation=observed_generation,
                last_transition_time=now,
            )
        )
    return out


def get_condition(conditions: Sequence[Condition] | None, type: str) -> Condition | None:
    """The condition of ``type``, or None when absent."""
    for cond in conditions or ():
        if cond.type == type:
            return cond
    return None


def is_true(conditions: Sequence[Condition] | None, type: str) -> bool:
    """Whether condition ``type`` is present with status True."""
    cond = get_condition(conditions, type)
    return cond is not None and cond.status is ConditionStatus.TRUE


def is_false(conditions: Sequence[Condition] | None, type: str) -> bool:
    """Whether condition ``type`` is present with status False (absent is neither true nor false)."""
    cond = get_condition(conditions, type)
    return cond is not None and cond.status is ConditionStatus.FALSE


def remove_condition(conditions: Sequence[Condition] | None, type: str) -> list[Condition]:
    """A copy of ``conditions`` without condition ``type``."""
    return [c for c in conditions or () if c.type != type]
