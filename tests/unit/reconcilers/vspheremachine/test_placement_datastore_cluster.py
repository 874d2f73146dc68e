"""A storage class mapped to a datastore cluster (issue 21, item 1): the disk goes to the member
the Provider chose in the machine's failure domain (``capacity.storageClasses[].member``); with
no member there, a clear InvalidSpec instead of a class advertised and then refused."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.provider import Provider
from banlieue.reconcilers.vspheremachine.placement import Placement, PlacementError, build_vm_spec


def provider(member: str | None) -> Provider:
    entry: dict[str, Any] = {"name": "pod", "datastore": "DC0/gold", "totalGiB": 500, "freeGiB": 400}
    if member is not None:
        entry["member"] = member
    return Provider.from_wire({
        "metadata": {"name": "vc1", "namespace": "ns"},
        "spec": {"providerClassRef": {"name": "vsphere"},
                 "connection": {"endpoint": "vc", "credentialsRef": {"name": "creds"}},
                 "capabilities": {"storageClasses": [{"name": "pod", "target": {"datastoreCluster": "gold"}}]}},
        "status": {"failureDomains": [{"name": "vc1-dc0-c0", "attributes": {
            "availableStorageClasses": ["pod"] if member else [],
            "raw": {"datacenter": "DC0", "cluster": "DC0_C0"},
            "capacity": {"storageClasses": [entry]}}}]},
    })


MACHINE = VSphereMachine.from_wire({"metadata": {"name": "m1", "namespace": "ns", "uid": "u1"}, "spec": {
    "template": "ubuntu", "numCPUs": 1, "memoryMiB": 512,
    "disks": [{"name": "data", "sizeGiB": 10, "storageClass": "pod"}]}})


def test_disk_goes_to_the_member_the_provider_chose() -> None:
    p = provider("fast-ds")
    spec = build_vm_spec(MACHINE, Placement(p, "vc1-dc0-c0", "DC0", "DC0_C0"), None)
    assert [(d.name, d.datastore) for d in spec.disks] == [("data", "fast-ds")]


def test_no_member_in_the_domain_is_a_clear_invalid_spec() -> None:
    with pytest.raises(PlacementError) as err:
        build_vm_spec(MACHINE, Placement(provider(None), "vc1-dc0-c0", "DC0", "DC0_C0"), None)
    assert err.value.reason == "InvalidSpec"
    assert "datastore cluster 'gold'" in err.value.message and "DC0_C0" in err.value.message
