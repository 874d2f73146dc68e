"""Inventory walk against vcsim: failure domains, capacity, verified classes, templates."""

from __future__ import annotations

import pytest

from banlieue.backends.base import Capabilities, Connection, NetworkClass, StorageClass
from banlieue.backends.vsphere.backend import VSphereBackend

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]

CAPS = Capabilities(
    storage_classes=(
        StorageClass("local", datastore="LocalDS_0"),
        StorageClass("missing-ds", datastore="no-such-ds"),
        StorageClass("missing-pod", datastore_cluster="no-such-pod"),
    ),
    network_classes=(
        NetworkClass("vm-net", port_group="VM Network"),
        NetworkClass("dvpg", distributed_port_group="DC0_DVPG0"),
        NetworkClass("wrong-kind", port_group="DC0_DVPG0"),
    ),
)


async def test_two_datacenters_three_clusters_give_six_failure_domains(backend: VSphereBackend, conn: Connection) -> None:
    inv = await backend.inventory(conn, CAPS)
    assert [(fd.datacenter, fd.cluster) for fd in inv.failure_domains] == [
        (f"DC{d}", f"DC{d}_C{c}") for d in range(2) for c in range(3)
    ]
    for fd in inv.failure_domains:
        assert fd.capacity.cpu_mhz > 0
        assert fd.capacity.memory_mib > 0
        assert fd.capacity.storage_gib > 0
        assert "local" in fd.available_storage_classes
        assert "missing-ds" not in fd.available_storage_classes
        assert "missing-pod" not in fd.available_storage_classes
        assert "vm-net" in fd.available_network_classes
        assert "wrong-kind" not in fd.available_network_classes
        assert "efi-secure" in fd.features  # vcsim reports API 6.5
        # DC0_DVPG0 exists only in DC0.
        assert ("dvpg" in fd.available_network_classes) == (fd.datacenter == "DC0")


async def test_inventory_is_a_few_soap_requests(backend: VSphereBackend, conn: Connection) -> None:
    await backend.check_connection(conn)
    before = backend.soap_requests(conn)
    await backend.inventory(conn, CAPS)
    assert backend.soap_requests(conn) - before == 1


async def test_find_template_by_name_and_datacenter(backend: VSphereBackend, conn: Connection) -> None:
    t = await backend.find_template(conn, "DC1", "ubuntu-22.04")
    assert t is not None
    assert t.datacenter == "DC1"
    assert t.disk_gib == 1
    assert t.has_snapshot is False
    assert await backend.find_template(conn, "DC0", "no-such-template") is None
