"""InfraMachineRead: the VSphereMachine contract fields the VirtualMachine mirrors."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.api.meta import ConditionStatus, MachineAddressType
from banlieue.api.virtualmachine import PowerState
from banlieue.reconcilers.virtualmachine.status_mirror import InfraMachineRead

BASE: dict[str, Any] = {
    "apiVersion": "infrastructure.banlieue.io/v1alpha1",
    "kind": "VSphereMachine",
    "metadata": {"name": "vm-1", "namespace": "default"},
    "spec": {"providerRef": {"name": "a"}, "failureDomain": "a-dc0-c0"},
}


def test_fresh_machine_reads_as_not_provisioned() -> None:
    read = InfraMachineRead.from_wire(BASE)
    assert read is not None
    assert (read.name, read.provisioned, read.addresses, read.ready, read.power_state) == ("vm-1", False, (), None, None)
    assert read.failure_domain == "a-dc0-c0"
    assert read.provider_name == "a"
    assert not read.deleting


def test_provisioned_machine_reads_every_contract_field() -> None:
    raw = {
        **BASE,
        "metadata": {**BASE["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {**BASE["spec"], "providerID": "vsphere://4210-abc"},
        "status": {
            "initialization": {"provisioned": True},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            "failureDomain": "a-dc0-c1",
            "powerState": "PoweredOff",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }
    read = InfraMachineRead.from_wire(raw)
    assert read is not None
    assert read.provisioned
    assert [(a.type, a.address) for a in read.addresses] == [(MachineAddressType.INTERNAL_IP, "10.0.0.5")]
    assert read.failure_domain == "a-dc0-c1"  # status wins over spec
    assert read.provider_id == "vsphere://4210-abc"
    assert read.ready is not None and read.ready.status is ConditionStatus.TRUE and read.ready.reason == "Provisioned"
    assert read.power_state is PowerState.POWERED_OFF
    assert read.deleting


@pytest.mark.parametrize("bad", [{"spec": {"numCPUs": 0}}, {"status": {"powerState": "Exploded"}}], ids=["bad-spec", "bad-status"])
def test_malformed_machine_reads_as_none(bad: dict[str, Any]) -> None:
    assert InfraMachineRead.from_wire({**BASE, **bad}) is None
