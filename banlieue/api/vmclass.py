"""VMClass (banlieue.io/v1alpha1): the cluster-scoped shape of a virtual machine (SPEC §2)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, JsonValue

from banlieue.api.groups import CORE_API_VERSION as API_VERSION
from banlieue.api.meta import (
    LIST_ATOMIC,
    LIST_SET,
    ApiModel,
    IPAddress,
    IPPrefix,
    IPv4Gateway,
    IPv6Gateway,
    KubeObject,
    ListMeta,
    interface_ip_rules,
    list_map,
    one_default_gateway_rules,
)

_BY_NAME = list_map("name")

MAX_DISKS = 60
"""vSphere 8 limit of virtual disks per VM (4 PVSCSI controllers x 15); also bounds CEL cost."""
MAX_NICS = 10
"""vSphere limit of virtual NICs per VM; also bounds CEL cost."""
MAX_ADDRESSES = 16
"""Most static addresses (and name servers) one interface takes; bounds CEL cost (banlieue's choice)."""
MAX_CPUS = 768
"""vSphere 8 configuration maximum of virtual CPUs per VM."""
MAX_MEMORY_MIB = 24 * 1024 * 1024
"""vSphere 8 configuration maximum of memory per VM: 24 TB, in MiB."""
MAX_DISK_GIB = 62 * 1024
"""vSphere configuration maximum of a virtual disk: 62 TB, in GiB."""
DEVICE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A disk or interface name: a DNS label (lower case letters, digits, ``-``; at most 63). The name
is kept in extraConfig keys (``banlieue.disk.<name>``, ``banlieue.nic.<name>``) and in the guest's
network config: characters such keys and configs do not carry safely are refused at admission."""
DEVICE_NAME_SCHEMA: dict[str, JsonValue] = {"maxLength": 63, "pattern": DEVICE_NAME_PATTERN}
"""The CRD schema of a disk or interface name. The limits of this module are in the CRD schema
only (``json_schema_extra``), not enforced when banlieue parses an object: one stored before a
limit existed must still be read, and kept running (ADR 0012)."""
OS_DISK_RULE: dict[str, JsonValue] = {
    "rule": "!has(oldSelf.disks) || !has(self.disks) || size(self.disks) == 0 || size(oldSelf.disks) == 0"
            " || self.disks[0].name == oldSelf.disks[0].name"
            " || (!oldSelf.disks.exists(d, d.name == self.disks[0].name) && !self.disks.exists(d, d.name == oldSelf.disks[0].name))",
    "message": "disks[0] is the OS disk (the image's boot disk): it may be renamed in place, but another existing disk "
               "cannot become the first one nor the OS disk's name move down the list; reorder only the disks after it",
}
"""The first disk is the OS disk (ADR 0012): a transition rule, so only an update is checked."""
DISKS_KEPT_RULE: dict[str, JsonValue] = {
    "rule": "!has(oldSelf.disks) || size(oldSelf.disks) == 0 || (has(self.disks) && size(self.disks) > 0)",
    "fieldPath": ".disks",
    "message": "disks cannot be emptied once set: disks[0] is the OS disk of the class's VMs; keep it listed first "
               "(the other disks may be removed)",
}
"""A class's disks never go from some to none (``[]`` or the field dropped): ``OS_DISK_RULE``
compares the first disks of the old and new lists, so an empty list in between would let a later
edit put another existing disk first, and refuse putting the OS disk back. A transition rule."""

MEMORY_MIB_SCHEMA: dict[str, JsonValue] = {
    "maximum": MAX_MEMORY_MIB,
    "x-kubernetes-validations": [
        {"rule": "self % 4 == 0", "message": "must be a multiple of 4 MiB (vSphere sizes VM memory in multiples of 4 MB)"}
    ],
}
"""The CRD schema of a memory size in MiB: at most 24 TiB, a multiple of 4 (vSphere Virtual
Machine Administration, "Change the Memory Configuration": the memory size must be a multiple of
4 MB; vCenter refuses a reconfigure otherwise, issue F6)."""
IPAM_RULES: list[JsonValue] = [
    {"rule": "!has(self.source) || self.source != 'static' || has(self.static)",
     "message": "source static needs a static block (addresses, gateways, nameservers); without it the interface stays "
                "unconfigured"},
    {"rule": "!has(self.static) || (has(self.source) && self.source == 'static')",
     "message": "a static block is used only with source: static; set source: static or remove the static block"},
]
"""CEL rules of ``IPAM``: ``static`` is given exactly when ``source`` is static (issue F6: one
without the other was accepted and silently left the interface unconfigured or ignored)."""


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

    name: str = Field(min_length=1, json_schema_extra=DEVICE_NAME_SCHEMA)
    """Disk name, unique in the class (a DNS label: lower case letters, digits, ``-``)."""
    size_gib: int = Field(ge=1, alias="sizeGiB", json_schema_extra={"maximum": MAX_DISK_GIB})
    """Size, GiB (at most 63488, vSphere's 62 TB)."""
    storage_class: str = Field(min_length=1)
    """Abstract storage class resolved through the chosen Provider's capabilities."""
    provisioning: DiskProvisioning = DiskProvisioning.THIN
    """thin, thick or eagerZeroed."""


class Hardware(ApiModel):
    """Virtual hardware of a VMClass."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [OS_DISK_RULE, DISKS_KEPT_RULE]})

    cpus: int = Field(ge=1, json_schema_extra={"maximum": MAX_CPUS})
    """Virtual CPUs (at most 768, vSphere's per-VM limit)."""
    memory_mib: int = Field(ge=1, alias="memoryMiB", json_schema_extra=MEMORY_MIB_SCHEMA)
    """Memory, MiB (a multiple of 4, at most 25165824, vSphere's 24 TB per VM)."""
    disks: list[ClassDisk] | None = Field(default=None, max_length=MAX_DISKS, json_schema_extra=_BY_NAME)
    """Disks (at most 60, vSphere's per-VM limit); the first is the OS disk, renamed but never moved, and never emptied once set."""


class StaticIPConfig(ApiModel):
    """Static addressing of an interface: a gateway inside the interface's networks, gateway4
    only with an IPv4 address (CRD rules ``meta.interface_ip_rules``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": interface_ip_rules(
        {4: "false"}, "; source static has no DHCP")})

    addresses: list[IPPrefix] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """Addresses with their prefix length (``10.0.0.5/24``, ``fd00::5/64``; at most 16): unicast
    host addresses, not the network's network or broadcast address."""
    gateway4: IPv4Gateway | None = None
    """IPv4 default gateway (a unicast IPv4 address in one of the interface's IPv4 networks)."""
    gateway6: IPv6Gateway | None = None
    """IPv6 default gateway (a unicast IPv6 address in one of the interface's IPv6 networks, or link-local)."""
    nameservers: list[IPAddress] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """DNS servers (IP addresses; at most 16)."""


class IPAM(ApiModel):
    """Addressing of an interface: ``static`` is given exactly when ``source`` is static (CRD rules
    ``IPAM_RULES``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": IPAM_RULES})

    source: IPAMSource = IPAMSource.DHCP
    """dhcp or static."""
    static: StaticIPConfig | None = None
    """Static configuration; required with source static, refused with dhcp."""


class ClassInterface(ApiModel):
    """A network interface of a VMClass."""

    name: str = Field(min_length=1, json_schema_extra=DEVICE_NAME_SCHEMA)
    """Interface name, unique in the class (a DNS label: lower case letters, digits, ``-``)."""
    network_class: str = Field(min_length=1)
    """Abstract network class resolved through the chosen Provider's capabilities."""
    ipam: IPAM | None = None
    """Addressing (DHCP when absent)."""
    mtu: int | None = Field(default=None, ge=68, le=65535)
    """MTU, bytes."""


class ClassNetwork(ApiModel):
    """Network interfaces of a VMClass: at most one has a gateway4 and one a gateway6 (CRD rules
    ``meta.one_default_gateway_rules``)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": one_default_gateway_rules(
        "interfaces", "has({i}.ipam) && has({i}.ipam.static) && has({i}.ipam.static.gateway{family})", MAX_NICS)})

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


class VMClassList(ApiModel):
    """A list of VMClasses."""

    api_version: str = API_VERSION
    kind: str = "VMClassList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VMClass] = Field(default_factory=list)
