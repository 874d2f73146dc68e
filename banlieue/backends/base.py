"""The ``Backend`` protocol a hypervisor must offer, its plain dataclasses and its error taxonomy.

Reconcilers import only this module (never pyvmomi). Units: CPU in MHz, memory in MiB, disk and
datastore sizes in GiB, timeouts in seconds. Every VM banlieue creates carries the Kubernetes
object's UID (``VMSpec.uid``) so that a retry or restart finds it instead of cloning twice
(SPEC §3 Realisation: "find an existing VM first").

Errors: every backend method raises only ``BackendError`` subclasses; ``reason`` is a short
CamelCase word reconcilers copy into condition reasons (SPEC §2 Provider ``ProviderReachable``
reasons ``ConnectFailed``, ``TLSVerifyFailed``; §3 ``TemplateNotFound``, ``InvalidSpec``,
``CloneFailed``).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

PowerState = Literal["PoweredOn", "PoweredOff", "Suspended"]
PowerOffMode = Literal["hard", "soft", "trySoft"]
CloneMode = Literal["fullClone", "linkedClone"]
Provisioning = Literal["thin", "thick", "eagerZeroed"]
Firmware = Literal["bios", "efi", "efi-secure"]


# --- errors -------------------------------------------------------------------------------------


class BackendError(Exception):
    """Base of the taxonomy. ``reason`` (CamelCase) becomes a condition reason. Never carries
    credentials or user data.

    ``public`` says whether ``str(err)`` may be shown to whoever reads the object (a condition
    or an Event): True only for banlieue's own sentences built from the request alone (the
    caller's spec values: template, datacenter, disk names and sizes, the machine's UID).
    False (the default): the message may quote what vCenter or the network said - fault
    messages, host names and addresses, inventory paths of other tenants - so it goes to the
    manager's log and the condition gets a generic message for ``reason`` (issue 23,
    docs/security.md; ``banlieue.reconcilers.vspheremachine.messages``).
    """

    reason = "BackendError"
    public = False

    def __init__(self, message: str, reason: str | None = None, *, public: bool = False) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        self.public = public


class NotFound(BackendError):
    """A named object (datacenter, cluster, template, datastore, port group, VM) does not exist."""

    reason = "NotFound"


class AuthFailed(BackendError):
    """The vCenter refused the credentials (vim.fault.InvalidLogin) or the permission."""

    reason = "AuthFailed"


class TLSVerifyFailed(BackendError):
    """The server certificate did not verify against the CA bundle (or the system roots)."""

    reason = "TLSVerifyFailed"


class InvalidSpec(BackendError):
    """The request cannot be realised as asked (e.g. shrinking a disk); retrying will not help."""

    reason = "InvalidSpec"


class TaskFailed(BackendError):
    """A vSphere task ended in error (message = the fault's message) or exceeded its timeout."""

    reason = "TaskFailed"


class Transient(BackendError):
    """Connection refused, reset or timed out, or the server is busy: retry with back-off."""

    reason = "Transient"


class VCenterIdentityChanged(BackendError):
    """The endpoint reaches a vCenter whose instance UUID is not ``Connection.vcenter_instance_uuid``
    (the one the Provider recorded, where its VMs live): nothing was sent that reads or changes a VM
    (ADR 0013). Fixed by pointing the endpoint back at that vCenter; retrying alone never helps."""

    reason = "VCenterIdentityChanged"


# --- connection ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """How to reach one vCenter for one Provider (SPEC §2 ``Provider.spec.connection``).

    ``provider`` is ``namespace/name``; ``endpoint`` is ``host``, ``host:port`` or an
    ``https://host[:port]/sdk`` URL; ``ca_bundle`` is PEM text (None: system roots);
    ``insecure_skip_tls_verify`` disables verification only when True. One logged-in session is
    kept per ``session_key``. ``vcenter_instance_uuid`` is the vCenter the Provider recorded
    (``status.vcenter.instanceUUID``): when set, every call through this Connection to a vCenter
    of another instance UUID raises VCenterIdentityChanged before anything is sent (ADR 0013); it
    is not part of ``session_key`` (the same session serves the check and the calls).
    """

    provider: str
    endpoint: str
    username: str
    password: str = field(repr=False)
    ca_bundle: str | None = field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    vcenter_instance_uuid: str | None = None

    @property
    def credentials_fingerprint(self) -> str:
        """sha256 over username, password and TLS settings: a changed Secret means a new session."""
        h = hashlib.sha256()
        for part in (self.username, self.password, self.ca_bundle or "", str(self.insecure_skip_tls_verify)):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]

    @property
    def session_key(self) -> tuple[str, str, str]:
        return (self.provider, self.endpoint, self.credentials_fingerprint)


# --- inventory ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VCenterAbout:
    """Who answers on a Connection's endpoint (vSphere ``ServiceContent.about``): ``instance_uuid``
    (``about.instanceUuid``, the vCenter's identity), ``version`` (``about.version``), ``api_type``
    (``VirtualCenter`` or ``HostAgent``), ``api_version`` (``about.apiVersion``)."""

    instance_uuid: str
    version: str
    api_type: str
    api_version: str


@dataclass(frozen=True)
class StorageClass:
    """``capabilities.storageClasses[]``: exactly one of datastore / datastore_cluster is set."""

    name: str
    datastore: str | None = None
    datastore_cluster: str | None = None


@dataclass(frozen=True)
class NetworkClass:
    """``capabilities.networkClasses[]``: exactly one of port_group / distributed_port_group."""

    name: str
    port_group: str | None = None
    distributed_port_group: str | None = None


@dataclass(frozen=True)
class Capabilities:
    storage_classes: tuple[StorageClass, ...] = ()
    network_classes: tuple[NetworkClass, ...] = ()
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capacity:
    """Free capacity of a failure domain: CPU MHz, memory MiB, datastore GiB (rounded down)."""

    cpu_mhz: int
    memory_mib: int
    storage_gib: int


@dataclass(frozen=True)
class StorageCapacity:
    """What one storage class stores onto in a failure domain: ``datastore`` names the storage
    itself (``<datacenter>/<datastore or datastore cluster>``: domains that share a datastore
    report the same name, so it is counted once), ``total_gib`` its size and ``free_gib`` its free
    space (GiB, rounded down; a datastore cluster: the sum over its accessible members)."""

    name: str
    datastore: str
    total_gib: int
    free_gib: int
    member: str | None = None
    """For a datastore cluster: the member datastore new disks of this domain go to (the
    accessible member mounted on the cluster with the most free space)."""


@dataclass(frozen=True)
class FailureDomainInfo:
    """One (datacenter, ClusterComputeResource) pair with what was verified there.
    ``memory_total_mib``: the memory of its connected hosts not in maintenance (MiB; None when
    not measured); ``storage``: per available storage class, what it stores onto."""

    datacenter: str
    cluster: str
    capacity: Capacity
    available_storage_classes: tuple[str, ...]
    available_network_classes: tuple[str, ...]
    features: tuple[str, ...]
    memory_total_mib: int | None = None
    storage: tuple[StorageCapacity, ...] = ()


@dataclass(frozen=True)
class Inventory:
    failure_domains: tuple[FailureDomainInfo, ...]
    api_version: str


@dataclass(frozen=True)
class TemplateInfo:
    """A VM template found by name. ``disk_gib`` is the first disk's size (GiB, rounded up)."""

    name: str
    datacenter: str
    moref: str
    instance_uuid: str
    num_cpus: int
    memory_mib: int
    disk_gib: int
    firmware: str
    guest_id: str
    has_snapshot: bool


# --- machines -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskSpec:
    """A disk. The first disk of ``VMSpec.disks`` is the template's OS disk, grown to
    ``size_gib`` (never shrunk); the others are added. ``datastore`` None = the VM's datastore."""

    name: str
    size_gib: int
    provisioning: Provisioning = "thin"
    datastore: str | None = None


@dataclass(frozen=True)
class NicSpec:
    """A NIC on a port group (standard) or distributed port group, by name, in the datacenter.

    ``addresses`` are CIDRs (``10.0.0.5/24``, ``fd00::5/64``); with none and ``dhcp4`` False the
    NIC is left unconfigured in the network config. ``mac_address`` None = vCenter generates it.
    """

    name: str
    network: str
    mac_address: str | None = None
    dhcp4: bool = True
    dhcp6: bool = False
    addresses: tuple[str, ...] = ()
    gateway4: str | None = None
    gateway6: str | None = None
    nameservers: tuple[str, ...] = ()
    mtu: int | None = None


@dataclass(frozen=True)
class VMSpec:
    """What ``create_vm`` realises (SPEC §3 VSphereMachine). ``uid`` is the Kubernetes object's
    UID; ``name`` the VM name (and hostname). ``resource_pool`` None = the cluster's root pool;
    ``folder`` None = the datacenter's VM folder (else a path below it, ``a/b``); ``datastore``
    None = the template's. ``user_data`` is the bootstrap data (cloud-init), never logged."""

    uid: str
    name: str
    datacenter: str
    cluster: str
    template: str
    num_cpus: int
    memory_mib: int
    num_cores_per_socket: int = 0
    resource_pool: str | None = None
    folder: str | None = None
    datastore: str | None = None
    clone_mode: CloneMode = "fullClone"
    firmware: Firmware | None = None
    disks: tuple[DiskSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    user_data: bytes | None = field(default=None, repr=False)
    hostname: str | None = None


@dataclass(frozen=True)
class NicStatus:
    """A NIC as vSphere reports it: MAC, network name, IPs from VMware Tools (guest.net, matched
    by MAC). ``name`` is the spec NIC name the card carries (``banlieue.nic.<name>`` on vSphere;
    None: unnamed, e.g. a VM adopted by position that was not converged yet); ``connected`` is
    whether it connects at power-on (False: its name left the spec, ADR 0012)."""

    mac_address: str
    network: str
    ip_addresses: tuple[str, ...]
    name: str | None = None
    connected: bool = True


@dataclass(frozen=True)
class DuplicateVM:
    """Another VM carrying the same ``banlieue.uid`` as the VM it is listed on (the one kept:
    ADR 0012 decision 9). ``removable``: provably ours and empty — created by a clone of a
    template (vCenter's ``VmClonedEvent``), powered off and never powered on — so banlieue
    destroys it; else ``why`` says what keeps it (it is only reported)."""

    moref: str
    name: str
    instance_uuid: str
    power_state: PowerState
    removable: bool
    why: str


@dataclass(frozen=True)
class VMInfo:
    """A VM as read back. ``bios_uuid`` is config.uuid (``providerID = vsphere://<bios_uuid>``),
    ``instance_uuid`` config.instanceUuid; ``ip_address`` guest.ipAddress (None until Tools
    reports one); ``disks_gib`` per disk in device order and ``disk_names`` the spec name each
    carries (None: unnamed; empty tuple: not read); ``extra_config`` holds ``guestinfo.*`` and
    ``banlieue.*`` keys only; ``duplicates`` the other VMs with its UID (``find_vm``)."""

    uid: str | None
    moref: str
    name: str
    power_state: PowerState
    bios_uuid: str
    instance_uuid: str
    num_cpus: int
    num_cores_per_socket: int
    memory_mib: int
    disks_gib: tuple[int, ...]
    nics: tuple[NicStatus, ...]
    ip_address: str | None
    extra_config: dict[str, str] = field(default_factory=dict, repr=False)
    disk_names: tuple[str | None, ...] = ()
    disk_provisioning: tuple[Provisioning, ...] = ()
    """Provisioning of each disk in device order (``thin``/``thick``/``eagerZeroed``; empty: not read)."""
    firmware: Firmware | None = None
    """``bios``, ``efi`` or ``efi-secure`` (EFI with secure boot); None: not read."""
    os_disk: int | None = 0
    """Index in ``disks_gib`` of the OS disk, the template's boot disk (``backends.vsphere.disks``;
    None: the VM has none)."""
    duplicates: tuple[DuplicateVM, ...] = ()
    """Other VMs of the vCenter carrying the same UID (``Backend.find_vm`` only; empty when none)."""

    def named_disks_gib(self) -> dict[str, int]:
        """name -> size (GiB) of the disks that carry a spec name (``banlieue.disk.<name>``
        labels); empty for a VM whose disks carry no names yet (adopted by position)."""
        return {n: gib for n, gib in zip(self.disk_names, self.disks_gib, strict=False) if n is not None}

    @property
    def addresses(self) -> tuple[str, ...]:
        """All IPs, guest.ipAddress first, then per NIC, without duplicates."""
        out: list[str] = [self.ip_address] if self.ip_address else []
        for nic in self.nics:
            out.extend(ip for ip in nic.ip_addresses if ip not in out)
        return tuple(out)


@dataclass(frozen=True)
class CreateResult:
    """``created`` False when the VM already existed (found by UID); ``clone_mode`` is what was
    used; ``message`` explains a fallback (linked -> full clone without a template snapshot)."""

    vm: VMInfo
    created: bool
    clone_mode: CloneMode
    message: str = ""


@dataclass(frozen=True)
class VMChange:
    """A change notification from the vCenter's PropertyCollector (``WaitForUpdatesEx``).

    ``uid`` is the banlieue UID read from the VM's extraConfig (VMs without one are not
    delivered; None only if it was never seen before removal); ``kind`` "removed" when the VM
    left the inventory."""

    endpoint: str
    moref: str
    uid: str | None
    instance_uuid: str | None
    kind: Literal["modified", "removed"]


def taxonomy(err: BackendError) -> str:
    """The taxonomy name of a backend error (``AuthFailed``, ``TLSVerifyFailed``, ``Transient``,
    ``NotFound``, ``InvalidSpec``, ``TaskFailed``) from its class, else its ``reason``: the
    vSphere backend gives some errors a more specific ``reason`` (a Transient with reason
    ``ConnectFailed``), and the mapping to SPEC reasons goes by the class."""
    for cls in (AuthFailed, TLSVerifyFailed, Transient, NotFound, InvalidSpec, TaskFailed, VCenterIdentityChanged):
        if isinstance(err, cls):
            return cls.__name__
    return err.reason


# --- protocol -----------------------------------------------------------------------------------


class Backend(Protocol):
    """What a hypervisor offers to banlieue's reconcilers (ARCHITECTURE.md "Backends").

    Every method may raise AuthFailed, TLSVerifyFailed or Transient in addition to the errors
    listed. Methods are safe to call concurrently; calls to one vCenter never wait for another.
    """

    async def check_connection(self, conn: Connection) -> str:
        """Log in (or reuse the session); return the vCenter's API version (e.g. ``"6.5"``)."""
        ...

    async def about(self, conn: Connection) -> VCenterAbout:
        """Log in (or reuse the session), prove the vCenter answers (one round trip) and say who it
        is. Never raises VCenterIdentityChanged: this is how the Provider reconciler learns the
        identity it then compares with the recorded one."""
        ...

    def spec_error(self, spec: VMSpec) -> str | None:
        """Why no vCenter could take ``spec`` (a hard limit of the hypervisor, e.g. the 64 KiB
        of a vSphere guestinfo value), as an actionable message; None when it fits. Pure and
        cheap, no call: the VSphereMachine reconciler checks it before cloning or reconfiguring
        (``create_vm`` would raise InvalidSpec for the same spec)."""
        ...

    def guest_data_drifted(self, vm: VMInfo, spec: VMSpec) -> bool:
        """Whether converging ``vm`` to ``spec`` would change the guest data the backend delivers
        besides hardware and NICs (vSphere: the cloud-init metadata in guestinfo: host name and
        per-NIC network configuration). Pure and cheap, no call: the VSphereMachine reconciler
        converges a provisioned VM when it is True."""
        ...

    async def inventory(self, conn: Connection, capabilities: Capabilities) -> Inventory:
        """One failure domain per (datacenter, ClusterComputeResource) with free capacity,
        the storage/network classes verified there and detected features."""
        ...

    async def find_template(self, conn: Connection, datacenter: str | None, name: str) -> TemplateInfo | None:
        """A template by name, in ``datacenter`` (None: any). None when absent."""
        ...

    async def find_vm(self, conn: Connection, uid: str, instance_uuid: str | None = None) -> VMInfo | None:
        """The VM carrying ``uid`` in extraConfig, else the one with ``instance_uuid``; None.
        When several carry ``uid``, the one returned is the one whose instance UUID is
        ``instance_uuid`` (the machine recorded it), else the oldest, and the others are in its
        ``duplicates``."""
        ...

    async def create_vm(
        self, conn: Connection, spec: VMSpec, on_clone_task: Callable[[str], Awaitable[None]] | None = None
    ) -> CreateResult:
        """Find by UID, else clone; then converge hardware and guestinfo to ``spec``.

        Idempotent: calling it again for the same UID never clones twice and re-applies only
        what differs. Does not power on. ``on_clone_task(key)`` is awaited with the clone
        task's key while the clone runs (a backend may skip it for a clone that ends within a
        few seconds), so the caller can record it (``clone_task_state``). Raises NotFound (template, datacenter,
        cluster, datastore, network, pool, folder), InvalidSpec (disk shrink, resize of a linked
        clone), TaskFailed."""
        ...

    async def clone_task_state(self, conn: Connection, key: str) -> str:
        """State of the clone task ``key`` (from ``create_vm``'s ``on_clone_task``): "queued",
        "running", "success", "error", or "unknown" (vCenter no longer knows it)."""
        ...

    async def destroy_duplicate(self, conn: Connection, uid: str, moref: str) -> bool:
        """Destroy the VM ``moref``, another VM carrying ``uid`` than the one kept, only when it
        still is provably ours and empty (``DuplicateVM.removable``, read again now); True when
        it was destroyed (or is gone), False when it was left (ADR 0012 decision 9)."""
        ...

    async def clone_sent_state(self, conn: Connection, uid: str, name: str, since: datetime) -> str:
        """State of a clone into a VM named ``name`` (carrying ``uid``) recorded as started at
        ``since`` whose task key was never recorded: "unknown" (vCenter shows no such clone, and
        a clone it queued or runs may be this one), "running", "success" or "error" (ADR 0012)."""
        ...

    async def set_power_state(
        self,
        conn: Connection,
        uid: str,
        state: PowerState,
        off_mode: PowerOffMode = "trySoft",
        soft_timeout: float = 300.0,
        hurry: bool = True,
    ) -> VMInfo:
        """Drive the VM to ``state``. Powering off: ``hard`` = PowerOffVM, ``soft`` =
        ShutdownGuest then wait up to ``soft_timeout`` s (the returned state may still be
        PoweredOn: look again later), ``trySoft`` = soft then hard after the timeout.
        ``hurry``: a caller that holds a worker (and a vCenter slot) while it waits asks the change
        watch for its next batch at once; False (a call followed in the background) lets a
        power-on wait for the watch's own gap. Raises NotFound, TaskFailed."""
        ...

    async def destroy_vm(
        self, conn: Connection, uid: str, off_mode: PowerOffMode = "trySoft", soft_timeout: float = 300.0
    ) -> bool:
        """Power off (per ``off_mode``) and destroy. Returns False when the VM was already
        gone (success), True when it was destroyed. Raises Transient when a ``soft`` power-off
        has not finished within ``soft_timeout`` s."""
        ...

    def watch(self, conn: Connection) -> AsyncIterator[VMChange]:
        """Changes of banlieue-managed VMs (power state, guest IPs, config, removal). The first
        batch reports every managed VM as "modified" (a resync). One long-poll per vCenter;
        no polling in steady state. Stops when the consumer stops iterating."""
        ...

    async def close(self) -> None:
        """Log out every session and stop every thread pool."""
        ...
