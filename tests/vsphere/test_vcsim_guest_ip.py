"""The vcsim harness's ``guest_ip`` option (``hack/vcsim/guestnet.go``): DHCP and VMware Tools.

Through real SOAP (pyVmomi): a guest that powers on reports the static address of its
guestinfo metadata on the NIC with that MAC, else an address leased from the range; a guest
powered on again keeps its lease; without the option a guest reports nothing.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

from banlieue.testing.vcsim import GUEST_IP_RANGES, VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]
RANGE = GUEST_IP_RANGES[0]


@pytest.fixture
def connect() -> Iterator[Callable[[VcsimProcess], Any]]:
    sessions: list[Any] = []

    def open_(vc: VcsimProcess) -> Any:
        si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                          sslContext=ssl.create_default_context(cafile=vc.ca_file))
        sessions.append(si)
        return si

    yield open_
    for si in sessions:
        Disconnect(si)


def wait(task: Any) -> Any:
    deadline = time.monotonic() + 20
    while task.info.state in ("queued", "running"):
        assert time.monotonic() < deadline, "task did not finish"
        time.sleep(0.05)
    assert task.info.state == "success", task.info.error
    return task.info.result


def clone(si: Any, name: str) -> Any:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        template = next(vm for vm in view.view if vm.config.template)
    finally:
        view.Destroy()
    pool = template.parent.parent.hostFolder.childEntity[0].resourcePool
    return wait(template.CloneVM_Task(folder=template.parent, name=name,
                                      spec=vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=False)))


def macs(vm: Any) -> list[str]:
    return [d.macAddress for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]


def set_static(vm: Any, mac: str, address: str) -> None:
    """guestinfo.metadata as banlieue writes it (banlieue.backends.vsphere.guestinfo)."""
    md = {"instance-id": "x", "network": {"version": 2, "ethernets": {
        "id0": {"match": {"macaddress": mac.lower()}, "dhcp4": False, "addresses": [address]}}}}
    wait(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[
        vim.option.OptionValue(key="guestinfo.metadata", value=base64.b64encode(json.dumps(md).encode()).decode()),
        vim.option.OptionValue(key="guestinfo.metadata.encoding", value="base64")])))


def reported(vm: Any, timeout: float = 5.0) -> tuple[str | None, dict[str, list[str]]]:
    """(guest.ipAddress, MAC -> guest.net addresses) once an address is reported (or timeout)."""
    deadline = time.monotonic() + timeout
    while not vm.guest.ipAddress and time.monotonic() < deadline:
        time.sleep(0.05)
    return vm.guest.ipAddress, {n.macAddress: list(n.ipAddress or []) for n in vm.guest.net or []}


def test_static_address_else_a_lease_from_the_range(vcsim_factory: Callable[..., VcsimProcess], connect: Any) -> None:
    vc = vcsim_factory(dc=1, cluster=1, guest_ip=RANGE)
    assert vc.guest_ip == RANGE
    si = connect(vc)
    static, dhcp, dhcp2 = clone(si, "static"), clone(si, "dhcp"), clone(si, "dhcp2")
    [mac] = macs(static)
    set_static(static, mac, "192.0.2.200/24")
    for vm in (static, dhcp, dhcp2):
        assert vm.guest.ipAddress is None
        wait(vm.PowerOnVM_Task())

    assert reported(static) == ("192.0.2.200", {mac: ["192.0.2.200"]})
    ip, net = reported(dhcp)
    ip2, _ = reported(dhcp2)
    network = ipaddress.ip_network(RANGE)
    assert ip is not None and ip2 is not None and ip != ip2
    assert {ipaddress.ip_address(ip), ipaddress.ip_address(ip2)} <= set(network.hosts()) - {network.network_address + 1}
    assert net == {macs(dhcp)[0]: [ip]}

    # Powered off and on again: the same address (a DHCP lease), reported again after a reset.
    wait(dhcp.PowerOffVM_Task())
    wait(dhcp.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[
        vim.option.OptionValue(key="SET.guest.ipAddress", value="")])))
    wait(dhcp.PowerOnVM_Task())
    assert reported(dhcp)[0] == ip


def test_without_the_option_guests_report_no_address(vcsim_factory: Callable[..., VcsimProcess], connect: Any) -> None:
    vc = vcsim_factory(dc=1, cluster=1)
    assert vc.guest_ip == ""
    vm = clone(connect(vc), "plain")
    wait(vm.PowerOnVM_Task())
    assert reported(vm, timeout=1.0)[0] is None
