"""A VirtualMachine's per-interface network settings reach the cloud-init metadata the vSphere
backend writes to guestinfo: VirtualMachine -> VSphereMachine (``desired_machine``) ->
backend VMSpec (``build_vm_spec``) -> ``guestinfo.metadata`` network config v2."""

from __future__ import annotations

from reconciler_objects import fd, provider, vm_class

from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.virtualmachine import VirtualMachine
from banlieue.backends.vsphere import guestinfo
from banlieue.reconcilers.virtualmachine.machine_decide import desired_machine
from banlieue.reconcilers.virtualmachine.scheduler import Placement as VMPlacement
from banlieue.reconcilers.vspheremachine.placement import Placement, build_vm_spec

MACS = ("00:50:56:aa:00:01", "00:50:56:aa:00:02")


def test_overrides_reach_the_guestinfo_network_config() -> None:
    wire = vm_class().to_wire()
    wire["spec"]["network"] = {"interfaces": [
        {"name": "eth0", "networkClass": "default"},
        {"name": "backend", "networkClass": "default",
         "ipam": {"source": "static", "static": {"addresses": ["10.9.0.5/24"], "gateway4": "10.9.0.1"}}},
    ]}
    cls = type(vm_class()).from_wire(wire)
    vm = VirtualMachine.from_wire({
        "metadata": {"name": "web-1", "namespace": "ns", "uid": "uid-web-1"},
        "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"}, "network": {"interfaces": [
            # Listed in another order than the class: matched by name.
            {"name": "backend", "addresses": ["10.9.0.77/24", "fd00:9::77/64"], "gateway6": "fd00:9::1",
             "nameservers": ["10.9.0.53"]},
            {"name": "eth0", "addresses": ["192.0.2.10/24"], "gateway4": "192.0.2.1"},
        ]}},
    })
    body = desired_machine(vm, cls, VMPlacement("a", "vsphere", "a-dc0-c0", "ubuntu-tpl"))
    body["metadata"]["uid"] = "uid-machine"
    machine = VSphereMachine.from_wire(body)
    prov = provider("a", [fd("a-dc0-c0")])
    spec = build_vm_spec(machine, Placement(prov, "a-dc0-c0", "DC0", "DC0_C0"), None)
    extra = guestinfo.guestinfo(spec.uid, spec.hostname or spec.name, list(zip(spec.nics, MACS, strict=True)), None)
    md, _ = guestinfo.decode(extra)
    assert md is not None
    assert md["network"]["ethernets"] == {
        "eth0": {"match": {"macaddress": MACS[0]}, "set-name": "eth0", "dhcp4": False, "dhcp6": False,
                "addresses": ["192.0.2.10/24"], "routes": [{"to": "0.0.0.0/0", "via": "192.0.2.1"}]},
        "backend": {"match": {"macaddress": MACS[1]}, "set-name": "backend", "dhcp4": False, "dhcp6": False,
                "addresses": ["10.9.0.77/24", "fd00:9::77/64"],
                "routes": [{"to": "0.0.0.0/0", "via": "10.9.0.1"}, {"to": "::/0", "via": "fd00:9::1"}],
                "nameservers": {"addresses": ["10.9.0.53"]}},
    }
