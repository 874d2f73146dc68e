"""VirtualMachine (banlieue.io/v1alpha1): the user's object (SPEC §2, §4)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field

from banlieue.api.groups import CORE_API_VERSION as API_VERSION
from banlieue.api.meta import (
    IMMUTABLE,
    LIST_ATOMIC,
    ApiModel,
    Condition,
    ContractVersionedObjectReference,
    Initialization,
    IPAddress,
    IPPrefix,
    IPv4Gateway,
    IPv6Gateway,
    KubeObject,
    LabelSelector,
    ListMeta,
    LocalObjectReference,
    MachineAddress,
    Time,
    interface_ip_rules,
    list_map,
    one_default_gateway_rules,
)
from banlieue.api.provider import FAILURE_DOMAIN_LABELS
from banlieue.api.vmclass import DEVICE_NAME_SCHEMA, MAX_ADDRESSES, MAX_NICS

_CONDITIONS = list_map("type")
_BY_NAME = list_map("name")

VIRTUAL_MACHINE_FINALIZER = "banlieue.io/virtualmachine"
"""Finalizer the controller puts on every VirtualMachine (SPEC §2)."""
MIGRATE_ANNOTATION = "banlieue.io/migrate"
"""Annotation whose value ``"true"`` authorises a manual migration; cleared after it happens."""
OWNED_BY_LABEL = "banlieue.io/owned-by"
"""Label on a VSphereMachine naming the VirtualMachine that owns it."""
PROVIDER_LABEL = "banlieue.io/provider"
"""Label on a VSphereMachine naming the Provider it was placed on."""

class VirtualMachineConditionType:
    """Condition types of a VirtualMachine (SPEC §2)."""

    READY = "Ready"
    SCHEDULED = "Scheduled"
    PLACEMENT_VALID = "PlacementValid"
    INFRASTRUCTURE_READY = "InfrastructureReady"
    MIGRATING = "Migrating"
    PAUSED = "Paused"
    REFERENCES_RESOLVED = "ReferencesResolved"
    """False while the VMClass or VMImage of a placed VM is gone: the VM keeps running as it is
    (set only once that happened; ADR 0012)."""
    HARDWARE_CHANGE_PENDING = "HardwareChangePending"
    """Mirrored from the VSphereMachine (``vspheremachine.hardware``): a class edit not applied
    to the running VM yet, a disk kept or a shrink refused. Never makes the VM NotReady."""


class VirtualMachineReason:
    """Reasons of the VirtualMachine conditions: SPEC §4's scheduling and drift reasons, then
    the ones banlieue chose where the SPEC names none. ``InfrastructureReady`` (and ``Ready``
    while the machine is not Ready) also carries :class:`~banlieue.api.infrastructure.VSphereMachineReason`
    values mirrored from the VSphereMachine. Operators: docs/operations.md."""

    CLASS_NOT_FOUND = "ClassNotFound"
    IMAGE_NOT_FOUND = "ImageNotFound"
    NO_PROVIDER_MATCHED = "NoProviderMatched"
    NO_FAILURE_DOMAIN_MATCHED = "NoFailureDomainMatched"
    IMAGE_NOT_READY = "ImageNotReady"
    FIRMWARE_UNSUPPORTED = "FirmwareUnsupported"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    ANTI_AFFINITY_UNSATISFIED = "AntiAffinityUnsatisfied"
    PROVIDER_CHANGED = "ProviderChanged"
    FAILURE_DOMAIN_CHANGED = "FailureDomainChanged"
    # Not named by the SPEC (banlieue's choice).
    MIGRATION_DESTROYS_VM = "MigrationDestroysVM"
    INTERFACE_NOT_IN_CLASS = "InterfaceNotInClass"
    """``spec.network.interfaces`` names an interface the VMClass does not have."""
    NETWORK_SETTINGS_INCONSISTENT = "NetworkSettingsInconsistent"
    """The interfaces' effective settings (the VM's overrides over its VMClass) are each valid but
    cannot work together: a gateway outside the interface's networks, an IPv4 address that is its
    network's network or broadcast address, one address on two interfaces, gateway4 on an interface
    left without IPv4, a default gateway of one family on two interfaces."""
    ADDRESS_CONFLICT = "AddressConflict"
    """A static address of the VM (its class's or its own) is on the same network class as one
    another VirtualMachine of the namespace (placed, or created earlier) or a standalone
    VSphereMachine holds: the VM is not cloned until the address is free or changed."""
    CLASS_NOT_OFFERED = "ClassNotOffered"
    """The VMClass (edited) names a storage or network class the failure domain of a VM already
    placed there does not offer; the VM is kept as it is (ADR 0012)."""
    RESOLVED = "Resolved"
    READY = "Ready"
    SCHEDULED = "Scheduled"
    NOT_SCHEDULED = "NotScheduled"
    VALID = "Valid"
    NOT_MIGRATING = "NotMigrating"
    PAUSED = "Paused"
    NOT_PAUSED = "NotPaused"
    DELETING = "Deleting"
    WAITING_FOR_INFRASTRUCTURE = "WaitingForInfrastructure"
    WAITING_FOR_POWER_STATE = "WaitingForPowerState"
    INFRASTRUCTURE_CONFLICT = "InfrastructureConflict"


class PowerState(StrEnum):
    """Virtual machine power state (vSphere names)."""

    POWERED_ON = "PoweredOn"
    POWERED_OFF = "PoweredOff"
    SUSPENDED = "Suspended"


class MigrationPolicy(StrEnum):
    """What to do when the current placement becomes invalid (drift). A move re-creates the VM:
    banlieue has no live migration, so the old VM and its disks are destroyed (ADR 0012)."""

    AUTOMATIC = "automatic"
    MANUAL = "manual"
    NEVER = "never"


class AntiAffinityMode(StrEnum):
    """Whether an anti-affinity term is a hard or soft constraint."""

    REQUIRED = "required"
    PREFERRED = "preferred"


class AntiAffinityTerm(ApiModel):
    """Keep this VM apart from the VMs selected by ``labelSelector`` across ``topologyKey``."""

    topology_key: str = Field(min_length=1, json_schema_extra={"enum": list(FAILURE_DOMAIN_LABELS)})
    """Failure-domain label whose value must differ: ``dc`` or ``cluster``, the labels a Provider
    gives its failure domains (``FAILURE_DOMAIN_LABELS``; another key matched no domain and the
    term constrained nothing). An enum in the CRD schema only: a VM stored before is still read."""
    label_selector: LabelSelector | None = None
    """VirtualMachines (same namespace) to keep apart from; none selects nothing."""
    mode: AntiAffinityMode = AntiAffinityMode.REQUIRED
    """required (never violated) or preferred (best effort)."""


class Placement(ApiModel):
    """Constraints on where the VM may run."""

    provider_selector: LabelSelector | None = None
    """Selects Providers by label (all Providers in the namespace when absent)."""
    failure_domain_selector: LabelSelector | None = None
    """Selects failure domains by their labels (all when absent)."""
    anti_affinity: list[AntiAffinityTerm] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Anti-affinity terms."""


class UserData(ApiModel):
    """Guest user data (cloud-init / ignition) in a Secret; passed by reference only."""

    secret_ref: LocalObjectReference
    """Secret in the VM's namespace."""
    key: str = Field(default="user-data", min_length=1)
    """Key of the Secret holding the user data."""


class InterfaceOverride(ApiModel):
    """This VM's own network settings for one interface of its VMClass, by name. Each field set
    replaces the class's value for that interface; an unset field keeps the class's. Admission
    checks the fields set here together (``meta.interface_ip_rules``); with the class's values
    they are checked by the controller (``NetworkSettingsInconsistent``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": interface_ip_rules(
        {4: "!has(self.addresses) || size(self.addresses) == 0"}, "; these addresses turn the class's DHCPv4 off")})

    name: str = Field(min_length=1, json_schema_extra=DEVICE_NAME_SCHEMA)
    """Name of an interface of the VMClass (``spec.network.interfaces[].name``); a name the class
    does not have keeps the VM from being scheduled (``Scheduled`` False ``InterfaceNotInClass``)."""
    addresses: list[IPPrefix] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """Static addresses with their prefix length (``10.0.0.5/24``, ``fd00::5/64``; at most 16). Replaces
    the class's addresses and turns the interface's IPv4 DHCP off, also on a class interface that uses DHCP."""
    gateway4: IPv4Gateway | None = None
    """IPv4 default gateway (a unicast IPv4 address in one of the interface's IPv4 networks)."""
    gateway6: IPv6Gateway | None = None
    """IPv6 default gateway (a unicast IPv6 address in one of the interface's IPv6 networks, or link-local)."""
    nameservers: list[IPAddress] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """DNS servers (IP addresses; at most 16)."""


class VirtualMachineNetwork(ApiModel):
    """Per-VM network settings over the VMClass's interfaces: at most one override sets gateway4
    and one gateway6 (``meta.one_default_gateway_rules``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": one_default_gateway_rules(
        "interfaces", "has({i}.gateway{family})", MAX_NICS)})

    interfaces: list[InterfaceOverride] | None = Field(default=None, max_length=MAX_NICS, json_schema_extra=_BY_NAME)
    """Overrides by interface name (at most 10, vSphere's per-VM NIC limit)."""


class VirtualMachineSpec(ApiModel):
    """Desired state of a VirtualMachine."""

    class_ref: LocalObjectReference = Field(json_schema_extra=IMMUTABLE)
    """VMClass (cluster-scoped) giving the shape; immutable."""
    image_ref: LocalObjectReference = Field(json_schema_extra=IMMUTABLE)
    """VMImage (cluster-scoped) to boot; immutable."""
    placement: Placement | None = None
    """Placement constraints."""
    desired_power_state: PowerState = PowerState.POWERED_ON
    """PoweredOn, PoweredOff or Suspended."""
    user_data: UserData | None = None
    """Guest user data."""
    network: VirtualMachineNetwork | None = None
    """This VM's addresses, gateways and name servers per class interface (overriding the
    VMClass's); delivered to the guest in the cloud-init metadata (guestinfo)."""
    migration_policy: MigrationPolicy = MigrationPolicy.MANUAL
    """What happens when the placement stops matching (drift): manual (default: the VM keeps
    running where it is, PlacementValid False, until the banlieue.io/migrate annotation authorises
    a move), never (it stays), or automatic: the VM and its disks are destroyed and a new VM is
    cloned from the image on the new placement (guest data is lost; a Warning event MigrationDestroysVM says so)."""
    paused: bool | None = None
    """Stop reconciling this VM."""


class ResolvedStorage(ApiModel):
    """How one disk's abstract storage class resolved on the chosen failure domain."""

    name: str = Field(min_length=1)
    """Disk name."""
    storage_class: str | None = None
    """Abstract storage class."""
    datastore: str | None = None
    """Datastore it resolved to."""
    datastore_cluster: str | None = None
    """Datastore cluster it resolved to."""


class ResolvedNetwork(ApiModel):
    """How one interface's abstract network class resolved on the chosen failure domain."""

    name: str = Field(min_length=1)
    """Interface name."""
    network_class: str | None = None
    """Abstract network class."""
    port_group: str | None = None
    """Port group it resolved to."""
    distributed_port_group: str | None = None
    """Distributed port group it resolved to."""


class ScheduledPlacement(ApiModel):
    """The placement the scheduler chose."""

    provider_name: str | None = None
    """Provider (same namespace)."""
    provider_class: str | None = None
    """Provider class (``vsphere``)."""
    failure_domain: str | None = None
    """Failure domain name on that Provider."""
    resolved_storage: list[ResolvedStorage] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Disks resolved to datastores."""
    resolved_networks: list[ResolvedNetwork] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Interfaces resolved to port groups."""
    scheduled_at: Time | None = None
    """When this placement was chosen."""


class VirtualMachineStatus(ApiModel):
    """Observed state of a VirtualMachine."""

    scheduled: ScheduledPlacement | None = None
    """Chosen placement."""
    infrastructure_ref: ContractVersionedObjectReference | None = None
    """The infrastructure object realising this VM (a VSphereMachine of the same name)."""
    initialization: Initialization | None = None
    """Mirrored from the infrastructure object."""
    addresses: list[MachineAddress] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Addresses reported by the guest."""
    observed_power_state: PowerState | None = None
    """Power state observed on the backend."""
    provider_id: str | None = Field(default=None, alias="providerID")
    """Backend identifier (``vsphere://<BIOS UUID>``)."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready, Scheduled, PlacementValid, InfrastructureReady, Migrating, Paused."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class VirtualMachine(KubeObject):
    """VirtualMachine is one declarative virtual machine, scheduled onto a Provider's failure domain."""

    api_version: str = API_VERSION
    kind: str = "VirtualMachine"
    spec: VirtualMachineSpec
    status: VirtualMachineStatus | None = None


class VirtualMachineList(ApiModel):
    """A list of VirtualMachines."""

    api_version: str = API_VERSION
    kind: str = "VirtualMachineList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VirtualMachine] = Field(default_factory=list)
