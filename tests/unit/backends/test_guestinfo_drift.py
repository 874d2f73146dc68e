"""``guestinfo.metadata_drifted``: a day-2 network edit of a running VM is seen (it never reached
the VM: found by a new-user pass), and a VM converged to its spec never compares unequal (a
converge that never settles would reconfigure the VM at every reconcile)."""

from __future__ import annotations

from dataclasses import replace

from banlieue.backends.base import NicSpec, NicStatus, VMInfo, VMSpec
from banlieue.backends.vsphere import guestinfo

MAC0, MAC1 = "00:50:56:aa:00:01", "00:50:56:aa:00:02"
ETH0 = NicSpec("eth0", "VM Network", dhcp4=False, addresses=("192.0.2.10/24",), gateway4="192.0.2.1",
               nameservers=("192.0.2.53",))
ETH1 = NicSpec("eth1", "VM Network")
SPEC = VMSpec(uid="u-1", name="vm-1", datacenter="DC0", cluster="DC0_C0", template="t", num_cpus=1,
              memory_mib=512, nics=(ETH0, ETH1))


def converged(spec: VMSpec, *, names: tuple[str | None, ...] = ("eth0", "eth1")) -> VMInfo:
    """A VM whose guestinfo is what a converge to ``spec`` writes."""
    extra = guestinfo.guestinfo(spec.uid, spec.hostname or spec.name, list(zip(spec.nics, (MAC0, MAC1), strict=False)), None)
    nics = tuple(NicStatus(mac_address=mac, network="VM Network", ip_addresses=(), name=name)
                 for mac, name in zip((MAC0, MAC1), names, strict=True))
    return VMInfo(uid=spec.uid, moref="vm-1", name=spec.name, power_state="PoweredOn", bios_uuid="b",
                  instance_uuid="i", num_cpus=1, num_cores_per_socket=1, memory_mib=512, disks_gib=(10,), nics=nics,
                  ip_address=None, extra_config=extra)


def test_a_converged_vm_has_not_drifted() -> None:
    assert not guestinfo.metadata_drifted(converged(SPEC), SPEC)


def test_a_changed_name_server_gateway_or_address_has_drifted() -> None:
    vm = converged(SPEC)
    for change in ({"nameservers": ("198.51.100.53",)}, {"gateway4": "192.0.2.254"}, {"addresses": ("192.0.2.11/24",)}):
        spec = replace(SPEC, nics=(replace(ETH0, **change), ETH1))  # type: ignore[arg-type]
        assert guestinfo.metadata_drifted(vm, spec), change


def test_a_vm_converged_after_a_reorder_settles() -> None:
    # Whatever the metadata says of a reordered spec, once written it compares equal: no loop.
    spec = replace(SPEC, nics=(ETH1, ETH0))
    vm = converged(spec, names=("eth1", "eth0"))
    assert not guestinfo.metadata_drifted(vm, spec)


def test_not_read_or_unnamed_cards_are_left_to_the_other_converges() -> None:
    vm = converged(SPEC)
    assert not guestinfo.metadata_drifted(replace(vm, extra_config={}), replace(SPEC, nics=(replace(ETH0, gateway4=None), ETH1)))
    assert not guestinfo.metadata_drifted(converged(SPEC, names=(None, None)), replace(SPEC, nics=(replace(ETH0, mtu=9000), ETH1)))
