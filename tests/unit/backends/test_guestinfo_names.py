"""Guest interface names come from the spec NIC's name, never its position (issue 19):
``guestinfo.interface_name`` and the network config v2 the metadata carries."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from banlieue.backends.base import NicSpec, VMSpec
from banlieue.backends.vsphere import guestinfo

VALID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,14}$")


def test_a_valid_name_is_used_as_is() -> None:
    assert [guestinfo.interface_name(n) for n in ("eth0", "backend", "ens_192", "a-b")] == ["eth0", "backend", "ens_192", "a-b"]


def test_an_invalid_name_is_shortened_with_a_hash_of_the_whole_name() -> None:
    long = guestinfo.interface_name("storage-network-primary")
    assert VALID.match(long) and len(long) == 15 and long.startswith("storage-")
    assert guestinfo.interface_name("storage-network-secondary") != long  # same prefix, other hash
    assert VALID.match(guestinfo.interface_name("0"))  # all-digit: refused by udev
    assert VALID.match(guestinfo.interface_name("a b/c:d"))
    assert VALID.match(guestinfo.interface_name("ünïcode"))


@given(st.text(min_size=1, max_size=40))
def test_every_name_gives_a_valid_linux_interface_name(name: str) -> None:
    assert VALID.match(guestinfo.interface_name(name))


def test_removing_a_nic_renames_no_other() -> None:
    macs = {"a": "00:50:56:00:00:0a", "b": "00:50:56:00:00:0b", "c": "00:50:56:00:00:0c"}
    nics = {n: NicSpec(n, "VM Network", addresses=(f"10.0.0.{i}/24",)) for i, n in enumerate(macs)}
    three = guestinfo.network_config([(nics[n], macs[n]) for n in "abc"])["ethernets"]
    two = guestinfo.network_config([(nics[n], macs[n]) for n in "ca"])["ethernets"]
    assert two == {n: three[n] for n in "ac"}
    assert two["c"]["set-name"] == "c" and two["c"]["match"] == {"macaddress": macs["c"]}


def test_two_nics_with_one_guest_name_are_refused_before_any_vcenter_call() -> None:
    taken = guestinfo.interface_name("x" * 20)
    spec = VMSpec(uid="u", name="vm", datacenter="DC0", cluster="C", template="t", num_cpus=1, memory_mib=256,
                  nics=(NicSpec("x" * 20, "VM Network"), NicSpec(taken, "VM Network")))
    error = guestinfo.spec_error(spec)
    assert error is not None and taken in error and "rename one of them" in error
