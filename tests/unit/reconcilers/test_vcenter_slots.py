"""Per-vCenter worker cap (banlieue.reconcilers.vcenter_slots): take/release/cap, never waits."""

from __future__ import annotations

import pytest

from banlieue.reconcilers.vcenter_slots import VCenterSlots, cap_for_workers


@pytest.mark.parametrize(("workers", "cap"), [(1, 1), (2, 1), (3, 1), (4, 2), (10, 5), (11, 5)])
def test_cap_is_half_the_workers_and_at_least_one(workers: int, cap: int) -> None:
    assert cap_for_workers(workers) == cap


def test_take_up_to_the_cap_then_refuse_without_waiting() -> None:
    s = VCenterSlots(2)
    assert s.try_acquire("vc-a") and s.try_acquire("vc-a")
    assert not s.try_acquire("vc-a"), "third slot on a full vCenter"
    assert s.held("vc-a") == 2, "a refused take holds nothing"


def test_a_full_vcenter_does_not_block_another() -> None:
    s = VCenterSlots(1)
    assert s.try_acquire("vc-a")
    assert not s.try_acquire("vc-a")
    assert s.try_acquire("vc-b")
    assert (s.held("vc-a"), s.held("vc-b")) == (1, 1)


def test_release_frees_a_slot_for_the_same_vcenter() -> None:
    s = VCenterSlots(1)
    assert s.try_acquire("vc-a")
    s.release("vc-a")
    assert s.held("vc-a") == 0
    assert s.try_acquire("vc-a")


def test_release_without_take_and_bad_cap_raise() -> None:
    s = VCenterSlots(1)
    with pytest.raises(RuntimeError):
        s.release("vc-a")
    with pytest.raises(ValueError):
        VCenterSlots(0)
