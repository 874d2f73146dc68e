"""VMClass (banlieue.io/v1alpha1): the cluster-scoped shape of a virtual machine (SPEC §2)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from banlieue.api.groups import CORE_API_VERSION as API_VERSION
from banlieue.api.meta import (
    LIST_ATOMIC,
    LIST_SET,
    ApiModel,
    IPAddress,
    IPPrefix,
    IPv4Address,
    IPv6Address,
    KubeObject,
    ListMeta,
    list_map,
)

_BY_NAME = list_map("name")

MAX_DISKS = 60
"""vSphere 8 limit of virtual disks per VM (4 PVSCSI controllers x 15); also bounds CEL cost."""
MAX_NICS = 10
"""vSphere limit of virtual NICs per VM; also bounds CEL cost."""
MAX_ADDRESSES = 16
"""Most static addresses (and name servers) one interface takes; bounds CEL cost (banlieue's choice)."""

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

    addresses: list[IPPrefix] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """Addresses with their prefix length (``10.0.0.5/24``, ``fd00::5/64``; at most 16)."""
    gateway4: IPv4Address | None = None
    """IPv4 default gateway (an IPv4 address)."""
    gateway6: IPv6Address | None = None
    """IPv6 default gateway (an IPv6 address)."""
    nameservers: list[IPAddress] | None = Field(default=None, max_length=MAX_ADDRESSES, json_schema_extra=LIST_ATOMIC)
    """DNS servers (IP addresses; at most 16)."""


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


class VMClassList(ApiModel):
    """A list of VMClasses."""

    api_version: str = API_VERSION
    kind: str = "VMClassList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VMClass] = Field(default_factory=list)
