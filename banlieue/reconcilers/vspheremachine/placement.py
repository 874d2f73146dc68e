"""Pure helpers of the VSphereMachine reconciler: which path, which Provider, where, what to build.

Everything here is a pure function of API objects (models or wire dicts); ``vspheremachine.decide``
calls them and turns a ``PlacementError`` into a ``Ready`` condition. SPEC §3: with
``spec.failureDomain`` (or the CAPI ``Machine.spec.failureDomain``) the Provider, datacenter and
cluster come from the Provider whose ``status.failureDomains[].name`` matches (its
``attributes.raw``); otherwise ``spec.providerRef`` + ``spec.datacenter``/``spec.cluster`` (a
Provider with exactly one failure domain supplies them when absent). Abstract ``storageClass`` /
``networkClass`` resolve through that Provider's ``spec.capabilities``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from banlieue.api.conditions import READY, get_condition
from banlieue.api.infrastructure import BOOTSTRAP_DATA_DEFAULT_KEY, VSphereMachine
from banlieue.api.infrastructure import GROUP as INFRA_GROUP
from banlieue.api.infrastructure import VSphereMachineReason as Reason
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import Provider, ProviderConditionReason, ProviderFailureDomain
from banlieue.backends.base import DiskSpec, NicSpec, VMSpec
from banlieue.runtime.event import nested

CAPI_GROUP = "cluster.x-k8s.io"
BOOTSTRAP_FORMAT_KEY = "format"
"""Key of a CAPI bootstrap data Secret naming the format (``cloud-config`` or ``ignition``)."""


class PlacementError(Exception):
    """The machine cannot be placed: ``reason`` (a Ready reason) and an actionable message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Placement:
    """Where the machine goes: the Provider, the failure domain name (None on the explicit
    path), datacenter and compute cluster."""

    provider: Provider
    failure_domain: str | None
    datacenter: str
    cluster: str


def capi_machine_owner(machine: VSphereMachine) -> str | None:
    """Name of the ``cluster.x-k8s.io`` Machine in ``ownerReferences`` (CAPI InfraMachine
    contract: the Machine controller sets it), None when absent."""
    for ref in machine.metadata.owner_references or ():
        if ref.kind == "Machine" and ref.api_version.split("/")[0] == CAPI_GROUP:
            return ref.name
    return None


def machine_owns_back(machine: VSphereMachine, capi_machine: Mapping[str, Any] | None) -> bool:
    """Whether ``capi_machine`` really is this VSphereMachine's Machine: the ownerReference's
    ``uid`` is the Machine's, and the Machine's ``spec.infrastructureRef`` (v1beta2: apiGroup,
    kind, name) names this VSphereMachine (CAPI InfraMachine contract: the Machine references
    its infrastructure machine, then owns it). Anyone who may write VSphereMachines can add an
    ownerReference naming any Machine of the namespace; without this check the machine took that
    Machine's bootstrap data - a join token of another cluster - into its own VM (issue 23,
    found by the hostile-tenant pass). False for None."""
    if capi_machine is None:
        return False
    meta = capi_machine.get("metadata") or {}
    uids = {ref.uid for ref in machine.metadata.owner_references or ()
            if ref.kind == "Machine" and ref.api_version.split("/")[0] == CAPI_GROUP and ref.name == meta.get("name")}
    ref = nested(capi_machine, "spec", "infrastructureRef") or {}
    names_back = (ref.get("kind") == "VSphereMachine" and ref.get("name") == machine.metadata.name
                  and ref.get("apiGroup", INFRA_GROUP) == INFRA_GROUP)
    return bool(meta.get("uid")) and meta.get("uid") in uids and names_back


def owned_by_other_controller(machine: VSphereMachine) -> bool:
    """Whether a non-CAPI controller owns it (a banlieue VirtualMachine): the standalone path."""
    return any(
        ref.controller and ref.api_version.split("/")[0] != CAPI_GROUP for ref in machine.metadata.owner_references or ()
    )


def is_capi_path(machine: VSphereMachine, cluster_label: str) -> bool:
    """CAPI path: a Machine owner, or (awaiting one) the ``cluster.x-k8s.io/cluster-name`` label
    on an object no other controller owns. Otherwise standalone."""
    if capi_machine_owner(machine) is not None:
        return True
    return bool((machine.metadata.labels or {}).get(cluster_label)) and not owned_by_other_controller(machine)


def capi_failure_domain(capi_machine: Mapping[str, Any] | None) -> str | None:
    """``Machine.spec.failureDomain`` (CAPI v1beta2), None when unset."""
    value = nested(capi_machine, "spec", "failureDomain")
    return str(value) if value else None


def capi_bootstrap_secret(capi_machine: Mapping[str, Any] | None) -> str | None:
    """``Machine.spec.bootstrap.dataSecretName`` (CAPI bootstrap contract), None until set."""
    value = nested(capi_machine, "spec", "bootstrap", "dataSecretName")
    return str(value) if value else None


def cluster_infrastructure_provisioned(cluster: Mapping[str, Any] | None) -> bool:
    """``Cluster.status.initialization.infrastructureProvisioned`` (CAPI v1beta2)."""
    return nested(cluster, "status", "initialization", "infrastructureProvisioned") is True


def cluster_paused(cluster: Mapping[str, Any] | None, paused_annotation: str) -> bool:
    """``Cluster.spec.paused`` or the ``cluster.x-k8s.io/paused`` annotation on the Cluster."""
    if cluster is None:
        return False
    annotations = nested(cluster, "metadata", "annotations") or {}
    return nested(cluster, "spec", "paused") is True or paused_annotation in annotations


def bootstrap_secret_ref(machine: VSphereMachine, capi_machine: Mapping[str, Any] | None, capi: bool) -> tuple[str, str] | None:
    """(Secret name, key) of the bootstrap data: the CAPI Machine's dataSecretName (key
    ``value``) on the CAPI path, ``spec.bootstrapDataSecretRef`` otherwise; None when none."""
    if capi:
        name = capi_bootstrap_secret(capi_machine)
        return (name, BOOTSTRAP_DATA_DEFAULT_KEY) if name else None
    ref = machine.spec.bootstrap_data_secret_ref
    return (ref.name, ref.key) if ref is not None else None


@dataclass(frozen=True)
class BootstrapData:
    """Decoded bootstrap data: the bytes and the format (``cloud-config`` or ``ignition``)."""

    data: bytes
    format: str


def read_bootstrap(secret: Mapping[str, Any], key: str) -> BootstrapData:
    """Bootstrap data from a Secret's ``data`` (base64) or ``stringData``. Raises PlacementError
    (``WaitingForBootstrapData``) when the key is missing or not base64."""
    name = nested(secret, "metadata", "name") or "?"
    raw = (secret.get("data") or {}).get(key)
    fmt_raw = (secret.get("data") or {}).get(BOOTSTRAP_FORMAT_KEY)
    try:
        if raw is not None:
            data = base64.b64decode(str(raw), validate=True)
        elif key in (secret.get("stringData") or {}):
            data = str(secret["stringData"][key]).encode()
        else:
            raise PlacementError(Reason.WAITING_FOR_BOOTSTRAP_DATA, f"bootstrap data Secret {name} has no key {key!r}")
        fmt = base64.b64decode(str(fmt_raw), validate=True).decode() if fmt_raw else "cloud-config"
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise PlacementError(Reason.WAITING_FOR_BOOTSTRAP_DATA, f"bootstrap data Secret {name} key {key!r} is not valid base64") from exc
    return BootstrapData(data=data, format=fmt or "cloud-config")


def refuses_new_machines(provider: Provider) -> tuple[str, str] | None:
    """Why ``provider`` takes no new VM, as (Ready reason, actionable message), None when it takes
    them. Rules: its ``metadata.deletionTimestamp`` is set -> ``ProviderDeleting`` (its finalizer
    ``banlieue.io/provider`` holds it while machines use it; a new VM would hold it for as long as
    the VM lives: ``provider.deletion``); its ``Ready`` is False ``DuplicateVCenter`` -> that
    reason (ADR 0013: an older Provider of the namespace reaches the same vCenter and alone takes
    new VMs, since each Provider reserves capacity against its own failure domains). Machines that
    already have a VM there keep it; only a new clone is refused. Never raises."""
    name = provider.metadata.name
    if provider.metadata.deletion_timestamp is not None:
        return (Reason.PROVIDER_DELETING,
                f"Provider {name} is being deleted and takes no new VM: point spec.providerRef or the failure "
                "domain at another Provider, or delete this machine (the Provider is removed once no machine uses it)")
    ready = get_condition(provider.status.conditions if provider.status else None, READY)
    if ready is not None and ready.status is ConditionStatus.FALSE and ready.reason == ProviderConditionReason.DUPLICATE_VCENTER:
        return (Reason.DUPLICATE_VCENTER,
                f"Provider {name} reaches the same vCenter as an older Provider of this namespace and takes no new "
                "VM (its VCenterUnique condition names it): point spec.providerRef or the failure domain at that "
                "Provider, or delete the duplicate Provider")
    return None


def _raw_of(fd: ProviderFailureDomain) -> tuple[str, str] | None:
    raw = fd.attributes.raw if fd.attributes is not None else None
    if raw is None or not raw.datacenter or not raw.cluster:
        return None
    return raw.datacenter, raw.cluster


def _provider_not_found(ref: str, namespace: str | None) -> str:
    """The ProviderNotFound message: what is missing and where to look (a new-user review found it
    gave no hint, where ClassNotFound says which field to check and how to list the names)."""
    ns = namespace or "default"
    return (f"Provider {ref} not found in namespace {ns}: check spec.providerRef.name "
            f"(kubectl get providers.banlieue.io -n {ns} lists them); re-checked when a Provider is created")


def resolve_placement(
    machine: VSphereMachine, failure_domain: str | None, providers: Sequence[Provider], *, capi: bool = False
) -> Placement:
    """Provider, failure domain, datacenter and cluster of ``machine`` among ``providers`` (its
    namespace). ``capi``: the machine is on the CAPI path, where the failure domain comes from
    ``Machine.spec.failureDomain`` (messages name that field). Raises PlacementError
    (InvalidSpec, ProviderNotFound, FailureDomainNotFound)."""
    spec = machine.spec
    ref = spec.provider_ref.name if spec.provider_ref is not None else None
    if ref is not None and not any(p.metadata.name == ref for p in providers):
        # The named Provider is gone (or never existed): say so, whatever the failure domain.
        raise PlacementError(Reason.PROVIDER_NOT_FOUND, _provider_not_found(ref, machine.metadata.namespace))
    if failure_domain:
        for provider in providers:
            if ref is not None and provider.metadata.name != ref:
                continue
            for fd in (provider.status.failure_domains if provider.status else None) or ():
                if fd.name != failure_domain:
                    continue
                where = _raw_of(fd)
                if where is None:
                    raise PlacementError(
                        Reason.FAILURE_DOMAIN_NOT_FOUND,
                        f"failure domain {failure_domain!r} of Provider {provider.metadata.name} has no attributes.raw datacenter/cluster",
                    )
                return Placement(provider, failure_domain, where[0], where[1])
        scope = f"Provider {ref}" if ref else "any Provider in this namespace"
        raise PlacementError(
            Reason.FAILURE_DOMAIN_NOT_FOUND,
            f"failure domain {failure_domain!r} is not in status.failureDomains of {scope}: check the name or wait for the Provider to be reconciled",
        )
    if ref is None:
        # The CAPI path never gets here without a failure domain: decide gives it the one
        # banlieue chose (choose_cluster_failure_domain).
        raise PlacementError(Reason.INVALID_SPEC, "set spec.failureDomain or spec.providerRef.name")
    chosen = next((p for p in providers if p.metadata.name == ref), None)
    if chosen is None:
        raise PlacementError(Reason.PROVIDER_NOT_FOUND, _provider_not_found(ref, machine.metadata.namespace))
    provider = chosen
    datacenter, cluster = spec.datacenter, spec.cluster
    if not datacenter or not cluster:
        fds = [(fd, _raw_of(fd)) for fd in (provider.status.failure_domains if provider.status else None) or ()]
        fds_ok = [(fd, w) for fd, w in fds if w is not None and (not datacenter or w[0] == datacenter)]
        if len(fds_ok) != 1:
            raise PlacementError(
                Reason.INVALID_SPEC,
                f"set spec.datacenter and spec.cluster (or spec.failureDomain): Provider {ref} offers {len(fds_ok)} matching failure domains",
            )
        fd, where = fds_ok[0]
        assert where is not None
        return Placement(provider, fd.name, where[0], where[1])
    named = next((fd.name for fd in (provider.status.failure_domains if provider.status else None) or () if _raw_of(fd) == (datacenter, cluster)), None)
    return Placement(provider, named, datacenter, cluster)


def _member_for(placement: Placement, storage_class: str) -> str | None:
    """The member datastore the Provider chose for ``storage_class`` (a datastore cluster) in the
    placement's failure domain (``capacity.storageClasses[].member``), or None."""
    status = placement.provider.status
    for fd in (status.failure_domains if status else None) or ():
        if fd.name != placement.failure_domain and _raw_of(fd) != (placement.datacenter, placement.cluster):
            continue
        cap = fd.attributes.capacity if fd.attributes else None
        for entry in (cap.storage_classes if cap else None) or ():
            if entry.name == storage_class and entry.member:
                return entry.member
    return None


def _datastore_for(placement: Placement, storage_class: str) -> str:
    provider = placement.provider
    caps = provider.spec.capabilities
    for sc in (caps.storage_classes if caps else None) or ():
        if sc.name == storage_class:
            if sc.target.datastore:
                return sc.target.datastore
            member = _member_for(placement, storage_class)
            if member is not None:
                return member
            raise PlacementError(
                Reason.INVALID_SPEC,
                f"storage class {storage_class!r} maps to datastore cluster {sc.target.datastore_cluster!r}, "
                f"which has no accessible member mounted on cluster {placement.cluster!r} in the Provider's "
                "last inventory: add a member datastore to that cluster or pick another failure domain",
            )
    offered = sorted(sc.name for sc in (caps.storage_classes if caps else None) or ())
    raise PlacementError(
        Reason.INVALID_SPEC,
        f"storage class {storage_class!r} is not offered by Provider {provider.metadata.name} (offered: {offered}): "
        "fix the disk's storageClass or add it to the Provider's spec.capabilities.storageClasses",
    )


def _network_for(provider: Provider, network_class: str) -> str:
    caps = provider.spec.capabilities
    for nc in (caps.network_classes if caps else None) or ():
        if nc.name == network_class:
            name = nc.target.port_group or nc.target.distributed_port_group
            if name:
                return name
    offered = sorted(nc.name for nc in (caps.network_classes if caps else None) or ())
    raise PlacementError(
        Reason.INVALID_SPEC,
        f"network class {network_class!r} is not offered by Provider {provider.metadata.name} (offered: {offered}): "
        "fix the device's networkClass or add it to the Provider's spec.capabilities.networkClasses",
    )


def build_vm_spec(machine: VSphereMachine, placement: Placement, user_data: bytes | None) -> VMSpec:
    """The backend VMSpec for ``machine`` at ``placement``; the VM and host name are the object
    name, ``uid`` the object's UID. Raises PlacementError(InvalidSpec) for a missing template,
    CPU or memory, or an unknown storage/network class."""
    spec = machine.spec
    if not spec.template:
        raise PlacementError(Reason.INVALID_SPEC, "spec.template is required: name the vSphere template to clone")
    if spec.num_cpus is None or spec.memory_mib is None:
        raise PlacementError(Reason.INVALID_SPEC, "spec.numCPUs and spec.memoryMiB are required")
    disks: list[DiskSpec] = []
    for disk in spec.disks or ():
        datastore = _datastore_for(placement, disk.storage_class) if disk.storage_class else disk.datastore
        disks.append(DiskSpec(disk.name, disk.size_gib, disk.provisioning.value, datastore))
    nics: list[NicSpec] = []
    for dev in (spec.network.devices if spec.network else None) or ():
        network = _network_for(placement.provider, dev.network_class) if dev.network_class else dev.port_group
        if not network:
            raise PlacementError(Reason.INVALID_SPEC, f"network device {dev.name!r} needs portGroup or networkClass")
        addresses = tuple(dev.addresses or ())
        nics.append(
            NicSpec(
                name=dev.name,
                network=network,
                mac_address=dev.mac_address,
                dhcp4=dev.dhcp4 if dev.dhcp4 is not None else not addresses,
                dhcp6=bool(dev.dhcp6),
                addresses=addresses,
                gateway4=dev.gateway4,
                gateway6=dev.gateway6,
                nameservers=tuple(dev.nameservers or ()),
            )
        )
    return VMSpec(
        uid=machine.metadata.uid or "",
        name=machine.metadata.name or "",
        datacenter=placement.datacenter,
        cluster=placement.cluster,
        template=spec.template,
        num_cpus=spec.num_cpus,
        memory_mib=spec.memory_mib,
        num_cores_per_socket=spec.num_cores_per_socket or 0,
        resource_pool=spec.resource_pool,
        folder=spec.folder,
        datastore=disks[0].datastore if disks else None,
        clone_mode=spec.clone_mode.value,
        firmware=spec.firmware.value if spec.firmware is not None else None,
        disks=tuple(disks),
        nics=tuple(nics),
        user_data=user_data,
        hostname=machine.metadata.name,
    )


@dataclass(frozen=True)
class DomainChoice:
    """The failure domain banlieue chose for a CAPI machine that has none (``name``), or why
    none fits (``name`` None, ``message``)."""

    name: str | None
    message: str = ""


def choose_cluster_failure_domain(
    cluster: Mapping[str, Any] | None, providers: Sequence[Provider], used: Mapping[str, int], *,
    memory_mib: int | None, control_plane: bool,
) -> DomainChoice:
    """A failure domain for a CAPI machine whose Machine has no ``spec.failureDomain`` and whose
    template names no Provider (issue 17: most MachineDeployments are written so).

    Candidates: the Cluster's ``status.failureDomains`` (CAPI's copy of the VSphereCluster's;
    only ``controlPlane: true`` ones for a control-plane machine), each found in the
    ``status.failureDomains`` of a Provider of the namespace with ``attributes.raw`` datacenter
    and cluster that takes new machines (``refuses_new_machines``). Filter: the domain's reported free memory (``attributes.capacity.memoryMiB``,
    when reported) is at least ``memory_mib``. Rank: fewest machines of this Cluster already in
    the domain (``used``: name -> count; CAPI's ``PickFewest`` for control planes, so a fresh
    MachineDeployment spreads one per domain first), then most free memory, then name.
    """
    cluster_name = nested(cluster, "metadata", "name") or "?"
    published = [d for d in nested(cluster, "status", "failureDomains") or () if isinstance(d, Mapping) and d.get("name")]
    if control_plane:
        published = [d for d in published if d.get("controlPlane") is True]
    if not published:
        return DomainChoice(None, f"Machine.spec.failureDomain is not set and Cluster {cluster_name} publishes no "
                                  f"{'control-plane ' if control_plane else ''}failure domain in status.failureDomains yet")
    known: dict[str, ProviderFailureDomain] = {}
    for provider in providers:
        if refuses_new_machines(provider) is not None:
            continue  # deleting or a duplicate: its domains take no new machine (the Cluster's copy may lag)
        for fd in (provider.status.failure_domains if provider.status else None) or ():
            if _raw_of(fd) is not None:
                known.setdefault(fd.name, fd)
    candidates: list[tuple[int, int, str]] = []
    short: list[str] = []
    for d in published:
        name = str(d["name"])
        domain = known.get(name)
        if domain is None:
            continue
        capacity = domain.attributes.capacity if domain.attributes is not None else None
        free = capacity.memory_mib if capacity is not None else None
        if free is not None and memory_mib is not None and free < memory_mib:
            short.append(f"{name} ({free} MiB free)")
            continue
        candidates.append((used.get(name, 0), -(free or 0), name))
    if not candidates:
        detail = f"; too little free memory for {memory_mib} MiB: {', '.join(short)}" if short else ""
        return DomainChoice(None, f"Machine.spec.failureDomain is not set and none of Cluster {cluster_name}'s failure domains "
                                  f"({', '.join(sorted(str(d['name']) for d in published))}) can take it{detail}")
    return DomainChoice(min(candidates)[2])
