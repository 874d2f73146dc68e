"""The VSphereMachine a VirtualMachine owns: its desired body, whether the live one differs,
and whether a live one belongs to the VM at all (split from ``virtualmachine.decide``).

The VSphereMachine has the VM's name and namespace, a controller ownerReference to the VM
(``blockOwnerDeletion``), the VM's labels plus ``banlieue.io/owned-by`` and
``banlieue.io/provider``, and a spec built from the VMClass, the VM's per-interface network settings
(``spec.network.interfaces``, by interface name, each field replacing the class's), the image
source and the placement (SPEC §4). User data is passed by reference (``bootstrapDataSecretRef``), never read.

The apply also carries the provider's finalizer ``infrastructure.banlieue.io/vspheremachine``
(ADR 0011): the VSphereMachine is born with it, so the provider role finds it present and sends
no finalizer patch of its own (it still adds it when missing: CAPI-created machines, or one
removed by hand). ``metadata.finalizers`` is a set for server-side apply, so the controller's
field manager owns that one value and nothing else; the provider's merge patch removing it after
the VM is destroyed is an ordinary update (no conflict). The controller never applies to a
machine that is being deleted (``virtualmachine.decide``), and the API server refuses a new
finalizer on an object with a deletionTimestamp anyway. ``machine_differs`` ignores finalizers:
a missing one is the provider's to restore, never a reason for the controller to write.
"""

from __future__ import annotations

from typing import Any

from banlieue.api.infrastructure import API_VERSION as INFRA_API_VERSION
from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.virtualmachine import VirtualMachine
from banlieue.api.vmclass import IPAMSource, VMClass
from banlieue.reconcilers.kinds import FINALIZER_VSPHERE_MACHINE, LABEL_OWNED_BY, LABEL_PROVIDER
from banlieue.reconcilers.virtualmachine.scheduler import Placement

MANAGED_SPEC_KEYS = (
    "providerRef", "failureDomain", "template", "numCPUs", "memoryMiB", "disks", "network", "firmware",
    "powerState", "bootstrapDataSecretRef",
)
"""VSphereMachine spec fields the controller owns (field manager ``banlieue.io/controller``)."""


def desired_machine(vm: VirtualMachine, vm_class: VMClass, target: Placement) -> dict[str, Any]:
    """The VSphereMachine the controller applies for ``vm`` on ``target`` (wire dict)."""
    name, namespace = vm.metadata.name or "", vm.metadata.namespace or ""
    labels = {**(vm.metadata.labels or {}), LABEL_OWNED_BY: name, LABEL_PROVIDER: target.provider_name}
    hw = vm_class.spec.hardware
    devices: list[dict[str, Any]] = []
    overrides = {o.name: o for o in (vm.spec.network.interfaces if vm.spec.network else None) or ()}
    for nic in (vm_class.spec.network.interfaces if vm_class.spec.network else None) or ():
        device: dict[str, Any] = {"name": nic.name, "networkClass": nic.network_class}
        if nic.ipam is not None and nic.ipam.source is IPAMSource.STATIC:
            static = nic.ipam.static
            device["dhcp4"] = False
            if static is not None:
                device.update(static.to_wire())
        else:
            device["dhcp4"] = True
        override = overrides.get(nic.name)
        if override is not None:
            # The VM's own settings replace the class's field by field (SPEC §2 VirtualMachine
            # spec.network); static addresses turn IPv4 DHCP off.
            device.update(override.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"name"}))
            if override.addresses:
                device["dhcp4"] = False
        devices.append(device)
    spec: dict[str, Any] = {
        "providerRef": {"name": target.provider_name},
        "failureDomain": target.failure_domain,
        "numCPUs": hw.cpus,
        "memoryMiB": hw.memory_mib,
        "firmware": str(vm_class.spec.firmware),
        "powerState": str(vm.spec.desired_power_state),
    }
    if target.template is not None:
        spec["template"] = target.template
    if hw.disks:
        spec["disks"] = [
            {"name": d.name, "sizeGiB": d.size_gib, "provisioning": str(d.provisioning), "storageClass": d.storage_class}
            for d in hw.disks
        ]
    if devices:
        spec["network"] = {"devices": devices}
    if vm.spec.user_data is not None:
        # By reference only: the controller never reads or copies user data (SPEC §2).
        spec["bootstrapDataSecretRef"] = {"name": vm.spec.user_data.secret_ref.name, "key": vm.spec.user_data.key}
    owner = {
        "apiVersion": vm.api_version, "kind": vm.kind, "name": name, "uid": vm.metadata.uid or "",
        "controller": True, "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": INFRA_API_VERSION,
        "kind": "VSphereMachine",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner],
                     "finalizers": [FINALIZER_VSPHERE_MACHINE]},
        "spec": spec,
    }


def power_only_machine(vm: VirtualMachine, machine: VSphereMachine) -> dict[str, Any] | None:
    """The apply that carries ``vm.spec.desiredPowerState`` to its VSphereMachine ``machine``
    when nothing else can be applied (its VMClass or VMImage is gone, or its spec cannot be
    placed): the machine's own managed fields as they are, ``powerState`` changed; None when
    the machine already has that power state.

    Power requests are always carried out (issue 19, ADR 0012); a VM whose class was deleted
    could not be powered off. The body repeats every managed field the live machine has, so the
    server-side apply (one field manager) releases none of them."""
    wanted = str(vm.spec.desired_power_state)
    live = machine.to_wire()
    spec = {k: v for k, v in (live.get("spec") or {}).items() if k in MANAGED_SPEC_KEYS}
    if spec.get("powerState") == wanted:
        return None
    spec["powerState"] = wanted
    meta = live.get("metadata") or {}
    owner = {
        "apiVersion": vm.api_version, "kind": vm.kind, "name": vm.metadata.name or "", "uid": vm.metadata.uid or "",
        "controller": True, "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": INFRA_API_VERSION,
        "kind": "VSphereMachine",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": dict(meta.get("labels") or {}),
                     "ownerReferences": [owner], "finalizers": [FINALIZER_VSPHERE_MACHINE]},
        "spec": spec,
    }


def _contains(actual: Any, desired: Any) -> bool:
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and _contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(actual) == len(desired) and all(
            _contains(a, d) for a, d in zip(actual, desired, strict=True)
        )
    return bool(actual == desired)


_DEVICE_IP_KEYS = ("addresses", "gateway4", "gateway6", "nameservers")
"""Network device fields without a server default: one the desired device lacks must be absent
on the live machine too (an override or class setting removed), which ``_contains`` cannot see."""


def _stale_ip_settings(actual_spec: dict[str, Any], desired_spec: dict[str, Any]) -> bool:
    live = {d.get("name"): d for d in (actual_spec.get("network") or {}).get("devices") or ()}
    for device in (desired_spec.get("network") or {}).get("devices") or ():
        have = live.get(device["name"]) or {}
        if any(key in have and key not in device for key in _DEVICE_IP_KEYS):
            return True
    return False


def machine_differs(machine: VSphereMachine | None, desired: dict[str, Any]) -> bool:
    """Whether applying ``desired`` would change ``machine``: labels differ, the owner reference
    is missing, or a managed spec field differs (set, changed or to be removed)."""
    if machine is None:
        return True
    actual = machine.to_wire()
    meta = actual.get("metadata", {})
    if (meta.get("labels") or {}) != desired["metadata"]["labels"]:
        return True
    owner = desired["metadata"]["ownerReferences"][0]
    if not any(_contains(ref, owner) for ref in meta.get("ownerReferences") or ()):
        return True
    spec = actual.get("spec", {})
    for key in MANAGED_SPEC_KEYS:
        if key in desired["spec"]:
            if not _contains(spec.get(key), desired["spec"][key]):
                return True
        elif key in spec:
            return True
    return _stale_ip_settings(spec, desired["spec"])


def owns(vm: VirtualMachine, machine: VSphereMachine) -> bool:
    """Whether ``machine`` belongs to ``vm``: its controller ownerReference is the VM (by UID),
    or it has no controller and carries ``banlieue.io/owned-by: <vm name>``. A VSphereMachine of
    the same name that belongs to something else (a CAPI Machine, another VM) is never applied
    over, deleted or mirrored."""
    controllers = [r for r in machine.metadata.owner_references or () if r.controller]
    if controllers:
        return any(r.kind == vm.kind and r.uid == vm.metadata.uid for r in controllers)
    return (machine.metadata.labels or {}).get(LABEL_OWNED_BY) == vm.metadata.name
