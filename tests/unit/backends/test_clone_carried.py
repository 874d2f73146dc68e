"""``clone.carried``: the read beside a clone task's last poll stands for the read after the clone
only when it shows everything the CloneSpec's config set (issue 22, ADR 0014); a read that may
predate the clone's end (the property collector orders nothing across objects) is refused."""

from __future__ import annotations

from typing import Any

from pyVmomi import vim

from banlieue.backends.vsphere.clone import carried

MAC = "00:50:56:12:34:56"


def config() -> Any:
    nic = vim.vm.device.VirtualVmxnet3(key=-101, macAddress=MAC, addressType="manual")
    return vim.vm.ConfigSpec(
        numCPUs=2, memoryMB=2048,
        deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", device=nic)],
        extraConfig=[vim.option.OptionValue(key="banlieue.uid", value="u-1"),
                     vim.option.OptionValue(key="banlieue.nic.a", value=MAC)],
    )


def read(mac: str = MAC.upper(), uid: str = "u-1", cpus: int = 2, extra: bool = True) -> dict[str, Any]:
    pairs = [("banlieue.uid", uid), ("guestinfo.other", "x")] + ([("banlieue.nic.a", MAC)] if extra else [])
    return {
        "config.hardware.numCPU": cpus,
        "config.hardware.memoryMB": 2048,
        "config.hardware.device": [vim.vm.device.VirtualVmxnet3(key=4000, macAddress=mac),
                                   vim.vm.device.VirtualDisk(key=2000)],
        "config.extraConfig": [vim.option.OptionValue(key=k, value=v) for k, v in pairs],
    }


def test_a_read_showing_every_entry_card_and_size_the_clone_set_is_taken() -> None:
    assert carried(config(), read())  # MACs compared without case; entries the clone did not set ignored


def test_a_read_missing_part_of_the_clone_is_refused() -> None:
    assert not carried(config(), read(extra=False))  # a label not there yet
    assert not carried(config(), read(uid="u-2"))  # another UID: another VM, or a read before the config
    assert not carried(config(), read(mac="00:50:56:80:00:01"))  # the card not (yet) with the chosen MAC
    assert not carried(config(), read(cpus=1))  # the template's CPU count
    assert not carried(config(), {})  # nothing configured yet
