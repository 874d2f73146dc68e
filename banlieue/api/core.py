"""banlieue.io/v1alpha1: Provider, VMClass, VMImage, VirtualMachine (SPEC §2).

Docstrings and field docstrings become the CRD descriptions that ``kubectl explain`` shows.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field

from banlieue.api.meta import (
    IMMUTABLE,
    LIST_ATOMIC,
    LIST_SET,
    ApiModel,
    Condition,
    ContractVersionedObjectReference,
    Initialization,
    KubeObject,
    LabelSelector,
    ListMeta,
    LocalObjectReference,
    MachineAddress,
    Time,
    list_map,
)

GROUP = "banlieue.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

VIRTUAL_MACHINE_FINALIZER = "banlieue.io/virtualmachine"
"""Finalizer the controller puts on every VirtualMachine (SPEC §2)."""
MIGRATE_ANNOTATION = "banlieue.io/migrate"
"""Annotation whose value ``"true"`` authorises a manual migration; cleared after it happens."""
OWNED_BY_LABEL = "banlieue.io/owned-by"
"""Label on a VSphereMachine naming the VirtualMachine that owns it."""
PROVIDER_LABEL = "banlieue.io/provider"
"""Label on a VSphereMachine naming the Provider it was placed on."""

_CONDITIONS = list_map("type")
MAX_DISKS = 60
"""vSphere 8 limit of virtual disks per VM (4 PVSCSI controllers x 15); also bounds CEL cost."""
MAX_NICS = 10
"""vSphere limit of virtual NICs per VM; also bounds CEL cost."""
_BY_NAME = list_map("name")


class ProviderConditionReason:
    """Reasons of the Provider ``Ready`` and ``ProviderReachable`` conditions (SPEC §2)."""

    RECONCILED = "Reconciled"
    SECRET_MISSING = "SecretMissing"
    SECRET_INVALID = "SecretInvalid"
    CONNECT_FAILED = "ConnectFailed"
    TLS_VERIFY_FAILED = "TLSVerifyFailed"
    INVENTORY_FAILED = "InventoryFailed"
    PAUSED = "Paused"


PROVIDER_REACHABLE = "ProviderReachable"


class VirtualMachineConditionType:
    """Condition types of a VirtualMachine (SPEC §2)."""

    READY = "Ready"
    SCHEDULED = "Scheduled"
    PLACEMENT_VALID = "PlacementValid"
    INFRASTRUCTURE_READY = "InfrastructureReady"
    MIGRATING = "Migrating"
    PAUSED = "Paused"


class VirtualMachineReason:
    """Reasons used on VirtualMachine conditions (SPEC §4)."""

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


# ---------------------------------------------------------------------------------------------
# Provider


class KeyReference(ApiModel):
    """A key of a ConfigMap or Secret in the Provider's namespace."""

    name: str = Field(min_length=1)
    """Name of the ConfigMap or Secret."""
    key: str = Field(default="ca.crt", min_length=1)
    """Key holding the PEM bundle."""


class CABundle(ApiModel):
    """PEM CA bundle used to verify the endpoint's TLS certificate; exactly one source is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.inline), has(self.configMapRef), has(self.secretRef)]"
                    ".filter(x, x).size() == 1",
                    "message": "exactly one of inline, configMapRef or secretRef must be set",
                }
            ]
        }
    )

    inline: str | None = Field(default=None, min_length=1)
    """PEM-encoded certificates, inline."""
    config_map_ref: KeyReference | None = None
    """A ConfigMap key holding the PEM bundle (key defaults to ca.crt)."""
    secret_ref: KeyReference | None = None
    """A Secret key holding the PEM bundle (key defaults to ca.crt)."""


class ProviderConnection(ApiModel):
    """How to reach and authenticate to the backend (vCenter)."""

    endpoint: str = Field(min_length=1)
    """vCenter address: a host, host:port, or https URL (``/sdk`` is implied)."""
    credentials_ref: LocalObjectReference
    """Secret in the Provider's namespace with keys ``username`` and ``password``."""
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecureSkipTLSVerify")
    """Skip TLS certificate verification (development only)."""
    ca_bundle: CABundle | None = None
    """CA bundle to verify the endpoint; the system trust store when absent."""


class StorageTarget(ApiModel):
    """The vSphere object a storage class maps to; exactly one is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.datastore) != has(self.datastoreCluster)",
                    "message": "exactly one of datastore or datastoreCluster must be set",
                }
            ]
        }
    )

    datastore: str | None = Field(default=None, min_length=1)
    """Datastore name."""
    datastore_cluster: str | None = Field(default=None, min_length=1)
    """Datastore cluster (storage pod) name."""


class StorageClassMapping(ApiModel):
    """An abstract storage class offered by this Provider."""

    name: str = Field(min_length=1)
    """Abstract storage class name used by VMClass disks."""
    target: StorageTarget
    """The datastore or datastore cluster it maps to."""


class NetworkTarget(ApiModel):
    """The vSphere network a network class maps to; exactly one is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.portGroup) != has(self.distributedPortGroup)",
                    "message": "exactly one of portGroup or distributedPortGroup must be set",
                }
            ]
        }
    )

    port_group: str | None = Field(default=None, min_length=1)
    """Standard port group name."""
    distributed_port_group: str | None = Field(default=None, min_length=1)
    """Distributed port group name."""


class NetworkClassMapping(ApiModel):
    """An abstract network class offered by this Provider."""

    name: str = Field(min_length=1)
    """Abstract network class name used by VMClass interfaces."""
    target: NetworkTarget
    """The port group it maps to."""


class ProviderCapabilities(ApiModel):
    """What this Provider offers: abstract storage and network classes, and features."""

    storage_classes: list[StorageClassMapping] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Storage classes, by name."""
    network_classes: list[NetworkClassMapping] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Network classes, by name."""
    features: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Features the operator declares (detected features are reported per failure domain)."""


class ProviderSpec(ApiModel):
    """Desired state of a Provider: one backend instance (one vCenter)."""

    provider_class_ref: LocalObjectReference = Field(json_schema_extra=IMMUTABLE)
    """The provider class implementing this backend (``vsphere``); immutable."""
    connection: ProviderConnection
    """Endpoint, credentials and TLS settings."""
    capabilities: ProviderCapabilities | None = None
    """Storage and network classes and features offered."""
    paused: bool | None = None
    """Stop reconciling this Provider (its status keeps the last known failure domains)."""


class FailureDomainCapacity(ApiModel):
    """Free capacity of a failure domain."""

    cpu_mhz: int | None = Field(default=None, ge=0, alias="cpuMHz")
    """Free CPU, MHz."""
    memory_mib: int | None = Field(default=None, ge=0, alias="memoryMiB")
    """Free memory, MiB."""
    storage_gib: int | None = Field(default=None, ge=0, alias="storageGiB")
    """Free storage, GiB."""


class FailureDomainRaw(ApiModel):
    """Backend placement of a failure domain."""

    datacenter: str | None = None
    """vSphere datacenter name."""
    cluster: str | None = None
    """vSphere compute cluster name."""


class ProviderFailureDomainAttributes(ApiModel):
    """What a failure domain offers."""

    available_storage_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Storage classes verified reachable from this failure domain."""
    available_network_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Network classes verified present in this failure domain."""
    features: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Features detected in this failure domain."""
    capacity: FailureDomainCapacity | None = None
    """Free capacity."""
    raw: FailureDomainRaw | None = None
    """Backend placement (datacenter, cluster)."""


class ProviderFailureDomain(ApiModel):
    """One failure domain of a Provider: a (datacenter, compute cluster) pair."""

    name: str = Field(min_length=1, max_length=63)
    """slug(<provider>-<datacenter>-<cluster>)."""
    labels: dict[str, str] | None = None
    """Topology labels (``dc``, ``cluster``) used by selectors and anti-affinity."""
    attributes: ProviderFailureDomainAttributes | None = None
    """Classes, features, capacity and raw placement."""


class ProviderStatus(ApiModel):
    """Observed state of a Provider."""

    failure_domains: list[ProviderFailureDomain] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Failure domains discovered on the backend; kept on transient errors."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready and ProviderReachable."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class Provider(KubeObject):
    """Provider is one backend instance (one vCenter) that VirtualMachines can be placed on."""

    api_version: str = API_VERSION
    kind: str = "Provider"
    spec: ProviderSpec
    """Desired state."""
    status: ProviderStatus | None = None
    """Observed state."""


class ProviderList(ApiModel):
    """A list of Providers."""

    api_version: str = API_VERSION
    kind: str = "ProviderList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[Provider] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# VMClass


class DiskProvisioning(StrEnum):
    """Virtual disk provisioning type."""

    THIN = "thin"
    THICK = "thick"
    EAGER_ZEROED = "eagerZeroed"


class Firmware(StrEnum):
    """Virtual machine firmware."""

    BIOS = "bios"
    EFI = "efi"
    EFI_SECURE = "efi-secure"


class IPAMSource(StrEnum):
    """Where an interface's addresses come from."""

    DHCP = "dhcp"
    STATIC = "static"


class ClassDisk(ApiModel):
    """A disk of a VMClass; the first one is the OS disk grown from the image."""

    name: str = Field(min_length=1)
    """Disk name, unique in the class."""
    size_gib: int = Field(ge=1, alias="sizeGiB")
    """Size, GiB."""
    storage_class: str = Field(min_length=1)
    """Abstract storage class resolved through the chosen Provider's capabilities."""
    provisioning: DiskProvisioning = DiskProvisioning.THIN
    """thin, thick or eagerZeroed."""


class Hardware(ApiModel):
    """Virtual hardware of a VMClass."""

    cpus: int = Field(ge=1)
    """Virtual CPUs."""
    memory_mib: int = Field(ge=1, alias="memoryMiB")
    """Memory, MiB."""
    disks: list[ClassDisk] | None = Field(default=None, max_length=MAX_DISKS, json_schema_extra=_BY_NAME)
    """Disks; the first is the OS disk (at most 60, vSphere's per-VM limit)."""


class StaticIPConfig(ApiModel):
    """Static addressing of an interface."""

    addresses: list[str] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Addresses in CIDR notation (``10.0.0.5/24``, ``fd00::5/64``)."""
    gateway4: str | None = None
    """IPv4 default gateway."""
    gateway6: str | None = None
    """IPv6 default gateway."""
    nameservers: list[str] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """DNS servers."""


class IPAM(ApiModel):
    """Addressing of an interface."""

    source: IPAMSource = IPAMSource.DHCP
    """dhcp or static."""
    static: StaticIPConfig | None = None
    """Static configuration, used when source is static."""


class ClassInterface(ApiModel):
    """A network interface of a VMClass."""

    name: str = Field(min_length=1)
    """Interface name, unique in the class."""
    network_class: str = Field(min_length=1)
    """Abstract network class resolved through the chosen Provider's capabilities."""
    ipam: IPAM | None = None
    """Addressing (DHCP when absent)."""
    mtu: int | None = Field(default=None, ge=68, le=65535)
    """MTU, bytes."""


class ClassNetwork(ApiModel):
    """Network interfaces of a VMClass."""

    interfaces: list[ClassInterface] | None = Field(default=None, max_length=MAX_NICS, json_schema_extra=_BY_NAME)
    """Interfaces, by name (at most 10, vSphere's per-VM limit)."""


class VMClassSpec(ApiModel):
    """The shape of a virtual machine."""

    hardware: Hardware
    """CPUs, memory and disks."""
    network: ClassNetwork | None = None
    """Network interfaces."""
    firmware: Firmware = Firmware.EFI
    """bios, efi or efi-secure."""
    features: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Features the failure domain must offer."""


class VMClass(KubeObject):
    """VMClass is a cluster-scoped virtual machine shape: hardware, network interfaces, firmware."""

    api_version: str = API_VERSION
    kind: str = "VMClass"
    spec: VMClassSpec
    """Desired shape."""


class VMClassList(ApiModel):
    """A list of VMClasses."""

    api_version: str = API_VERSION
    kind: str = "VMClassList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VMClass] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# VMImage


class Architecture(StrEnum):
    """CPU architecture (CAPI NodeInfo names)."""

    AMD64 = "amd64"
    ARM64 = "arm64"


class GuestAgent(StrEnum):
    """How the guest consumes user data."""

    CLOUD_INIT = "cloud-init"
    IGNITION = "ignition"
    NONE = "none"


class ImageReason:
    """Reasons on VMImage ``status.perProvider[].reason``."""

    RECONCILED = "Reconciled"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    SECRET_UNAVAILABLE = "SecretUnavailable"
    CONNECT_FAILED = "ConnectFailed"
    LOOKUP_FAILED = "LookupFailed"


class ImageSource(ApiModel):
    """Where the image lives for one provider class."""

    provider_class: str = Field(min_length=1)
    """Provider class this source applies to (``vsphere``)."""
    kind: Literal["Template"] = "Template"
    """Source kind: Template (a VM template, by name)."""
    ref: str = Field(min_length=1)
    """Template name (or inventory path)."""


class VMImageSpec(ApiModel):
    """An operating system image and where each provider class finds it."""

    os_family: str | None = None
    """OS family (``linux``, ``windows``)."""
    os_distribution: str | None = None
    """Distribution (``ubuntu``)."""
    os_version: str | None = None
    """Version (``22.04``)."""
    architecture: Architecture = Architecture.AMD64
    """amd64 or arm64."""
    guest_agent: GuestAgent = GuestAgent.CLOUD_INIT
    """cloud-init, ignition or none."""
    sources: list[ImageSource] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Sources per provider class."""


class ImageProviderStatus(ApiModel):
    """Whether the image resolves on one Provider."""

    provider_name: str = Field(min_length=1)
    """Provider name."""
    provider_namespace: str = Field(min_length=1)
    """Provider namespace."""
    ready: bool = False
    """Whether the image was found on that Provider."""
    resolved_ref: str | None = None
    """Backend reference of the template found (managed object id)."""
    reason: str | None = None
    """Reconciled, TemplateNotFound, SecretUnavailable, ConnectFailed or LookupFailed."""
    message: str | None = None
    """Human-readable detail."""


class VMImageStatus(ApiModel):
    """Observed state of a VMImage."""

    per_provider: list[ImageProviderStatus] | None = Field(
        default=None, json_schema_extra=list_map("providerNamespace", "providerName")
    )
    """Resolution per Provider."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class VMImage(KubeObject):
    """VMImage is a cluster-scoped operating system image, resolved on every Provider."""

    api_version: str = API_VERSION
    kind: str = "VMImage"
    spec: VMImageSpec
    """Desired state."""
    status: VMImageStatus | None = None
    """Observed state."""


class VMImageList(ApiModel):
    """A list of VMImages."""

    api_version: str = API_VERSION
    kind: str = "VMImageList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VMImage] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# VirtualMachine


class PowerState(StrEnum):
    """Virtual machine power state (vSphere names)."""

    POWERED_ON = "PoweredOn"
    POWERED_OFF = "PoweredOff"
    SUSPENDED = "Suspended"


class MigrationPolicy(StrEnum):
    """What to do when the current placement becomes invalid (drift)."""

    AUTOMATIC = "automatic"
    MANUAL = "manual"
    NEVER = "never"


class AntiAffinityMode(StrEnum):
    """Whether an anti-affinity term is a hard or soft constraint."""

    REQUIRED = "required"
    PREFERRED = "preferred"


class AntiAffinityTerm(ApiModel):
    """Keep this VM apart from the VMs selected by ``labelSelector`` across ``topologyKey``."""

    topology_key: str = Field(min_length=1)
    """Failure-domain label whose value must differ (``dc``, ``cluster``)."""
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
    migration_policy: MigrationPolicy = MigrationPolicy.AUTOMATIC
    """automatic (recreate elsewhere), manual (wait for the banlieue.io/migrate annotation) or never."""
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
    """Desired state."""
    status: VirtualMachineStatus | None = None
    """Observed state."""


class VirtualMachineList(ApiModel):
    """A list of VirtualMachines."""

    api_version: str = API_VERSION
    kind: str = "VirtualMachineList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VirtualMachine] = Field(default_factory=list)
