"""Inventory walk: failure domains with capacity and verified classes; name resolution index.

One ``RetrievePropertiesEx`` reads every datacenter, cluster, host, datastore, datastore
cluster, network and resource pool (SPEC §2 Provider: "One failure domain per (datacenter,
compute cluster)"; standalone hosts are plain ComputeResources and never failure domains).

Capacity (free, per cluster): CPU MHz = sum over connected hosts not in maintenance of
(cpuMhz x numCpuCores - overallCpuUsage); memory MiB = sum of (memorySize/MiB -
overallMemoryUsage); storage GiB = sum of free space over the distinct accessible datastores
mounted on the cluster. Totals (the reservation side, docs/concepts.md "Capacity"): memory MiB =
sum of memorySize over the same hosts; per storage class, its datastore (or datastore cluster:
the sum over its accessible members mounted on the cluster) with its capacity and free space,
named ``<datacenter>/<name>`` so domains sharing it report the same storage. A datastore cluster
also reports the member new disks go to: the accessible one mounted on the cluster with the most
free space (a documented choice instead of a Storage DRS recommendation).

Features (detected, honest and small): ``bios`` always; ``efi`` when the API version is >= 5.0;
``efi-secure`` (UEFI secure boot) when >= 6.5, the vSphere release that introduced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyVmomi import vim as _vim

from banlieue.backends.base import Capabilities, Capacity, FailureDomainInfo, Inventory, StorageCapacity
from banlieue.backends.vsphere.properties import (
    ObjectProps,
    datacenter_of,
    inventory_traversal,
    moid,
    retrieve,
)

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim

MIB = 1024 * 1024
GIB = 1024 * MIB

INVENTORY_PATHS: dict[Any, list[str]] = {
    vim.Folder: ["name", "parent"],
    vim.Datacenter: ["name", "parent", "vmFolder"],
    vim.ClusterComputeResource: ["name", "parent", "host", "datastore", "resourcePool"],
    vim.HostSystem: [
        "parent",
        "summary.hardware.cpuMhz",
        "summary.hardware.numCpuCores",
        "summary.hardware.memorySize",
        "summary.quickStats.overallCpuUsage",
        "summary.quickStats.overallMemoryUsage",
        "runtime.connectionState",
        "runtime.inMaintenanceMode",
    ],
    vim.Datastore: ["name", "parent", "summary.freeSpace", "summary.capacity", "summary.accessible"],
    vim.StoragePod: ["name", "parent", "childEntity"],
    vim.Network: ["name", "parent"],
    vim.dvs.DistributedVirtualPortgroup: ["name", "parent", "key", "config.distributedVirtualSwitch"],
    vim.DistributedVirtualSwitch: ["uuid"],
    vim.ResourcePool: ["name", "parent"],
}


@dataclass(frozen=True)
class NetworkRef:
    """A network by name in a datacenter: standard (``distributed`` False) or a DVPG with the
    switch UUID and port group key a NIC backing needs."""

    obj: Any
    name: str
    distributed: bool
    switch_uuid: str | None = None
    portgroup_key: str | None = None


@dataclass
class ClusterRef:
    obj: Any
    name: str
    datacenter: str
    root_pool: Any
    hosts: list[str]
    datastores: list[str]


@dataclass
class InventoryIndex:
    """Names to objects, per datacenter, from one walk. Keys are names as vSphere stores them."""

    api_version: str
    datacenters: dict[str, Any] = field(default_factory=dict)
    vm_folders: dict[str, Any] = field(default_factory=dict)
    clusters: dict[tuple[str, str], ClusterRef] = field(default_factory=dict)
    pools: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    folders: dict[str, ObjectProps] = field(default_factory=dict)
    datastores: dict[tuple[str, str], ObjectProps] = field(default_factory=dict)
    datastore_clusters: dict[tuple[str, str], ObjectProps] = field(default_factory=dict)
    networks: dict[tuple[str, str], NetworkRef] = field(default_factory=dict)
    networks_by_key: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, ObjectProps] = field(default_factory=dict)

    def folder_path(self, datacenter: str, path: str) -> Any | None:
        """Resolve ``a/b`` below the datacenter's VM folder (None when absent)."""
        current = self.vm_folders.get(datacenter)
        for part in [p for p in path.strip("/").split("/") if p]:
            if current is None:
                return None
            parent_id = moid(current)
            current = next(
                (f.obj for f in self.folders.values() if f.get("name") == part and _id(f.get("parent")) == parent_id),
                None,
            )
        return current


def _id(obj: Any) -> str | None:
    return moid(obj) if obj is not None else None


def build_index(content: Any) -> InventoryIndex:
    """Walk the whole inventory in one PropertyCollector call and index it by name."""
    objs = retrieve(content, content.rootFolder, inventory_traversal(), INVENTORY_PATHS)
    idx = InventoryIndex(api_version=str(content.about.apiVersion))
    parents: dict[str, str] = {}
    dc_names: dict[str, str] = {}
    by_id: dict[str, ObjectProps] = {}
    for o in objs:
        by_id[o.moref] = o
        parent = o.get("parent")
        if parent is not None:
            parents[o.moref] = moid(parent)
        if o.type == "Datacenter":
            dc_names[o.moref] = o.get("name")
            idx.datacenters[o.get("name")] = o.obj
            idx.vm_folders[o.get("name")] = o.get("vmFolder")
    switch_uuid = {o.moref: o.get("uuid") for o in objs if "uuid" in o.props}
    for o in objs:
        dc = datacenter_of(o.moref, parents, dc_names)
        if o.type == "Folder":
            idx.folders[o.moref] = o
        elif dc is None:
            continue
        elif o.type == "ClusterComputeResource":
            idx.clusters[(dc, o.get("name"))] = ClusterRef(
                obj=o.obj,
                name=o.get("name"),
                datacenter=dc,
                root_pool=o.get("resourcePool"),
                hosts=[moid(h) for h in o.get("host") or []],
                datastores=[moid(d) for d in o.get("datastore") or []],
            )
        elif o.type == "HostSystem":
            idx.hosts[o.moref] = o
        elif o.type == "Datastore":
            idx.datastores[(dc, o.get("name"))] = o
        elif o.type == "StoragePod":
            idx.datastore_clusters[(dc, o.get("name"))] = o
        elif o.type == "DistributedVirtualPortgroup":
            dvs = o.get("config.distributedVirtualSwitch")
            idx.networks[(dc, o.get("name"))] = NetworkRef(
                o.obj, o.get("name"), True, switch_uuid.get(_id(dvs) or ""), o.get("key")
            )
            idx.networks_by_key[o.get("key")] = o.get("name")
        elif o.type in ("Network", "OpaqueNetwork"):
            idx.networks.setdefault((dc, o.get("name")), NetworkRef(o.obj, o.get("name"), False))
    for o in objs:
        if o.type != "ResourcePool":
            continue
        # A pool's cluster is the first ClusterComputeResource above it.
        cur: str | None = o.moref
        while cur is not None and by_id.get(cur) is not None and by_id[cur].type == "ResourcePool":
            cur = parents.get(cur)
        owner = by_id.get(cur or "")
        if owner is not None and owner.type == "ClusterComputeResource":
            dc = datacenter_of(owner.moref, parents, dc_names)
            if dc is not None:
                idx.pools[(dc, owner.get("name"), o.get("name"))] = o.obj
    return idx


def features_for(api_version: str) -> tuple[str, ...]:
    """Firmware features by vSphere API version (see module docstring)."""
    try:
        major, minor = (int(x) for x in api_version.split(".")[:2])
    except ValueError:
        return ("bios",)
    out = ["bios"]
    if (major, minor) >= (5, 0):
        out.append("efi")
    if (major, minor) >= (6, 5):
        out.append("efi-secure")
    return tuple(out)


def cluster_capacity(idx: InventoryIndex, cluster: ClusterRef) -> Capacity:
    cpu = mem = 0
    for host_id in cluster.hosts:
        h = idx.hosts.get(host_id)
        if h is None or h.get("runtime.inMaintenanceMode") or h.get("runtime.connectionState") not in (None, "connected"):
            continue
        cpu += int(h.get("summary.hardware.cpuMhz") or 0) * int(h.get("summary.hardware.numCpuCores") or 0)
        cpu -= int(h.get("summary.quickStats.overallCpuUsage") or 0)
        mem += int(h.get("summary.hardware.memorySize") or 0) // MIB
        mem -= int(h.get("summary.quickStats.overallMemoryUsage") or 0)
    free = 0
    reachable = set(cluster.datastores)
    for (dc, _), ds in idx.datastores.items():
        if dc == cluster.datacenter and ds.moref in reachable and ds.get("summary.accessible", True):
            free += int(ds.get("summary.freeSpace") or 0)
    return Capacity(cpu_mhz=max(cpu, 0), memory_mib=max(mem, 0), storage_gib=free // GIB)


def memory_total_mib(idx: InventoryIndex, cluster: ClusterRef) -> int:
    """Memory of the cluster's connected hosts not in maintenance, MiB."""
    total = 0
    for host_id in cluster.hosts:
        h = idx.hosts.get(host_id)
        if h is None or h.get("runtime.inMaintenanceMode") or h.get("runtime.connectionState") not in (None, "connected"):
            continue
        total += int(h.get("summary.hardware.memorySize") or 0) // MIB
    return total


def _datastore_sizes(stores: list[ObjectProps]) -> tuple[int, int]:
    """(total GiB, free GiB) of accessible datastores, each counted once."""
    seen: dict[str, ObjectProps] = {ds.moref: ds for ds in stores if ds.get("summary.accessible", True)}
    total = sum(int(ds.get("summary.capacity") or 0) for ds in seen.values())
    free = sum(int(ds.get("summary.freeSpace") or 0) for ds in seen.values())
    return total // GIB, free // GIB


def failure_domains(idx: InventoryIndex, capabilities: Capabilities) -> Inventory:
    """Failure domains sorted by (datacenter, cluster), classes verified per SPEC §2:
    datastore or datastore cluster reachable from the cluster; port group in the datacenter."""
    features = features_for(idx.api_version)
    out: list[FailureDomainInfo] = []
    for (dc, name), cluster in sorted(idx.clusters.items()):
        reachable = set(cluster.datastores)
        storage: list[str] = []
        sizes: list[StorageCapacity] = []
        for sc in capabilities.storage_classes:
            if sc.datastore is not None:
                ds = idx.datastores.get((dc, sc.datastore))
                if ds is not None and ds.moref in reachable:
                    storage.append(sc.name)
                    sizes.append(StorageCapacity(sc.name, f"{dc}/{sc.datastore}", *_datastore_sizes([ds])))
            elif sc.datastore_cluster is not None:
                pod = idx.datastore_clusters.get((dc, sc.datastore_cluster))
                members = {moid(c) for c in (pod.get("childEntity") or [])} if pod is not None else set()
                stores = [ds for (d, _), ds in idx.datastores.items()
                          if d == dc and ds.moref in members & reachable and ds.get("summary.accessible", True)]
                if stores:
                    # Member choice (no Storage DRS call): the accessible member mounted on this
                    # cluster with the most free space, then by name; re-chosen at each walk.
                    best = max(stores, key=lambda ds: (int(ds.get("summary.freeSpace") or 0), ds.get("name")))
                    storage.append(sc.name)
                    sizes.append(StorageCapacity(sc.name, f"{dc}/{sc.datastore_cluster}", *_datastore_sizes(stores),
                                                 member=str(best.get("name"))))
        networks: list[str] = []
        for nc in capabilities.network_classes:
            if nc.port_group is not None:
                ref = idx.networks.get((dc, nc.port_group))
                if ref is not None and not ref.distributed:
                    networks.append(nc.name)
            elif nc.distributed_port_group is not None:
                ref = idx.networks.get((dc, nc.distributed_port_group))
                if ref is not None and ref.distributed:
                    networks.append(nc.name)
        out.append(
            FailureDomainInfo(
                datacenter=dc,
                cluster=name,
                capacity=cluster_capacity(idx, cluster),
                available_storage_classes=tuple(storage),
                available_network_classes=tuple(networks),
                features=features,
                memory_total_mib=memory_total_mib(idx, cluster),
                storage=tuple(sizes),
            )
        )
    return Inventory(failure_domains=tuple(out), api_version=idx.api_version)
