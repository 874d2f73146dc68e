"""Two VMs with one UID (issue 19; ADR 0012 decision 9): which one is the machine's, and whether
the other may be destroyed.

The index (``find.VMIndex``) keeps every other VM it saw carrying a UID as a candidate; this
module reads the candidates (1 call each, only when there are any: nothing in steady state) and:

- **keeps** the VM whose instance UUID the machine recorded (``status.instanceUUID``, written
  with ``spec.providerID`` once the VM was found), else the oldest (vCenter numbers
  ``vm-<n>`` in creation order);
- lists the others as ``DuplicateVM``, **removable** only when provably ours and empty: the
  event history shows it was created by cloning a template (``VmClonedEvent`` whose source has
  ``config.template``; a copy of the machine's VM made by hand has that VM as its source, and a
  VM registered or created otherwise has no such event), it is powered off, and no event shows
  it ever started (``VmStartingEvent``/``VmPoweredOnEvent``): a VM that never ran holds no guest
  state newer than the kept one's. Anything else is only reported.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import DuplicateVM, VMInfo
from banlieue.backends.vsphere import events
from banlieue.backends.vsphere.find import VMIndex, moref_order, read_vm
from banlieue.backends.vsphere.inventory import InventoryIndex
from banlieue.backends.vsphere.properties import moid, retrieve_objects

vim: Any = _vim
vmodl: Any = _vmodl


def removable(content: Any, vm: Any, info: VMInfo) -> tuple[bool, str]:
    """(True, "") when ``vm`` is provably ours and empty (module rules), else (False, why):
    up to 3 calls (stops at the first reason to keep it)."""
    try:
        return _removable(content, vm, info)
    except vmodl.fault.ManagedObjectNotFound:
        return False, "it or its source changed while it was read"


def _removable(content: Any, vm: Any, info: VMInfo) -> tuple[bool, str]:
    if info.power_state != "PoweredOff":
        return False, f"it is {info.power_state}"
    source = events.cloned_from(content, vm)
    if source is None:
        return False, "vCenter's event history shows no clone of a template that created it"
    found = retrieve_objects(content, [source], vim.VirtualMachine, ["config.template", "name"])
    if not found or not found[0].get("config.template"):
        name = found[0].get("name") if found else moid(source)
        return False, f"it was cloned from VM {name}, not from a template (a copy made by hand)"
    if events.ever_powered_on(content, vm):
        return False, "it was powered on before (it may hold guest state)"
    return True, ""


def resolve(
    content: Any, index: VMIndex, uid: str, current: tuple[Any, VMInfo], recorded: str | None, nets: InventoryIndex | None
) -> tuple[Any, VMInfo]:
    """(VM, VMInfo) of the VM kept for ``uid`` among ``current`` (the index's) and the index's
    other candidates still carrying ``uid``, with the others as ``VMInfo.duplicates``; the kept
    one becomes the index's mapping. Gone or relabelled candidates are dropped from the index.
    ``recorded``: the instance UUID the machine recorded (None: not provisioned yet)."""
    live: dict[str, tuple[Any, VMInfo]] = {moid(current[0]): current}
    for ref, vm in index.others(uid).items():
        info = read_vm(content, vm, nets)
        if info is None or info.uid != uid:
            index.forget(uid, ref)
            continue
        live[ref] = (vm, info)
    if len(live) == 1:
        return current
    by_record = [ref for ref, (_, info) in live.items() if recorded and info.instance_uuid == recorded]
    kept_ref = by_record[0] if by_record else min(live, key=moref_order)
    kept_vm, kept_info = live.pop(kept_ref)
    index.put(uid, kept_vm)
    dups = []
    for ref in sorted(live, key=moref_order):
        vm, info = live[ref]
        ok, why = removable(content, vm, info)
        dups.append(DuplicateVM(moref=ref, name=info.name, instance_uuid=info.instance_uuid,
                                power_state=info.power_state, removable=ok, why=why))
    return kept_vm, replace(kept_info, duplicates=tuple(dups))
