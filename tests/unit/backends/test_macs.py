"""The MAC allocator (``macs``) and the MACs in use a ``VMIndex`` learns (ADR 0014)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.backends.base import NicStatus, VMInfo
from banlieue.backends.vsphere import macs
from banlieue.backends.vsphere.find import VMIndex
from banlieue.backends.vsphere.updateset import Option


def test_the_range_is_vmwares_manual_range() -> None:
    assert macs.format_mac(0) == "00:50:56:00:00:00"
    assert macs.format_mac(macs.MANUAL_MAX) == "00:50:56:3f:ff:ff"
    with pytest.raises(ValueError):
        macs.format_mac(macs.MANUAL_MAX + 1)
    assert macs.in_manual_range("00:50:56:3F:FF:FF")
    assert not macs.in_manual_range("00:50:56:40:00:00")  # vCenter's generated range starts at :80
    assert not macs.in_manual_range("00:50:56:80:12:34")
    assert not macs.in_manual_range("00:0c:29:00:00:01")


@given(st.lists(st.integers(0, macs.MANUAL_MAX), max_size=50), st.integers(1, 8))
def test_chosen_macs_are_in_range_distinct_and_free(used: list[int], count: int) -> None:
    taken = {macs.format_mac(v) for v in used}
    chosen = macs.choose(taken, count)
    assert len(set(chosen)) == count
    assert all(macs.in_manual_range(m) for m in chosen)
    assert not taken & set(chosen)


def test_a_known_mac_drawn_is_drawn_again() -> None:
    draws = iter([5, 6, 6, 7])
    assert macs.choose({"00:50:56:00:00:05"}, 2, lambda a, b: next(draws)) == ["00:50:56:00:00:06", "00:50:56:00:00:07"]


def test_a_full_range_raises() -> None:
    with pytest.raises(RuntimeError):
        macs.choose({"00:50:56:00:00:01"}, 1, lambda a, b: 1)


def test_the_index_knows_labels_guest_macs_reads_and_reservations() -> None:
    index = VMIndex()
    index.observe("vm-1", {"config.extraConfig": [Option("banlieue.uid", "u1"), Option("banlieue.nic.a", "00:50:56:00:00:01")]})
    index.observe("vm-2", {"guest.net": (("00:50:56:00:00:02", ("10.0.0.2",)),)})
    info = VMInfo(uid="u3", moref="vm-3", name="x", power_state="PoweredOff", bios_uuid="b", instance_uuid="i",
                  num_cpus=1, num_cores_per_socket=1, memory_mib=1, disks_gib=(),
                  nics=(NicStatus("00:50:56:00:00:03", "VM Network", ()),), ip_address=None)
    index.remember(info, "", 0)
    assert index.macs_in_use() == {f"00:50:56:00:00:0{i}" for i in (1, 2, 3)}
    # Every draw but the last hits a known MAC: the reservation gets the free one.
    draws = iter([1, 2, 3, 4])
    assert index.reserve_macs("u4", 1, lambda a, b: next(draws)) == ["00:50:56:00:00:04"]
    assert "00:50:56:00:00:04" in index.macs_in_use()  # in flight: never chosen for another clone
    index.release_macs("u4")
    index.observe("vm-1", {}, removed=True)
    assert index.macs_in_use() == {"00:50:56:00:00:02", "00:50:56:00:00:03"}


def test_conflict_messages() -> None:
    assert macs.is_conflict("The MAC address 00:50:56:00:00:01 conflicts with another")
    assert macs.is_conflict("MAC address is already in use")
    assert not macs.is_conflict("Insufficient disk space")
