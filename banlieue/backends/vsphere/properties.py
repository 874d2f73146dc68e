"""PropertyCollector helpers: one ``RetrievePropertiesEx`` (plus continuations) per inventory read.

The whole-inventory traversal (rootFolder -> datacenters -> host/vm/datastore/network folders ->
compute resources -> hosts and resource pools) is the classic one from the vSphere SDK samples;
it needs no ContainerView, so no session-bound object must be created or destroyed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl

PC = vmodl.query.PropertyCollector


@dataclass(frozen=True)
class ObjectProps:
    """One managed object's reference and the properties that were set (unset ones are absent)."""

    obj: Any
    props: dict[str, Any]

    @property
    def moref(self) -> str:
        return str(self.obj._moId)

    @property
    def type(self) -> str:
        return str(self.obj._wsdlName)

    def get(self, path: str, default: Any = None) -> Any:
        return self.props.get(path, default)


def moid(obj: Any) -> str:
    """The managed object id (``vm-42``) of a pyvmomi managed object reference."""
    return str(obj._moId)


def _ts(name: str, type_: Any, path: str, *select: str) -> Any:
    return PC.TraversalSpec(
        name=name, type=type_, path=path, skip=False, selectSet=[PC.SelectionSpec(name=s) for s in select]
    )


def inventory_traversal() -> list[Any]:
    """Traversal specs reaching every inventory object from the root folder."""
    return [
        _ts("folderChildren", vim.Folder, "childEntity", "folderChildren", "dcHost", "dcVm", "dcDs", "dcNet", "crHost", "crRp"),
        _ts("dcHost", vim.Datacenter, "hostFolder", "folderChildren"),
        _ts("dcVm", vim.Datacenter, "vmFolder", "folderChildren"),
        _ts("dcDs", vim.Datacenter, "datastoreFolder", "folderChildren"),
        _ts("dcNet", vim.Datacenter, "networkFolder", "folderChildren"),
        _ts("crHost", vim.ComputeResource, "host"),
        _ts("crRp", vim.ComputeResource, "resourcePool", "rpRp"),
        _ts("rpRp", vim.ResourcePool, "resourcePool", "rpRp"),
    ]


def vm_traversal() -> list[Any]:
    """Traversal specs reaching every VM (and the folders and datacenters above them)."""
    return [
        _ts("folderChildren", vim.Folder, "childEntity", "folderChildren", "dcVm"),
        _ts("dcVm", vim.Datacenter, "vmFolder", "folderChildren"),
    ]


def _property_specs(paths: Mapping[Any, Iterable[str]]) -> list[Any]:
    return [PC.PropertySpec(type=t, pathSet=list(p), all=False) for t, p in paths.items()]


def retrieve(content: Any, root: Any, traversal: list[Any], paths: Mapping[Any, Iterable[str]]) -> list[ObjectProps]:
    """Retrieve ``paths`` (type -> property paths) of every object reachable from ``root``.

    One RetrievePropertiesEx plus one ContinueRetrievePropertiesEx per extra page.
    """
    spec = PC.FilterSpec(
        objectSet=[PC.ObjectSpec(obj=root, skip=False, selectSet=traversal)],
        propSet=_property_specs(paths),
        reportMissingObjectsInResults=False,
    )
    return _collect(content.propertyCollector, [spec])


def retrieve_objects(content: Any, objs: Iterable[Any], type_: Any, paths: Iterable[str]) -> list[ObjectProps]:
    """Retrieve ``paths`` of the given objects (all of one type) in one call.

    Raises vmodl.fault.ManagedObjectNotFound when an object no longer exists.
    """
    spec = PC.FilterSpec(
        objectSet=[PC.ObjectSpec(obj=o, skip=False) for o in objs],
        propSet=[PC.PropertySpec(type=type_, pathSet=list(paths), all=False)],
    )
    return _collect(content.propertyCollector, [spec])


def retrieve_present(content: Any, objs: Iterable[Any], type_: Any, paths: Iterable[str]) -> list[ObjectProps]:
    """``retrieve_objects`` of the objects that still exist, one gone meanwhile left out instead
    of failing the call: ``reportMissingObjectsInResults`` (vcsim leaves it out, vCenter returns it
    with a ManagedObjectNotFound in ``missingSet``). Raises vim.fault.NotAuthenticated (vcsim's
    per-property expired session) so that ``Session.call`` logs in again."""
    spec = PC.FilterSpec(
        objectSet=[PC.ObjectSpec(obj=o, skip=False) for o in objs],
        propSet=[PC.PropertySpec(type=type_, pathSet=list(paths), all=False)],
        reportMissingObjectsInResults=True,
    )
    return _collect(content.propertyCollector, [spec], drop_missing=True)


def retrieve_with(content: Any, reads: Iterable[tuple[Any, Any, Iterable[str]]]) -> list[ObjectProps]:
    """Several objects of different types in one RetrievePropertiesEx: ``reads`` is (object,
    type, paths) per object, one type at most once. An object gone meanwhile is left out
    (``reportMissingObjectsInResults``, as ``retrieve_present``). The property collector reads
    each object at its own moment: nothing orders one object's values against another's (a
    task's ``info.state`` read as ``success`` says nothing of when the VM beside it was read).
    Raises vim.fault.NotAuthenticated like ``retrieve_present``."""
    items = list(reads)
    paths: dict[Any, list[str]] = {}
    for _, type_, want in items:
        if type_ in paths:
            raise ValueError(f"retrieve_with: {type_} given twice")
        paths[type_] = list(want)
    spec = PC.FilterSpec(
        objectSet=[PC.ObjectSpec(obj=o, skip=False) for o, _, _ in items],
        propSet=_property_specs(paths),
        reportMissingObjectsInResults=True,
    )
    return _collect(content.propertyCollector, [spec], drop_missing=True)


def _collect(collector: Any, specs: list[Any], drop_missing: bool = False) -> list[ObjectProps]:
    out: list[ObjectProps] = []
    result = collector.RetrievePropertiesEx(specs, PC.RetrieveOptions())
    while result is not None:
        for oc in result.objects or []:
            for missing in oc.missingSet or []:
                # vcsim answers an expired session with per-property NotAuthenticated faults
                # instead of a SOAP fault: raise it so the session layer logs in again.
                if isinstance(missing.fault, vim.fault.NotAuthenticated):
                    raise missing.fault
            if drop_missing and any(isinstance(m.fault, vmodl.fault.ManagedObjectNotFound) for m in oc.missingSet or []):
                continue
            out.append(ObjectProps(oc.obj, {p.name: p.val for p in oc.propSet or []}))
        if not result.token:
            break
        result = collector.ContinueRetrievePropertiesEx(result.token)
    return out


def datacenter_of(obj_id: str, parents: Mapping[str, str], datacenters: Mapping[str, str]) -> str | None:
    """Walk ``parents`` (moid -> parent moid) up to a datacenter; return its name (or None)."""
    seen = 0
    cur: str | None = obj_id
    while cur is not None and seen < 64:
        if cur in datacenters:
            return datacenters[cur]
        cur = parents.get(cur)
        seen += 1
    return None
