"""infrastructure.banlieue.io/v1alpha1: the CAPI v1beta2 infrastructure kinds (SPEC §3).

VSphereMachine is an InfraMachine, VSphereCluster an InfraCluster, and the two templates are
InfraMachineTemplate / InfraClusterTemplate (CAPI contract rules, contract version v1beta2).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, JsonValue

from banlieue.api.groups import INFRA_GROUP
from banlieue.api.groups import VERSION as VERSION
from banlieue.api.meta import (
    LIST_ATOMIC,
    LIST_SET,
    APIEndpoint,
    ApiModel,
    Condition,
    FailureDomain,
    Initialization,
    KubeObject,
    LabelSelector,
    ListMeta,
    LocalObjectReference,
    MachineAddress,
    Quantity,
    TemplateObjectMeta,
    UncheckedIPAddress,
    UncheckedIPPrefix,
    UncheckedIPv4Gateway,
    UncheckedIPv6Gateway,
    interface_ip_rules,
    list_map,
    one_default_gateway_rules,
)
from banlieue.api.provider import ProviderConditionReason
from banlieue.api.virtualmachine import PowerState
from banlieue.api.vmclass import (
    DEVICE_NAME_SCHEMA,
    MAX_ADDRESSES,
    MAX_CPUS,
    MAX_DISK_GIB,
    MAX_DISKS,
    MAX_NICS,
    MEMORY_MIB_SCHEMA,
    DiskProvisioning,
    Firmware,
)

GROUP = INFRA_GROUP
API_VERSION = f"{GROUP}/{VERSION}"

VSPHERE_MACHINE_FINALIZER = "infrastructure.banlieue.io/vspheremachine"
"""Finalizer the vSphere provider puts on every VSphereMachine (SPEC §3)."""
DEFAULT_GUEST_SOFT_POWER_OFF_TIMEOUT_SECONDS = 300
"""Used when ``guestSoftPowerOffTimeoutSeconds`` is unset (CAPV's default: 5 minutes)."""
BOOTSTRAP_DATA_DEFAULT_KEY = "value"
"""Key of a CAPI bootstrap data Secret holding the data (CAPI bootstrap contract)."""

_CONDITIONS = list_map("type")
_BY_NAME = list_map("name")
MAC_ADDRESS_SCHEMA: dict[str, JsonValue] = {
    "maxLength": 17,
    "x-kubernetes-validations": [
        {"rule": "self.matches('^[0-9A-Fa-f][02468ACEace](:[0-9A-Fa-f]{2}){5}$')",
         "message": "must be a unicast MAC address: 6 octets of 2 hex digits separated by colons, the first octet even "
                    "(e.g. 00:50:56:00:00:01)"},
        {"rule": "!self.startsWith('00:50:56:') || self.matches('^00:50:56:[0-3]')",
         "message": "a MAC in VMware's prefix 00:50:56 must be in its manual range 00:50:56:00:00:00-00:50:56:3F:FF:FF "
                    "(vCenter assigns the rest itself and refuses them as manual MACs)"},
    ],
}
"""The CRD schema of a NIC's fixed MAC (issue F5). Unicast: the least significant bit of the first
octet is 0 (IEEE 802, "I/G bit"); a guest cannot use a multicast MAC as its own. VMware's manual
range: vSphere Networking, "Setting a Static MAC Address" (``macs.py``, ADR 0014). Schema only, not
enforced when banlieue parses (one stored before the rule is still read)."""


class VSphereMachineReason:
    """Reasons of the VSphereMachine ``Ready`` condition: SPEC §3's, the Provider connection
    reasons of SPEC §2 it borrows, then the ones banlieue chose where the SPEC names none
    (``NotPaused`` is the reason of the ``Paused`` condition when False). Operators:
    docs/operations.md."""

    WAITING_FOR_BOOTSTRAP_DATA = "WaitingForBootstrapData"
    WAITING_FOR_CLUSTER_INFRASTRUCTURE = "WaitingForClusterInfrastructure"
    CLONING = "Cloning"
    POWERING_ON = "PoweringOn"
    WAITING_FOR_IP_ADDRESS = "WaitingForIPAddress"
    PROVISIONED = "Provisioned"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    INVALID_SPEC = "InvalidSpec"
    CLONE_FAILED = "CloneFailed"
    DELETING = "Deleting"
    PAUSED = "Paused"
    # Borrowed from the Provider (SPEC §2): the machine's Provider cannot be reached.
    SECRET_MISSING = ProviderConditionReason.SECRET_MISSING
    SECRET_INVALID = ProviderConditionReason.SECRET_INVALID
    CONNECT_FAILED = ProviderConditionReason.CONNECT_FAILED
    TLS_VERIFY_FAILED = ProviderConditionReason.TLS_VERIFY_FAILED
    VCENTER_IDENTITY_CHANGED = ProviderConditionReason.VCENTER_IDENTITY_CHANGED
    DUPLICATE_VCENTER = ProviderConditionReason.DUPLICATE_VCENTER
    # Not named by the SPEC (banlieue's choice).
    WAITING_FOR_OWNER = "WaitingForOwner"
    WAITING_FOR_CLUSTER = "WaitingForCluster"
    WAITING_FOR_CLUSTER_API = "WaitingForClusterAPI"
    PROVIDER_NOT_FOUND = "ProviderNotFound"
    PROVIDER_DELETING = "ProviderDeleting"
    FAILURE_DOMAIN_NOT_FOUND = "FailureDomainNotFound"
    VM_NOT_FOUND = "VMNotFound"
    VM_NAME_IN_USE = "VMNameInUse"
    MAC_ADDRESS_CONFLICT = "MacAddressConflict"
    """A NIC's ``macAddress`` is another VM's of the vCenter (or given to two NICs), or vCenter
    refused a clone for a MAC in use (ADR 0014)."""
    POWERING_OFF = "PoweringOff"
    NOT_PAUSED = "NotPaused"
    WAITING_FOR_BIOS_UUID = "WaitingForBIOSUUID"
    BIOS_UUID_CHANGED = "BIOSUUIDChanged"  # reason of the ProviderIDMatchesVM condition when False
    # Reasons of the HardwareChangePending condition (ADR 0012).
    HARDWARE_IN_SPEC = "HardwareInSpec"
    WAITING_FOR_POWER_OFF = "WaitingForPowerOff"
    DISK_REMOVED_FROM_SPEC = "DiskRemovedFromSpec"
    NIC_REMOVED_FROM_SPEC = "NicRemovedFromSpec"
    DISK_SHRINK_REFUSED = "DiskShrinkRefused"
    FIRMWARE_CHANGE_REFUSED = "FirmwareChangeRefused"
    """The spec's firmware (bios <-> efi) differs from a provisioned VM's: never applied (issue 19)."""
    PROVISIONING_CHANGE_REFUSED = "ProvisioningChangeRefused"
    """The spec's provisioning of an existing disk differs from the disk's: never applied (issue 19)."""
    CHANGE_FAILED = "ChangeFailed"
    # Reasons of the VMUnique condition (ADR 0012 decision 9).
    DUPLICATE_VM = "DuplicateVM"
    UNIQUE = "Unique"


class VSphereClusterReason:
    """Reasons of the VSphereCluster ``Ready`` and ``Paused`` conditions (the SPEC names none;
    banlieue's choice, CAPI-style). Operators: docs/operations.md."""

    READY = "Ready"
    PROVIDER_NOT_FOUND = "ProviderNotFound"
    NO_FAILURE_DOMAINS = "NoFailureDomains"
    PAUSED = "Paused"
    NOT_PAUSED = "NotPaused"
    DELETING = "Deleting"


class CloneMode(StrEnum):
    """How the template is cloned."""

    FULL_CLONE = "fullClone"
    LINKED_CLONE = "linkedClone"


class PowerOffMode(StrEnum):
    """How the VM is powered off before deletion (CAPV names)."""

    HARD = "hard"
    SOFT = "soft"
    TRY_SOFT = "trySoft"


class MachineDisk(ApiModel):
    """A disk of a VSphereMachine; the first is the OS disk grown from the template."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.datastore) && has(self.storageClass))",
                    "message": "at most one of datastore or storageClass may be set",
                }
            ]
        }
    )

    name: str = Field(min_length=1, json_schema_extra=DEVICE_NAME_SCHEMA)
    """Disk name, unique in the machine (a DNS label: lower case letters, digits, ``-``)."""
    size_gib: int = Field(ge=1, alias="sizeGiB", json_schema_extra={"maximum": MAX_DISK_GIB})
    """Size, GiB."""
    provisioning: DiskProvisioning = DiskProvisioning.THIN
    """thin, thick or eagerZeroed."""
    datastore: str | None = Field(default=None, min_length=1)
    """Concrete datastore (standalone path)."""
    storage_class: str | None = Field(default=None, min_length=1)
    """Abstract storage class, resolved through the failure domain's Provider."""


class NetworkDevice(ApiModel):
    """A network interface of a VSphereMachine."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.portGroup) != has(self.networkClass)",
                    "message": "exactly one of portGroup or networkClass must be set",
                },
                *interface_ip_rules({4: "(has(self.dhcp4) ? self.dhcp4 : (!has(self.addresses) || size(self.addresses) == 0))"},
                                    "; dhcp4 is not true"),
            ]
        }
    )

    name: str = Field(min_length=1, json_schema_extra=DEVICE_NAME_SCHEMA)
    """Interface name, unique in the machine (a DNS label: lower case letters, digits, ``-``)."""
    port_group: str | None = Field(default=None, min_length=1)
    """Concrete port group (standalone path)."""
    network_class: str | None = Field(default=None, min_length=1)
    """Abstract network class, resolved through the failure domain's Provider."""
    mac_address: str | None = Field(default=None, json_schema_extra=MAC_ADDRESS_SCHEMA)
    """Fixed MAC address (``00:50:56:00:00:01``: 6 octets, unicast; in VMware's prefix
    ``00:50:56`` only its manual range ``00:50:56:00:00:00``-``00:50:56:3F:FF:FF``); chosen by
    banlieue when absent (ADR 0014). A MAC another VM of the vCenter has refuses the clone
    (``MacAddressConflict``)."""
    dhcp4: bool | None = None
    """Use DHCP for IPv4."""
    dhcp6: bool | None = None
    """Use DHCP for IPv6."""
    addresses: list[UncheckedIPPrefix] | None = Field(default=None, json_schema_extra={**LIST_ATOMIC, "maxItems": MAX_ADDRESSES})
    """Static addresses with their prefix length (``10.0.0.5/24``, ``fd00::5/64``): unicast host
    addresses, not the network's network or broadcast address (CRD rules only)."""
    gateway4: UncheckedIPv4Gateway | None = None
    """IPv4 default gateway: a unicast IPv4 address in one of the device's IPv4 networks; needs an
    IPv4 address or DHCPv4 (CRD rules only, ``meta.interface_ip_rules``)."""
    gateway6: UncheckedIPv6Gateway | None = None
    """IPv6 default gateway: a unicast IPv6 address in one of the device's IPv6 networks, or link-local."""
    nameservers: list[UncheckedIPAddress] | None = Field(default=None, json_schema_extra={**LIST_ATOMIC, "maxItems": MAX_ADDRESSES})
    """DNS servers: IP addresses, as a VirtualMachine's (CRD rules only; netplan refuses the
    guest's whole network configuration for a name server that is not an address)."""


class MachineNetwork(ApiModel):
    """Network interfaces of a VSphereMachine: at most one device has a gateway4 and one a
    gateway6 (``meta.one_default_gateway_rules``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": one_default_gateway_rules(
        "devices", "has({i}.gateway{family})", MAX_NICS)})

    devices: list[NetworkDevice] | None = Field(default=None, max_length=MAX_NICS, json_schema_extra=_BY_NAME)
    """Devices, by name."""


class SecretKeyReference(ApiModel):
    """A key of a Secret in the same namespace."""

    name: str = Field(min_length=1)
    """Secret name."""
    key: str = Field(default=BOOTSTRAP_DATA_DEFAULT_KEY, min_length=1)
    """Key holding the data."""


class VSphereMachineSpec(ApiModel):
    """Desired state of a VSphereMachine (CAPI v1beta2 InfraMachine)."""

    provider_id: str | None = Field(default=None, alias="providerID", min_length=1, max_length=512)
    """Set by the provider: ``vsphere://<BIOS UUID>`` (CAPI contract: spec.providerID)."""
    failure_domain: str | None = None
    """Failure domain (CAPI contract); when set, provider, datacenter and cluster come from it."""
    provider_ref: LocalObjectReference | None = None
    """Provider (same namespace) to realise the machine on."""
    datacenter: str | None = None
    """vSphere datacenter."""
    cluster: str | None = None
    """vSphere compute cluster."""
    resource_pool: str | None = None
    """Resource pool; the cluster's root pool when absent."""
    folder: str | None = None
    """VM folder; the datacenter's VM folder when absent."""
    template: str | None = None
    """Template to clone."""
    clone_mode: CloneMode = CloneMode.FULL_CLONE
    """fullClone (default: disks can be grown to sizeGiB) or linkedClone (needs a template snapshot; disks cannot grow; CAPV's default)."""
    num_cpus: int | None = Field(default=None, ge=1, alias="numCPUs", json_schema_extra={"maximum": MAX_CPUS})
    """Virtual CPUs."""
    num_cores_per_socket: int | None = Field(default=None, ge=1)
    """Cores per socket."""
    memory_mib: int | None = Field(default=None, ge=1, alias="memoryMiB", json_schema_extra=MEMORY_MIB_SCHEMA)
    """Memory, MiB (a multiple of 4: vSphere's rule)."""
    firmware: Firmware | None = None
    """bios, efi or efi-secure; the template's when absent."""
    power_state: PowerState = PowerState.POWERED_ON
    """Desired power state."""
    disks: list[MachineDisk] | None = Field(default=None, max_length=MAX_DISKS, json_schema_extra=_BY_NAME)
    """Disks; the first is the OS disk."""
    network: MachineNetwork | None = None
    """Network devices."""
    bootstrap_data_secret_ref: SecretKeyReference | None = None
    """Bootstrap data for the standalone path (CAPI machines use Machine.spec.bootstrap.dataSecretName)."""
    power_off_mode: PowerOffMode = PowerOffMode.TRY_SOFT
    """hard, soft or trySoft."""
    guest_soft_power_off_timeout_seconds: int | None = Field(default=None, ge=1)
    """Seconds to wait for a guest shutdown before a hard power off (300 when absent)."""


class VSphereMachineStatus(ApiModel):
    """Observed state of a VSphereMachine."""

    initialization: Initialization | None = None
    """CAPI contract: provisioned once the VM exists, is powered on and has a providerID."""
    addresses: list[MachineAddress] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Addresses reported by VMware Tools (CAPI contract)."""
    failure_domain: str | None = Field(default=None, min_length=1, max_length=256)
    """Failure domain the machine was realised in (CAPI contract: status.failureDomain)."""
    instance_uuid: str | None = Field(default=None, alias="instanceUUID")
    """vSphere instance UUID."""
    bios_uuid: str | None = Field(default=None, alias="biosUUID")
    """vSphere BIOS UUID."""
    vm_ref: str | None = None
    """Managed object id of the VM (``vm-123``)."""
    power_state: PowerState | None = None
    """Observed power state."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready and Paused."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class VSphereMachine(KubeObject):
    """VSphereMachine is a virtual machine on vSphere (CAPI v1beta2 InfraMachine)."""

    api_version: str = API_VERSION
    kind: str = "VSphereMachine"
    spec: VSphereMachineSpec = Field(default_factory=VSphereMachineSpec)
    status: VSphereMachineStatus | None = None


class VSphereMachineList(ApiModel):
    """A list of VSphereMachines."""

    api_version: str = API_VERSION
    kind: str = "VSphereMachineList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VSphereMachine] = Field(default_factory=list)


TEMPLATE_STATIC_ADDRESSES_MESSAGE = (
    "static addresses cannot be set in a template: every VSphereMachine made from it (each Machine of a "
    "MachineDeployment or control plane) would get the same ones; use dhcp4/dhcp6 on the device, or create each "
    "VSphereMachine with its own addresses")
TEMPLATE_STATIC_ADDRESSES_RULE: dict[str, JsonValue] = {
    "rule": "!has(self.spec.network) || !has(self.spec.network.devices) || "
            "self.spec.network.devices.all(d, !has(d.addresses) || size(d.addresses) == 0)",
    "fieldPath": ".spec.network.devices",
    "reason": "FieldValueForbidden",
    "message": TEMPLATE_STATIC_ADDRESSES_MESSAGE,
}
"""The CRD rule of a VSphereMachineTemplate's ``spec.template``: no device has static ``addresses``
(a 422 Forbidden at ``spec.template.spec.network.devices``). A template is copied to every machine
made from it, so one address would be held by several VMs. Source: CAPV's VSphereMachineTemplate
webhook refuses ``network.devices[].ipAddrs`` in a template ("cannot be set in templates"; a
templated machine's addresses come from DHCP or IPAM pools). A VSphereMachine created on its own
keeps ``addresses``."""

TEMPLATE_MAC_ADDRESS_MESSAGE = (
    "a MAC address cannot be set in a template: every VSphereMachine made from it would get the same one, and "
    "every clone after the first would fail MacAddressConflict; leave macAddress unset (banlieue chooses one per VM), "
    "or create each VSphereMachine with its own")
TEMPLATE_MAC_ADDRESS_RULE: dict[str, JsonValue] = {
    "rule": "!has(self.spec.network) || !has(self.spec.network.devices) || "
            "self.spec.network.devices.all(d, !has(d.macAddress))",
    "fieldPath": ".spec.network.devices",
    "reason": "FieldValueForbidden",
    "message": TEMPLATE_MAC_ADDRESS_MESSAGE,
}
"""The CRD rule of a VSphereMachineTemplate's ``spec.template``: no device has a ``macAddress``
(422 Forbidden at ``spec.template.spec.network.devices``), for the reason of
``TEMPLATE_STATIC_ADDRESSES_RULE``: a template is copied to every machine made from it, and vCenter
refuses a clone whose manual MAC another VM has (``macs``, ``MacAddressConflict``)."""


class VSphereMachineTemplateResource(ApiModel):
    """What a VSphereMachine made from the template looks like. Its network devices have no static
    addresses and no MAC address: every machine made from the template would get the same ones
    (as in CAPV, whose template webhook refuses ipAddrs); use DHCP and let banlieue choose MACs,
    or create each VSphereMachine on its own."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [TEMPLATE_STATIC_ADDRESSES_RULE,
                                                                               TEMPLATE_MAC_ADDRESS_RULE]})

    metadata: TemplateObjectMeta | None = None
    """Labels and annotations for the created machines."""
    spec: VSphereMachineSpec
    """Spec of the created machines."""


class VSphereMachineTemplateSpec(ApiModel):
    """Desired state of a VSphereMachineTemplate."""

    template: VSphereMachineTemplateResource
    """The machine template (CAPI contract: spec.template.spec)."""


class NodeArchitecture(StrEnum):
    """CAPI v1beta2 NodeInfo architecture."""

    AMD64 = "amd64"
    ARM64 = "arm64"
    S390X = "s390x"
    PPC64LE = "ppc64le"


class NodeOperatingSystem(StrEnum):
    """CAPI v1beta2 NodeInfo operating system."""

    LINUX = "linux"
    WINDOWS = "windows"


class NodeInfo(ApiModel):
    """Node information for autoscaling from zero (CAPI v1beta2 InfraMachineTemplate)."""

    architecture: NodeArchitecture | None = None
    """CPU architecture of the nodes."""
    operating_system: NodeOperatingSystem | None = None
    """Operating system of the nodes."""


class VSphereMachineTemplateStatus(ApiModel):
    """Observed state of a VSphereMachineTemplate (scale from zero)."""

    capacity: dict[str, Quantity] | None = None
    """Resources of one machine (``cpu``, ``memory``) as resource quantities."""
    node_info: NodeInfo | None = None
    """Architecture and operating system of the nodes."""


class VSphereMachineTemplate(KubeObject):
    """VSphereMachineTemplate is a template for VSphereMachines (CAPI v1beta2 InfraMachineTemplate)."""

    api_version: str = API_VERSION
    kind: str = "VSphereMachineTemplate"
    spec: VSphereMachineTemplateSpec
    status: VSphereMachineTemplateStatus | None = None


class VSphereMachineTemplateList(ApiModel):
    """A list of VSphereMachineTemplates."""

    api_version: str = API_VERSION
    kind: str = "VSphereMachineTemplateList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VSphereMachineTemplate] = Field(default_factory=list)


class MachineRequirements(ApiModel):
    """Storage and network classes every machine of a VSphereCluster uses (the names of the
    Providers' ``spec.capabilities``): a failure domain is advertised only when it offers all of
    them (``availableStorageClasses`` / ``availableNetworkClasses``)."""

    storage_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Storage classes the machines' disks use."""
    network_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Network classes the machines' network devices use."""


class ExcludedFailureDomain(ApiModel):
    """A failure domain of a selected Provider that is not advertised, and why."""

    name: str
    """Failure domain name."""
    provider: str
    """Provider it belongs to."""
    message: str
    """Why it is not advertised: its Provider takes no new machines (being deleted, or a
    DuplicateVCenter), it offers no network class, or it lacks a class spec.machineRequirements
    names."""


class VSphereClusterSpec(ApiModel):
    """Desired state of a VSphereCluster (CAPI v1beta2 InfraCluster)."""

    control_plane_endpoint: APIEndpoint | None = None
    """Control plane endpoint (CAPI contract: spec.controlPlaneEndpoint)."""
    provider_refs: list[LocalObjectReference] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Providers (same namespace) to take failure domains from; wins over providerSelector when non-empty."""
    provider_selector: LabelSelector | None = None
    """Selects Providers by label when providerRefs is empty."""
    control_plane_failure_domain_selector: LabelSelector | None = None
    """Failure domains (by their labels) marked controlPlane; all when absent."""
    machine_requirements: MachineRequirements | None = None
    """What this cluster's machines need: only failure domains that offer it are advertised (the
    others are listed in ``status.excludedFailureDomains`` with why)."""
    paused: bool | None = None
    """Stop reconciling this cluster."""


class VSphereClusterStatus(ApiModel):
    """Observed state of a VSphereCluster."""

    initialization: Initialization | None = None
    """CAPI contract: provisioned once failure domains are known."""
    control_plane_endpoint: APIEndpoint | None = None
    """Mirror of spec.controlPlaneEndpoint."""
    failure_domains: list[FailureDomain] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Aggregated failure domains of every selected Provider (CAPI contract)."""
    excluded_failure_domains: list[ExcludedFailureDomain] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Failure domains of the selected Providers not advertised because they lack what
    ``spec.machineRequirements`` names, with why."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready and Paused."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class VSphereCluster(KubeObject):
    """VSphereCluster advertises the failure domains of one or more Providers (CAPI v1beta2 InfraCluster)."""

    api_version: str = API_VERSION
    kind: str = "VSphereCluster"
    spec: VSphereClusterSpec = Field(default_factory=VSphereClusterSpec)
    status: VSphereClusterStatus | None = None


class VSphereClusterList(ApiModel):
    """A list of VSphereClusters."""

    api_version: str = API_VERSION
    kind: str = "VSphereClusterList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VSphereCluster] = Field(default_factory=list)


class VSphereClusterTemplateResource(ApiModel):
    """What a VSphereCluster made from the template looks like."""

    metadata: TemplateObjectMeta | None = None
    """Labels and annotations for the created cluster."""
    spec: VSphereClusterSpec
    """Spec of the created cluster."""


class VSphereClusterTemplateSpec(ApiModel):
    """Desired state of a VSphereClusterTemplate."""

    template: VSphereClusterTemplateResource
    """The cluster template (CAPI contract: spec.template.spec)."""


class VSphereClusterTemplate(KubeObject):
    """VSphereClusterTemplate is a template for VSphereClusters (CAPI v1beta2 InfraClusterTemplate)."""

    api_version: str = API_VERSION
    kind: str = "VSphereClusterTemplate"
    spec: VSphereClusterTemplateSpec


class VSphereClusterTemplateList(ApiModel):
    """A list of VSphereClusterTemplates."""

    api_version: str = API_VERSION
    kind: str = "VSphereClusterTemplateList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VSphereClusterTemplate] = Field(default_factory=list)
