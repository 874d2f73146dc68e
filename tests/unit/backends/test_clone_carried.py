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


# A clone that also adds a disk on the template's SCSI controller (key 1000, bus 0, unit 1) and one
# on a controller it adds (temporary key -1, bus 1, unit 0), grows the template's disk (key 2000)
# and removes a template card (key 4001): the devices are matched by slot (controller bus + unit)
# and by device key, which a clone keeps from its template, never by position.
SCSI0 = 1000
GIB_KB = 1024 * 1024


def disk(key: int, ctrl: int, unit: int, gib: int) -> Any:
    return vim.vm.device.VirtualDisk(key=key, controllerKey=ctrl, unitNumber=unit, capacityInKB=gib * GIB_KB)


def scsi(key: int, bus: int) -> Any:
    return vim.vm.device.ParaVirtualSCSIController(key=key, busNumber=bus)


def device_config() -> Any:
    change = vim.vm.device.VirtualDeviceSpec
    cfg = config()
    cfg.deviceChange = [
        *cfg.deviceChange,
        change(operation="add", fileOperation="create", device=disk(-100, SCSI0, 1, 5)),
        change(operation="add", device=scsi(-1, 1)),
        change(operation="add", fileOperation="create", device=disk(-101, -1, 0, 7)),
        change(operation="edit", device=disk(2000, SCSI0, 0, 20)),
        change(operation="remove", device=vim.vm.device.VirtualE1000(key=4001, macAddress="00:50:56:80:00:02")),
    ]
    return cfg


def device_read(added: bool = True, on_new_controller: bool = True, os_gib: int = 20,
                removed_gone: bool = True) -> dict[str, Any]:
    props = read()
    # The new controller gets a key vCenter chooses; its bus is what the spec fixed.
    devices = [scsi(SCSI0, 0), scsi(1001, 1), vim.vm.device.VirtualVmxnet3(key=4000, macAddress=MAC),
               disk(2000, SCSI0, 0, os_gib)]
    if added:
        devices.append(disk(2001, SCSI0, 1, 5))
    if on_new_controller:
        devices.append(disk(2016, 1001, 0, 7))
    if not removed_gone:
        devices.append(vim.vm.device.VirtualE1000(key=4001, macAddress="00:50:56:80:00:02"))
    props["config.hardware.device"] = devices
    return props


def test_a_read_showing_every_disk_added_grown_and_device_removed_is_taken() -> None:
    assert carried(device_config(), device_read())


def test_a_read_missing_a_device_change_of_the_clone_is_refused() -> None:
    assert not carried(device_config(), device_read(added=False))  # the added disk not there yet
    assert not carried(device_config(), device_read(on_new_controller=False))  # nor the one on the new controller
    assert not carried(device_config(), device_read(os_gib=10))  # the template's disk still at its size
    assert not carried(device_config(), device_read(removed_gone=False))  # the removed card still there


def test_an_added_disk_is_matched_by_its_slot_not_its_place_in_the_list() -> None:
    props = device_read(added=False)
    # A disk at another unit of the same controller is not the added one.
    props["config.hardware.device"].append(disk(2001, SCSI0, 2, 5))
    assert not carried(device_config(), props)
    props["config.hardware.device"].reverse()
    props["config.hardware.device"].append(disk(2002, SCSI0, 1, 5))
    assert carried(device_config(), props)
