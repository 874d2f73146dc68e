"""VSphereMachine: the pure ``decide(snapshot) -> Plan`` of the provider role (SPEC §3, §4).

Ready reasons are SPEC §3's (``WaitingForBootstrapData``, ``WaitingForClusterInfrastructure``,
``Cloning``, ``PoweringOn``, ``WaitingForIPAddress``, ``Provisioned``, ``TemplateNotFound``,
``InvalidSpec``, ``CloneFailed``, ``Deleting``, ``Paused``), the Provider's connection reasons of
SPEC §2 (``SecretMissing``, ``SecretInvalid``, ``ConnectFailed``, ``TLSVerifyFailed``) and these,
introduced here:

- ``WaitingForOwner``: CAPI path (label ``cluster.x-k8s.io/cluster-name``) but no Machine owner
  yet, or the owner is not in the cache (CAPV returns early the same way; no finalizer yet).
- ``WaitingForCluster``: the CAPI Cluster named by the label is not found.
- ``WaitingForClusterAPI``: CAPI path, but the CAPI kinds are not served yet (CAPI not
  installed) or their caches are not synced yet (``waiting_for_cluster_api``): said at once, so
  such a machine never sits without a ``Ready`` condition.
- ``ProviderNotFound``: ``spec.providerRef`` names no Provider in the namespace.
- ``ProviderDeleting`` / ``DuplicateVCenter`` (borrowed from the Provider): the placement's
  Provider is being deleted, or is ``Ready`` False ``DuplicateVCenter`` (ADR 0013), and the
  machine has no VM yet: nothing is cloned (``placement.refuses_new_machines``); a machine whose
  VM exists keeps it.
- ``FailureDomainNotFound``: no Provider lists the failure domain in ``status.failureDomains``.
- ``VMNameInUse``: the clone failed because another VM (not this machine's: none carries its UID)
  has the machine's name in the target folder (vSphere ``DuplicateName``); retried with the
  back-off of a refused clone (``task_failure_retry_seconds``: 5 s doubling to 60 s), so
  removing or renaming that VM lets the machine go on.
- ``VMNotFound``: the VM was provisioned (``status.instanceUUID`` known) but is gone from vCenter:
  reported with a Warning event, never silently re-created (delete the object to recover).
- ``PoweringOff``: a soft power-off (``powerOffMode`` soft/trySoft) is still waiting for the guest.
- ``VCenterIdentityChanged`` (borrowed from the Provider): the Provider's endpoint reaches another
  vCenter than the one its ``status.vcenter`` records; nothing was sent (ADR 0013). A deleting
  machine keeps its finalizer (``Deleting`` naming it) until the endpoint is right again.

Paused (``Cluster.spec.paused`` or the ``cluster.x-k8s.io/paused`` annotation on the machine or
its Cluster): ``Paused`` True and nothing else happens, deletion included; a ``Ready`` True
stays True (a running machine stays Ready while paused), any other becomes False ``Paused``.

Deletion: ``Ready`` False ``Deleting``; destroy (power-off per ``powerOffMode``) then drop the
finalizer; a VM already gone is success. The Provider's finalizer keeps it while machines use it
(``provider.deletion``), but its credentials Secret has none (a namespace deletion removes it at
once): when the Secret is missing or invalid, or the Provider object is gone (its finalizer
removed by hand; the machine's Provider is ``spec.providerRef`` or the ``banlieue.io/provider``
label), the last Connection this process built for that Provider
(``Snapshot.known_connections``, ``last_connection``) is used to destroy the VM. With none known,
a Provider that no longer exists cannot reach the VM: the finalizer is dropped with a Warning
event ``ProviderGone``; a Secret that is missing or a vCenter that cannot be reached keeps
``Deleting`` with the cause in the message and retries every ``RETRY_SECONDS`` (and on every
Secret/Provider change).

Never clone twice: the VM is looked up by UID (then instance UUID) first; the ``Cloning``
message records when the clone started (``... since <RFC 3339>``), and a later reconcile that
does not find the VM while that clone may still run (younger than ``--vsphere-task-timeout``)
waits for it instead of cloning again (the process that started it may have died mid-task).

Other rules: ``providerID = vsphere://<BIOS UUID>`` (canonical lower-case UUID) is written before
``status.initialization.provisioned``; while the VM has no valid BIOS UUID none is written
(``Ready`` False ``WaitingForBIOSUUID``), and once written it is never rewritten: a VM whose BIOS
UUID changed gets the ``ProviderIDMatchesVM`` condition False ``BIOSUUIDChanged`` and one Warning
event (CAPV #1107, #1756). ``status.initialization.provisioned`` is True once the VM is in the
desired power state and, when that is PoweredOn, reports a usable address (CAPV #249, #938), or
has no NIC; it is never taken back. ``Ready`` True (``Provisioned``) needs a usable IP when the
desired state is PoweredOn (else ``WaitingForIPAddress``); a VM powered off as asked is Ready.
``status.addresses`` holds one ``InternalIP`` per usable IP from VMware Tools (link-local,
loopback, unspecified and multicast left out: ``machine_addresses``; no ``Hostname`` entry). A
create that fails because a template, resource pool, folder, datastore or network is missing
is re-checked with back-off (``missing_retry_seconds``: 5 s doubling to 300 s), so the machine
goes on once the object is created in vCenter. A status change that only moves ``Ready`` False
between progress reasons is deferred while our last status write is younger than
``vspheremachine.progress.PROGRESS_WRITE_INTERVAL_SECONDS`` (ADR 0011): the plan then writes no
status and requeues for the rest of the interval. ``Snapshot.converged_spec`` (this process's
memory of the spec it last converged the VM to) spares a second converge while such a deferred
status has not recorded ``provisioned`` yet. Bootstrap data in the ``ignition`` format is
``InvalidSpec`` (the backend delivers cloud-init guestinfo only), and so is user data that
exceeds a guestinfo value's 64 KiB even gzip+base64-encoded, or metadata whose base64 does (the
backend's ``spec_error``, given as ``Snapshot.spec_error``), before any vCenter call, while no
VM exists; a VM in use is kept as it is instead (``HardwareChangePending`` ``ChangeFailed``, Ready
and power unaffected). A VM in use is one provisioned or powered on (a spec edit made while it
was cloned reaches it running: it waits for a power-off like any other). Hardware
drift of a VM in use is re-converged as ``vspheremachine.hardware`` says (disks by name; CPU
and memory only while the VM is powered off; the rest reported by ``HardwareChangePending``, never
by ``Ready``; power is carried out whatever is pending); NIC and guestinfo changes apply until
provisioned.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from banlieue.api.conditions import (
    HARDWARE_CHANGE_PENDING,
    PAUSED,
    READY,
    VM_UNIQUE,
    get_condition,
    is_true,
    set_condition,
)
from banlieue.api.infrastructure import (
    DEFAULT_GUEST_SOFT_POWER_OFF_TIMEOUT_SECONDS,
    VSphereMachine,
    VSphereMachineReason,
    VSphereMachineStatus,
)
from banlieue.api.meta import ConditionStatus, Initialization, MachineAddress, MachineAddressType
from banlieue.api.provider import Provider
from banlieue.api.virtualmachine import PowerState
from banlieue.backends.base import (
    AuthFailed,
    DuplicateVM,
    InvalidSpec,
    TLSVerifyFailed,
    Transient,
    VCenterIdentityChanged,
    VMInfo,
    VMSpec,
)
from banlieue.backends.base import PowerOffMode as OffMode
from banlieue.backends.base import PowerState as PowerStateName
from banlieue.reconcilers.kinds import (
    CAPI_ANNOTATION_PAUSED,
    CAPI_LABEL_CLUSTER_NAME,
    CAPI_MACHINE,
    FINALIZER_VSPHERE_MACHINE,
    LABEL_PROVIDER,
)
from banlieue.reconcilers.vspheremachine.hardware import Pending, drifted, effective_spec, summary
from banlieue.reconcilers.vspheremachine.placement import (
    BootstrapData,
    DomainChoice,
    PlacementError,
    build_vm_spec,
    capi_failure_domain,
    capi_machine_owner,
    cluster_infrastructure_provisioned,
    cluster_paused,
    is_capi_path,
    refuses_new_machines,
    resolve_placement,
)
from banlieue.reconcilers.vspheremachine.progress import progress_write_wait


def replace_hint(machine: VSphereMachine) -> str:
    """What a VMNotFound message tells the user. It is mirrored onto the owning VirtualMachine,
    where "delete this object" read as "delete the VirtualMachine", which only removes it, and
    where "this VSphereMachine" named no object (a new-user review): the VSphereMachine is named."""
    name, ns = machine.metadata.name or "", machine.metadata.namespace or "default"
    return (f"to get a new VM, delete VSphereMachine {name} (kubectl delete vspheremachine {name} -n {ns}) if a "
            "banlieue VirtualMachine owns it (the VirtualMachine creates a new one), or its Machine under Cluster "
            "API (its MachineSet or control plane creates a new one)")

R = VSphereMachineReason
"""Ready reasons (SPEC §3 plus the ones documented in the module docstring)."""

WARNING_REASONS = frozenset(
    {R.TEMPLATE_NOT_FOUND, R.INVALID_SPEC, R.CLONE_FAILED, R.VM_NOT_FOUND, R.CONNECT_FAILED, R.TLS_VERIFY_FAILED,
     R.SECRET_MISSING, R.SECRET_INVALID, R.PROVIDER_NOT_FOUND, R.FAILURE_DOMAIN_NOT_FOUND, R.VCENTER_IDENTITY_CHANGED,
     R.PROVIDER_DELETING, R.DUPLICATE_VCENTER, R.VM_NAME_IN_USE, R.MAC_ADDRESS_CONFLICT}
)
RETRY_SECONDS = 60.0
"""Re-check interval for conditions nothing notifies about (template created, vCenter back)."""
IP_POLL_SECONDS = 60.0
"""Safety re-check while waiting for an IP (the property-collector watch normally reports it)."""
STEADY_RESYNC_SECONDS = 36000.0
"""Re-check of a provisioned machine: 10 h, controller-runtime's default SyncPeriod. The property
collector is the signal (a re-created collector's first batch re-delivers every VM, and a vCenter
coming back re-enqueues its machines), so a shorter period would only cost SOAP requests in
steady state (600 s cost 290 requests/min at 1,000 VMs: docs/performance.md)."""
POWER_OFF_POLL_SECONDS = 10.0
"""Re-check interval while a guest shuts down (soft power-off)."""
BOOTSTRAP_POLL_SECONDS = 30.0
"""Re-check interval while a named bootstrap data Secret is missing or incomplete."""
CLONE_OUTCOME_UNKNOWN = "CloneOutcomeUnknown"
"""``Failure.reason`` of a clone that may have been accepted (``backends.vsphere.backend``)."""
CLONE_WAIT_SECONDS = 5.0
"""Re-check interval while waiting for a clone an earlier reconcile started (also for a power
or destroy call whose outcome is unknown)."""
DUPLICATE_NAME = "DuplicateName"
"""``Failure.reason`` of a clone vCenter refused because another VM has the name in the folder
(``backends.vsphere.faults.DUPLICATE_NAME``)."""
POWER_OUTCOME_UNKNOWN = "PowerOutcomeUnknown"
"""``Failure.reason`` of a power call whose answer was lost (``backends.vsphere.backend``)."""
DESTROY_OUTCOME_UNKNOWN = "DestroyOutcomeUnknown"
"""``Failure.reason`` of a Destroy_Task whose outcome is not known while the VM is still there."""
MISSING_FIRST_RETRY_SECONDS = 5.0
MISSING_MAX_RETRY_SECONDS = 300.0
"""Back-off of the re-check of a template, resource pool, folder, datastore or network that does
not exist (yet): 5 s doubling to 300 s (``missing_retry_seconds``). Nothing notifies banlieue
when one is created in vCenter (the change watch sees VMs only), and a user who fixes it there
expects the machine to go on without editing it (CAPV #1176, #1925)."""
TASK_FAILURE_FIRST_RETRY_SECONDS = 5.0
TASK_FAILURE_MAX_RETRY_SECONDS = 60.0
"""Back-off of a clone vCenter refused (``REFUSED_CLONE_REASONS``: a fault answered to
CloneVM_Task or a failed clone task): 5 s doubling to 60 s per machine (``task_failure_retry_seconds``). The work
queue's per-item limiter (controller-runtime's default, 5 ms doubling) is sized for API
conflicts: against a vCenter refusing every clone it sent ~14 CloneVM_Task per machine in the
first second. CAPV waits 1 min after a failed task before sending it again (VSphereVM
``status.retryAfter``); banlieue starts sooner, for a refusal that clears by itself (a datastore
freed), and is never slower than that once the failure persists."""


@dataclass(frozen=True)
class Failure:
    """A backend error as seen by decide: which ``step`` (lookup, create, power, destroy), the
    backend ``reason`` (``BackendError.reason``) and its message."""

    step: Literal["connect", "lookup", "create", "power", "destroy"]
    reason: str
    message: str


@dataclass(frozen=True)
class Snapshot:
    """Everything decide needs. ``capi_machine``/``cluster`` are wire dicts from the cache;
    ``providers`` the Providers of the namespace; ``bootstrap`` the decoded data (None: none or
    not readable, see ``bootstrap_error``); ``looked_up`` whether the backend was asked (it is
    only asked once a Provider and connection are known); ``vm`` its answer; ``failure`` the
    last backend error; ``converged``/``destroyed``/``powered`` record what this reconcile did;
    ``known_connections``: names of the namespace's Providers this process has a last known good
    Connection for (used only to delete); ``converged_spec``: the spec this process last
    converged the VM to (``create`` succeeded), kept in memory until a stored status says
    ``provisioned`` (None after a restart: the VM is converged again, which is idempotent);
    ``spec_error``: the backend's ``Backend.spec_error`` (a message when no vCenter could take
    the built spec; None: no limit is checked); ``guest_data_drifted``: the backend's
    ``Backend.guest_data_drifted`` (a provisioned VM whose guest data differs is converged; None:
    not checked); ``domain_choice``: the failure domain the
    reconciler chose (``placement.choose_cluster_failure_domain``) for a CAPI machine with no
    failure domain and no Provider, None when it needs none; ``clone_task``: the state of the
    clone task the machine's ``infrastructure.banlieue.io/clone-task`` annotation names
    (``Backend.clone_task_state``), looked up only while a clone is recorded and no VM found;
    ``duplicates_destroyed``/``duplicates_left``: other VMs carrying the UID this reconcile
    destroyed, or found not removable when it tried (``Backend.destroy_duplicate``);
    ``power_pending``: a power-on of the VM is followed in the background (``power_ons``), so no
    power change is asked until it ends."""

    machine: VSphereMachine
    now: datetime
    capi_machine: Mapping[str, Any] | None = None
    cluster: Mapping[str, Any] | None = None
    providers: tuple[Provider, ...] = ()
    bootstrap: BootstrapData | None = None
    bootstrap_error: str | None = None
    connection_error: tuple[str, str] | None = None
    looked_up: bool = False
    vm: VMInfo | None = None
    failure: Failure | None = None
    converged: bool = False
    clone_grace_seconds: float = 600.0
    destroyed: bool = False
    powered: bool = False
    known_connections: frozenset[str] = frozenset()
    converged_spec: VMSpec | None = None
    spec_error: Callable[[VMSpec], str | None] | None = None
    guest_data_drifted: Callable[[VMInfo, VMSpec], bool] | None = None
    missing_retries: int = 0
    task_failures: int = 0
    clone_not_before: datetime | None = None
    domain_choice: DomainChoice | None = None
    clone_task: str | None = None
    duplicates_destroyed: tuple[DuplicateVM, ...] = ()
    duplicates_left: tuple[DuplicateVM, ...] = ()
    power_pending: bool = False


def missing_object(failure: Failure) -> bool:
    """A create that failed because a named vCenter object does not exist (``TemplateNotFound``,
    ``ResourcePoolNotFound``, ``FolderNotFound``, ``DatastoreNotFound``...; not ``VMNotFound``)."""
    return failure.step == "create" and failure.reason.endswith("NotFound") and failure.reason != "VMNotFound"


def missing_retry_seconds(retries: int) -> float:
    """Seconds before re-checking a missing vCenter object after ``retries`` failed attempts."""
    return min(MISSING_MAX_RETRY_SECONDS, MISSING_FIRST_RETRY_SECONDS * float(2 ** min(max(retries, 0), 16)))


REFUSED_CLONE_REASONS = frozenset({R.CLONE_FAILED, R.VM_NAME_IN_USE, R.MAC_ADDRESS_CONFLICT})
"""Ready reasons of a clone whose task vCenter refused: each backs off before the next clone
(``task_failure_retry_seconds``). VMNameInUse and MacAddressConflict are refusals too: without
the back-off, the event of the machine's own status write cloned again at once (a clone every
1.5 s for a machine whose name another VM holds, CI of 117f454)."""


def task_failed(failure: Failure) -> bool:
    """A create that vCenter refused (``REFUSED_CLONE_REASONS``): not a connection or TLS
    failure, not a missing object or an invalid spec, not an unknown outcome."""
    return (failure.step == "create" and failure.reason != CLONE_OUTCOME_UNKNOWN
            and _failure_reason(failure) in REFUSED_CLONE_REASONS)


def task_failure_retry_seconds(failures: int) -> float:
    """Seconds before cloning again after ``failures`` consecutive refused clones (1 = the first)."""
    return min(TASK_FAILURE_MAX_RETRY_SECONDS, TASK_FAILURE_FIRST_RETRY_SECONDS * float(2 ** min(max(failures - 1, 0), 16)))


@dataclass(frozen=True)
class Action:
    """One backend call: ``create`` (find-or-clone + converge ``spec``), ``power`` to ``state``,
    ``destroy`` (power off per ``off_mode`` within ``soft_timeout`` seconds), or
    ``destroy_duplicate`` (``Backend.destroy_duplicate`` of ``moref``)."""

    kind: Literal["create", "power", "destroy", "destroy_duplicate"]
    spec: VMSpec | None = None
    moref: str = ""
    """``destroy_duplicate``: the VM (another one carrying the machine's UID) to destroy."""
    state: PowerStateName = "PoweredOn"
    off_mode: OffMode = "trySoft"
    soft_timeout: float = float(DEFAULT_GUEST_SOFT_POWER_OFF_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Event:
    """An Event to record on the machine; ``transition``: it reports a change of the Ready
    reason (the reconciler records those only on a real change, never twice in a row)."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    transition: bool = False


def ready_reason(status: VSphereMachineStatus | None) -> str | None:
    """The ``Ready`` condition's reason (None without a status or a Ready condition)."""
    cond = get_condition(status.conditions if status else None, READY)
    return cond.reason if cond is not None else None


@dataclass(frozen=True)
class Plan:
    """What to do. ``connect``: the reconciler must build the connection of ``provider`` and
    look up the VM (``Snapshot.looked_up``) before deciding further; ``provider`` is the Provider
    backend calls go to. ``status`` is the full desired status (None: leave it);
    ``write_status_first``: write it before ``action`` (a clone takes minutes); ``provider_id``:
    value to write to ``spec.providerID``; ``retry``: fail the reconcile after writing (backoff);
    ``last_known``: with ``connect``, use the last known Connection of this Provider (name, same
    namespace) instead of building one from its Secret."""

    status: VSphereMachineStatus | None = None
    add_finalizer: bool = False
    remove_finalizer: bool = False
    action: Action | None = None
    write_status_first: bool = False
    provider_id: str | None = None
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    retry: bool = False
    provider: Provider | None = None
    connect: bool = False
    last_known: str | None = None


@dataclass
class _Status:
    """Builder of the desired status from the current one."""

    snap: Snapshot
    status: VSphereMachineStatus = field(init=False)

    def __post_init__(self) -> None:
        current = self.snap.machine.status or VSphereMachineStatus()
        self.status = current.model_copy(deep=True)
        self.status.observed_generation = self.snap.machine.metadata.generation

    def cond(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.status.conditions = set_condition(
            self.status.conditions, type_, status, reason, message, self.snap.machine.metadata.generation, self.snap.now
        )

    def ready(self, status: bool, reason: str, message: str) -> None:
        self.cond(READY, status, reason, message)

    def vm_gone(self) -> None:
        """The VM is no longer in vCenter: no power state and no address are known (a vanished VM
        showed PoweredOn and its last IP, issue 24). instanceUUID, vmRef and providerID stay:
        they name what vanished."""
        self.status.power_state = None
        self.status.addresses = None

    def vm(self, vm: VMInfo, failure_domain: str | None, nic_names: Sequence[str] = ()) -> None:
        """Mirror ``vm``; ``nic_names`` are the spec's NIC names in spec order (``machine_addresses``)."""
        self.status.instance_uuid = vm.instance_uuid
        self.status.bios_uuid = vm.bios_uuid
        self.status.vm_ref = vm.moref
        self.status.power_state = PowerState(vm.power_state)
        # A VM that is not running has no address, whatever Tools reported last (issue 19).
        self.status.addresses = (machine_addresses(vm, nic_names) or None) if vm.power_state == "PoweredOn" else None
        if failure_domain is not None:
            self.status.failure_domain = failure_domain


def machine_addresses(vm: VMInfo, nic_names: Sequence[str] = ()) -> list[MachineAddress]:
    """CAPI MachineAddresses: one ``InternalIP`` per usable IP VMware Tools reports.

    Order: when the VM's cards carry spec names (``NicStatus.name``, the ``banlieue.nic.<name>``
    labels), the IPs of the cards named in ``nic_names`` (the spec's NICs, in spec order), then
    those of the other connected cards in device order, then guest.ipAddress unless it is a
    disconnected card's: a card whose name left the spec (renamed or removed, ADR 0012) is kept
    disconnected, and the address Tools may still report for it is not one the machine answers
    on. Cards carrying no names yet (adopted by position, not converged) or no ``nic_names``:
    Tools' order, guest.ipAddress first (``VMInfo.addresses``).
    Not usable, left out (CAPV #249, #985; govmomi #1259): link-local (169.254.0.0/16,
    fe80::/10), loopback (127.0.0.0/8, ::1), unspecified (0.0.0.0, ::), multicast, and text that
    is not an IP address (``ipaddress.ip_address``; an IPv6 zone ``%eth0`` is dropped first)."""
    named = {n.name: n for n in vm.nics if n.name is not None}
    texts: Sequence[str] = vm.addresses
    if named and nic_names:
        in_spec = [named[name] for name in nic_names if name in named and named[name].connected]
        others = [n for n in vm.nics if n.connected and (n.name is None or n.name not in nic_names)]
        stale = {ip for n in vm.nics if not n.connected for ip in n.ip_addresses}
        guest = [vm.ip_address] if vm.ip_address and vm.ip_address not in stale else []
        texts = [ip for n in (*in_spec, *others) for ip in n.ip_addresses] + guest
    out: list[MachineAddress] = []
    for text in texts:
        try:
            ip = ipaddress.ip_address(text.split("%", 1)[0].strip())
        except ValueError:
            continue
        if ip.is_link_local or ip.is_loopback or ip.is_unspecified or ip.is_multicast:
            continue
        if all(a.address != str(ip) for a in out):
            out.append(MachineAddress(type=MachineAddressType.INTERNAL_IP, address=str(ip)))
    return out


PROVIDER_ID_PREFIX = "vsphere://"
PROVIDER_ID_MATCHES_VM = "ProviderIDMatchesVM"
"""Condition type: False (``BIOSUUIDChanged``) when the VM's BIOS UUID no longer matches the
providerID written before; only present once that happened."""


def power_state_event(vm: VMInfo) -> Event:
    """The Normal Event of a power change this process made, ``reason`` the state reached
    (``PoweredOn``, ``PoweredOff``): whether it was waited for here or followed in the background
    (``power_ons``)."""
    return Event("Normal", vm.power_state, f"VM {vm.name} is {vm.power_state}")


def provider_id(vm: VMInfo) -> str | None:
    """``vsphere://<BIOS UUID>`` with the UUID in canonical lower-case form (what vSphere's cloud
    provider puts on the Node, SPEC §3; CAPV #1107), or None while the VM has no valid BIOS UUID
    (empty, or not a UUID)."""
    try:
        return PROVIDER_ID_PREFIX + str(uuid.UUID(vm.bios_uuid.strip()))
    except ValueError:
        return None


def _events(before: VSphereMachineStatus | None, after: VSphereMachineStatus | None, extra: Sequence[Event] = ()) -> tuple[Event, ...]:
    """``extra`` plus one Event when the Ready reason changes (Warning for failure reasons)."""
    out = list(extra)
    old = get_condition(before.conditions if before else None, READY)
    new = get_condition(after.conditions if after else None, READY)
    if new is not None and (old is None or (old.reason, old.status) != (new.reason, new.status)):
        if not any(e.reason == new.reason for e in out):
            out.append(Event("Warning" if new.reason in WARNING_REASONS else "Normal", new.reason, new.message or new.reason, transition=True))
    return tuple(out)


def _failure_reason(failure: Failure) -> str:
    # failure.reason is BackendError.reason: the taxonomy class's name, or a more specific word
    # the vSphere backend gives (``TemplateNotFound``, ``TaskTimeout``...).
    if failure.reason == VCenterIdentityChanged.reason:
        return R.VCENTER_IDENTITY_CHANGED  # the endpoint reaches another vCenter (ADR 0013)
    if failure.reason == AuthFailed.reason or failure.step == "connect":
        return R.CONNECT_FAILED
    if failure.reason in (TLSVerifyFailed.reason, Transient.reason):
        # A certificate that does not verify is said as an unreachable vCenter (the Provider's rule).
        return R.CONNECT_FAILED
    if failure.step == "create":
        if failure.reason == "VMNotFound":
            return R.VM_NOT_FOUND
        if failure.reason == "TemplateNotFound":
            return R.TEMPLATE_NOT_FOUND
        if failure.reason == DUPLICATE_NAME:
            return R.VM_NAME_IN_USE
        if failure.reason == R.MAC_ADDRESS_CONFLICT:  # backends.vsphere.macs.CONFLICT_REASON
            return R.MAC_ADDRESS_CONFLICT
        if failure.reason == InvalidSpec.reason or failure.reason.endswith("NotFound"):
            return R.INVALID_SPEC
        return R.CLONE_FAILED
    return R.CONNECT_FAILED if failure.step == "lookup" else failure.reason


def decide(snap: Snapshot) -> Plan:
    """The plan for one step of the machine's life. Never raises: malformed input becomes a
    ``Ready`` condition with a reason and an actionable message."""
    try:
        plan = _coalesce(snap, _decide(snap))
    except Exception as exc:  # decide must never raise; surface the bug as a condition
        st = _Status(snap)
        st.ready(False, R.INVALID_SPEC, f"internal error deciding this machine: {type(exc).__name__}: {exc}")
        return Plan(status=st.status, events=_events(snap.machine.status, st.status), retry=True)
    return plan


def _coalesce(snap: Snapshot, plan: Plan) -> Plan:
    """Defer a progress-only status change (``vspheremachine.progress``, ADR 0011): no status,
    no Ready-transition Event, requeue when the interval is over. Plans that act, write first
    (``Cloning`` before a clone, ``Deleting`` before a destroy), retry or drop the finalizer are
    never deferred."""
    if plan.status is None or plan.action is not None or plan.write_status_first or plan.retry or plan.remove_finalizer:
        return plan
    if snap.machine.metadata.deletion_timestamp is not None:
        return plan
    stored = snap.machine.status
    wait = progress_write_wait(stored, plan.status, snap.now, clone_started(stored) if stored else None)
    if wait is None:
        return plan
    requeue = wait if plan.requeue_after is None else min(plan.requeue_after, wait)
    events = tuple(e for e in plan.events if not e.transition)
    return replace(plan, status=None, events=events, requeue_after=requeue)


def _with_events(snap: Snapshot, plan: Plan, extra: Sequence[Event] = ()) -> Plan:
    return replace(plan, events=_events(snap.machine.status, plan.status, (*plan.events, *extra)))


def _decide(snap: Snapshot) -> Plan:
    m = snap.machine
    meta = m.metadata
    st = _Status(snap)
    has_finalizer = FINALIZER_VSPHERE_MACHINE in (meta.finalizers or ())
    deleting = meta.deletion_timestamp is not None
    capi = is_capi_path(m, CAPI_LABEL_CLUSTER_NAME)

    # CAPI: wait for the owner and the Cluster (no finalizer yet: CAPV returns early too).
    if capi and not deleting:
        if capi_machine_owner(m) is None or snap.capi_machine is None:
            st.ready(False, R.WAITING_FOR_OWNER, "waiting for the Machine controller to set an owner reference")
            return _with_events(snap, Plan(status=st.status))
        if snap.cluster is None:
            name = (meta.labels or {}).get(CAPI_LABEL_CLUSTER_NAME) or "?"
            st.ready(False, R.WAITING_FOR_CLUSTER, f"waiting for Cluster {name} (label {CAPI_LABEL_CLUSTER_NAME})")
            return _with_events(snap, Plan(status=st.status))

    # Pause: Paused True and nothing else, on every path (deletion included).
    paused = CAPI_ANNOTATION_PAUSED in (meta.annotations or {}) or (capi and cluster_paused(snap.cluster, CAPI_ANNOTATION_PAUSED))
    if paused:
        st.cond(PAUSED, True, R.PAUSED, "reconciliation is paused (Cluster.spec.paused or the cluster.x-k8s.io/paused annotation)")
        if not is_true(st.status.conditions, READY):
            st.ready(False, R.PAUSED, "reconciliation is paused")
        return _with_events(snap, Plan(status=st.status))
    st.cond(PAUSED, False, R.NOT_PAUSED, "")

    if deleting:
        return _decide_delete(snap, st, has_finalizer, capi)
    if not has_finalizer:
        # First write of a machine: the finalizer, before anything exists on vCenter.
        return Plan(add_finalizer=True, provider=None)

    if capi:
        if not cluster_infrastructure_provisioned(snap.cluster):
            st.ready(False, R.WAITING_FOR_CLUSTER_INFRASTRUCTURE, "waiting for Cluster status.initialization.infrastructureProvisioned")
            return _with_events(snap, Plan(status=st.status))

    needs_bootstrap = capi or m.spec.bootstrap_data_secret_ref is not None
    vm_exists = snap.vm is not None
    if needs_bootstrap and snap.bootstrap is None and not vm_exists and not (m.status and m.status.instance_uuid):
        st.ready(False, R.WAITING_FOR_BOOTSTRAP_DATA, snap.bootstrap_error or "waiting for Machine.spec.bootstrap.dataSecretName")
        # A named Secret that is missing or incomplete: a CAPI bootstrap Secret is not indexed
        # back to its machine, so look again now and then (the Machine update usually comes first).
        return _with_events(snap, Plan(status=st.status, requeue_after=BOOTSTRAP_POLL_SECONDS if snap.bootstrap_error else None))
    if snap.bootstrap is not None and snap.bootstrap.format not in ("cloud-config", ""):
        st.ready(False, R.INVALID_SPEC, f"bootstrap format {snap.bootstrap.format!r} is not supported by this provider (cloud-config only)")
        return _with_events(snap, Plan(status=st.status))

    fd_name = capi_failure_domain(snap.capi_machine) if capi else None
    fd_name = fd_name or m.spec.failure_domain
    if capi and not fd_name and not (m.spec.provider_ref and m.spec.provider_ref.name):
        # banlieue places it (issue 17): the domain chosen before (status.failureDomain, written
        # with Cloning before any clone, so it never moves) or the one chosen now.
        fd_name = (m.status.failure_domain if m.status else None) or (snap.domain_choice.name if snap.domain_choice else None)
        if not fd_name:
            message = snap.domain_choice.message if snap.domain_choice else "waiting for a failure domain to be chosen"
            st.ready(False, R.FAILURE_DOMAIN_NOT_FOUND, message)
            return _with_events(snap, Plan(status=st.status))
    try:
        placement = resolve_placement(m, fd_name, snap.providers, capi=capi)
        vm_spec = build_vm_spec(m, placement, snap.bootstrap.data if snap.bootstrap else None)
    except PlacementError as err:
        st.ready(False, err.reason, err.message)
        return _with_events(snap, Plan(status=st.status))
    refused_spec = snap.spec_error(vm_spec) if snap.spec_error is not None else None
    if refused_spec is not None and not (m.status and m.status.instance_uuid):
        # Before any vCenter call: nothing is cloned. A VM that exists is looked up and kept as
        # it is below (power requests carried out, the refusal a pending change).
        st.ready(False, R.INVALID_SPEC, refused_spec)
        return _with_events(snap, Plan(status=st.status))

    if snap.connection_error is not None:
        reason, message = snap.connection_error
        st.ready(False, reason, f"Provider {placement.provider.metadata.name}: {message}")
        return _with_events(snap, Plan(status=st.status))
    if not snap.looked_up:
        return Plan(provider=placement.provider, connect=True)

    failure = snap.failure
    if failure is not None and failure.step in ("connect", "lookup"):
        started = clone_started(m.status) if m.status is not None else None
        if started is not None and snap.vm is None:
            # A clone may be running in a vCenter that stopped answering (hung, frozen): keep
            # the "Cloning ... since" marker, or the first pass that reaches it again would
            # not wait for that clone and would clone a second VM.
            at = started.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            st.ready(False, R.CLONING, f"{_failure_reason(failure)}: {failure.message}; cloning since {at}")
        else:
            st.ready(False, _failure_reason(failure), failure.message)
        return _with_events(snap, Plan(status=st.status, requeue_after=RETRY_SECONDS))

    vm = snap.vm
    status_now = m.status or VSphereMachineStatus()
    if vm is None:
        if status_now.instance_uuid and not (failure and failure.step == "create"):
            st.ready(False, R.VM_NOT_FOUND, f"VM {status_now.instance_uuid} ({status_now.vm_ref}) is no longer in vCenter: {replace_hint(m)}")
            st.vm_gone()
            return _with_events(snap, Plan(status=st.status))
        if refused_spec is not None:
            st.ready(False, R.INVALID_SPEC, refused_spec)  # never cloned from a spec refused
            return _with_events(snap, Plan(status=st.status))
        if failure is not None and failure.step == "create":
            reason = _failure_reason(failure)
            if reason == R.VM_NOT_FOUND:
                # create_vm returned this UID's VM before and it is gone: never clone it again,
                # even when the status this reconcile started from has no instanceUUID yet.
                st.ready(False, R.VM_NOT_FOUND, f"{failure.message}: {replace_hint(m)}")
                st.vm_gone()
                return _with_events(snap, Plan(status=st.status))
            if failure.reason == CLONE_OUTCOME_UNKNOWN:
                # The clone may still land: keep the "Cloning ... since" marker the guard below
                # reads (an overwrite let a retry clone a second VM for this UID), look the VM up
                # by UID on every pass, and clone again only once the clone would have timed out.
                first = clone_started(status_now) or snap.now
                at = first.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                st.ready(False, R.CLONING, f"{failure.message}; looking the VM up by UID, cloning since {at}")
                return _with_events(snap, Plan(status=st.status, requeue_after=CLONE_WAIT_SECONDS))
            st.ready(False, reason, failure.message)
            retry = reason in (R.CONNECT_FAILED, R.TLS_VERIFY_FAILED)
            return _with_events(snap, Plan(status=st.status, retry=retry, requeue_after=None if retry else _failure_requeue(snap, failure)))
        started = clone_started(status_now)
        if started is not None and snap.clone_task in ("queued", "running"):
            # The clone's own task still runs (its key is on the object): never a second clone,
            # however long it takes; the VM is looked up by UID again in a few seconds.
            st.ready(False, R.CLONING, _cloning_message(status_now))
            return _with_events(snap, Plan(status=st.status, requeue_after=CLONE_WAIT_SECONDS))
        if started is not None and snap.clone_task != "error":
            # (A clone task that failed left no VM: clone again at once, no window to wait out.)
            waited = (snap.now - started).total_seconds()
            if 0 <= waited < snap.clone_grace_seconds:
                # A clone started by an earlier reconcile (another process, or one cancelled
                # mid-task) may still be running in vCenter: wait for it to land instead of
                # cloning a second VM; clone again only once the task would have timed out.
                message = _cloning_message(status_now)
                if snap.clone_task == "unknown":
                    # The vCenter answered: whatever the marker said of an earlier failure (a
                    # vCenter that did not answer) no longer holds; say what is waited for.
                    at = started.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    until = (started + timedelta(seconds=snap.clone_grace_seconds)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    message = (f"the clone sent at {at} has no task vCenter names and is not in its history, and vCenter "
                               f"is cloning other VMs: looking the VM up by UID every {CLONE_WAIT_SECONDS:g} s, cloning "
                               f"again once no clone is in flight or at {until}; cloning since {at}")
                st.ready(False, R.CLONING, message)
                return _with_events(snap, Plan(status=st.status, requeue_after=min(CLONE_WAIT_SECONDS, snap.clone_grace_seconds - waited)))
        refused = refuses_new_machines(placement.provider)
        if refused is not None:
            # A Provider being deleted or a duplicate of another on the same vCenter takes no
            # new VM; the machine waits (Provider changes are watched) for a new placement.
            st.ready(False, *refused)
            return _with_events(snap, Plan(status=st.status))
        if snap.clone_not_before is not None and snap.now < snap.clone_not_before:
            # vCenter refused this machine's last clone and its back-off has not ended: a
            # reconcile caused by an event (its own status write, a Provider or Cluster change)
            # waits it out instead of cloning at once (on kube-apiserver such events made 37
            # CloneVM_Task in 12 s despite the requeue). The CloneFailed status stays as written.
            return _with_events(snap, Plan(requeue_after=(snap.clone_not_before - snap.now).total_seconds()))
        since = snap.now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        st.ready(False, R.CLONING, f"cloning template {vm_spec.template} into {placement.datacenter}/{placement.cluster} since {since}")
        st.status.failure_domain = placement.failure_domain
        return _with_events(snap, Plan(status=st.status, action=Action("create", spec=vm_spec), write_status_first=True))

    # Another VM carries this UID (ADR 0012 decision 9): the one kept is ``vm`` (recorded in
    # status, else the oldest); the other is destroyed when provably ours and empty, else
    # reported. Before anything else is done to the VM.
    tried = {d.moref for d in (*snap.duplicates_destroyed, *snap.duplicates_left)}
    doomed = [d for d in vm.duplicates if d.removable and d.moref not in tried]
    if doomed:
        return Plan(action=Action("destroy_duplicate", moref=doomed[0].moref), provider=placement.provider)
    dup_events = _duplicate_condition(snap, st, vm)

    # The VM exists: converge hardware when it drifted, or until provisioned once.
    provisioned_before = bool(status_now.initialization and status_now.initialization.provisioned)
    create_failed = failure is not None and failure.step == "create"
    # A VM that runs (its guest booted) is handled as a provisioned one, provisioned or not: a
    # spec edit made while it was cloned (a class edit reaching VMs still waiting for their IP
    # address) waits for a power-off like any other, never InvalidSpec (issue 19, ADR 0012).
    in_use = provisioned_before or vm.power_state != "PoweredOff"
    nic_names = [n.name for n in vm_spec.nics]
    if refused_spec is not None and not in_use:
        st.vm(vm, placement.failure_domain, nic_names)
        st.ready(False, R.INVALID_SPEC, refused_spec)
        return _with_events(snap, Plan(status=st.status), dup_events)
    if failure is not None and create_failed and not in_use:
        reason = _failure_reason(failure)
        st.vm(vm, placement.failure_domain, nic_names)
        st.ready(False, reason, failure.message)
        retry = reason in (R.CONNECT_FAILED, R.TLS_VERIFY_FAILED)
        return _with_events(snap, Plan(status=st.status, retry=retry, requeue_after=None if retry else _failure_requeue(snap, failure)))
    # A VM in use: what can change now is converged, the rest is HardwareChangePending
    # (``hardware``, ADR 0012); power is handled whatever is pending.
    target, pending = effective_spec(vm, vm_spec) if in_use else (vm_spec, ())
    if failure is not None and create_failed:
        pending = (*pending, Pending(R.CHANGE_FAILED, f"the change was not applied: {failure.message}"))
    if refused_spec is not None:
        # A spec refused before any vCenter call (guestinfo over 64 KiB, two NICs with one guest
        # interface name) leaves a VM in use as it is, not NotReady (issue 19, ADR 0012).
        pending = (*pending, Pending(R.CHANGE_FAILED, f"the spec is not applied, the VM is kept as it is: {refused_spec}"))
    # Converged by this process to this very spec, its status write deferred (ADR 0011): no
    # second converge. Once provisioned is stored, drift is checked as usual.
    converged = (snap.converged or create_failed or refused_spec is not None
                 or (not provisioned_before and snap.converged_spec == target))
    # Guest data (cloud-init metadata: addresses, gateways, name servers) is converged like
    # hardware: a day-2 network edit must reach the VM (Backend.guest_data_drifted).
    guest_drift = not converged and snap.guest_data_drifted is not None and snap.guest_data_drifted(vm, target)
    if not converged and (not provisioned_before or drifted(vm, target) or guest_drift):
        return Plan(action=Action("create", spec=target), provider=placement.provider)

    st.vm(vm, placement.failure_domain, nic_names)
    hw_events = (*(_hardware_condition(snap, st, pending) if in_use else ()), *dup_events)
    want = m.spec.power_state.value
    if failure is not None and failure.step == "power":
        if failure.reason == POWER_OUTCOME_UNKNOWN:
            # The power call may have reached vCenter: the backend reads runtime.powerState (and
            # waits for a running power task) before it sends anything again (ADR 0012).
            st.ready(False, R.POWERING_ON if want == "PoweredOn" else R.POWERING_OFF, failure.message)
            return _with_events(snap, Plan(status=st.status, requeue_after=CLONE_WAIT_SECONDS), hw_events)
        soft = failure.reason == "PowerOffPending"
        st.ready(False, R.POWERING_OFF if soft else R.CONNECT_FAILED, failure.message)
        return _with_events(snap, Plan(status=st.status, requeue_after=POWER_OFF_POLL_SECONDS if soft else None, retry=not soft), hw_events)
    if vm.power_state != want and not snap.powered and not snap.power_pending:
        action = Action("power", state=cast(PowerStateName, want), off_mode=m.spec.power_off_mode.value, soft_timeout=_soft_timeout(m))
        return Plan(action=action, provider=placement.provider)

    events: list[Event] = list(hw_events)
    if snap.powered:
        events.append(power_state_event(vm))
    pid = provider_id(vm)
    if pid is None:
        # vCenter has not given the VM a BIOS UUID (yet): a providerID of "vsphere://" alone
        # matches no Node (CAPV #1107), so write none and wait; provisioned needs it.
        st.ready(False, R.WAITING_FOR_BIOS_UUID, f"VM {vm.name} has no BIOS UUID (config.uuid {vm.bios_uuid!r}) yet: "
                 "spec.providerID is written once vCenter reports one")
        return _with_events(snap, Plan(status=st.status, requeue_after=IP_POLL_SECONDS), events)
    write_pid, pid_events = _provider_id_write(snap, st, pid)
    events.extend(pid_events)
    if vm.power_state != want:
        st.ready(False, R.POWERING_ON if want == "PoweredOn" else R.POWERING_OFF, f"VM is {vm.power_state}, want {want}")
        return _with_events(snap, Plan(status=st.status, provider_id=write_pid, requeue_after=POWER_OFF_POLL_SECONDS), events)
    # Provisioned once the machine is usable: powered on with a usable address (CAPV #249, #938),
    # or powered off as asked, or without a NIC (no address can ever come). Never taken back.
    if want != "PoweredOn" or st.status.addresses or not vm.nics or provisioned_before:
        st.status.initialization = Initialization(provisioned=True)
    if want == "PoweredOn" and not st.status.addresses and vm.nics:
        reported = f" (reported: {', '.join(vm.addresses)}, none usable)" if vm.addresses else ""
        st.ready(False, R.WAITING_FOR_IP_ADDRESS, f"waiting for VMware Tools to report a usable IP address{reported}")
        return _with_events(snap, Plan(status=st.status, provider_id=write_pid, requeue_after=IP_POLL_SECONDS), events)
    st.ready(True, R.PROVISIONED, f"VM {vm.name} is {vm.power_state}" + (f" at {st.status.addresses[0].address}" if st.status.addresses else ""))
    # A change vCenter refused is tried again now and then (the VM stays Ready meanwhile).
    requeue = RETRY_SECONDS if create_failed else STEADY_RESYNC_SECONDS
    return _with_events(snap, Plan(status=st.status, provider_id=write_pid, requeue_after=requeue), events)


def _failure_requeue(snap: Snapshot, failure: Failure) -> float:
    if missing_object(failure):
        return missing_retry_seconds(snap.missing_retries)
    if task_failed(failure):
        return task_failure_retry_seconds(snap.task_failures + 1)  # this failure included
    return RETRY_SECONDS


def _provider_id_write(snap: Snapshot, st: _Status, pid: str) -> tuple[str | None, list[Event]]:
    """The providerID to write (None: nothing to write) and the Events to record. Once written,
    ``spec.providerID`` never changes (the Node and CAPI's Machine are matched on it, CAPV
    #1756): a VM whose BIOS UUID changed since sets the ``ProviderIDMatchesVM`` condition False
    (``BIOSUUIDChanged``) with a Warning Event on the change, and keeps the written value."""
    written = snap.machine.spec.provider_id
    if not written:
        return pid, []
    stored = get_condition(snap.machine.status.conditions if snap.machine.status else None, PROVIDER_ID_MATCHES_VM)
    if written == pid:
        if stored is not None and stored.status != "True":
            st.cond(PROVIDER_ID_MATCHES_VM, True, "Matches", f"the VM's BIOS UUID matches spec.providerID {written}")
        return None, []
    message = (f"the VM's BIOS UUID is now {pid.removeprefix(PROVIDER_ID_PREFIX)} but spec.providerID is {written}: "
               "spec.providerID is never rewritten (the Node is matched on it); if the VM was replaced or "
               "re-registered by hand, delete this machine to get a new one")
    st.cond(PROVIDER_ID_MATCHES_VM, False, R.BIOS_UUID_CHANGED, message)
    if stored is not None and stored.status == "False" and stored.reason == R.BIOS_UUID_CHANGED:
        return None, []
    return None, [Event("Warning", R.BIOS_UUID_CHANGED, message)]


_SINCE = re.compile(r" since (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$")


def _cloning_message(status: VSphereMachineStatus) -> str:
    cond = get_condition(status.conditions, READY)
    return cond.message if cond is not None else ""


def clone_started(status: VSphereMachineStatus) -> datetime | None:
    """When the clone recorded in a ``Ready`` False ``Cloning`` condition started: its message
    ends with ``since <RFC 3339>`` (lastTransitionTime cannot tell: it keeps the time the status
    became False). None when Ready is not Cloning or the time is absent."""
    cond = get_condition(status.conditions, READY)
    if cond is None or cond.reason != R.CLONING:
        return None
    match = _SINCE.search(cond.message or "")
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _hardware_condition(snap: Snapshot, st: _Status, pending: tuple[Pending, ...]) -> tuple[Event, ...]:
    """Set ``HardwareChangePending`` from ``pending``; a Warning event when what is pending
    changes (never twice for the same message)."""
    before = get_condition(snap.machine.status.conditions if snap.machine.status else None, HARDWARE_CHANGE_PENDING)
    top = summary(pending)
    if top is None:
        if before is not None:
            # Only a machine that had something pending carries the condition: no extra status
            # write per machine in the common case (ADR 0011).
            st.cond(HARDWARE_CHANGE_PENDING, False, R.HARDWARE_IN_SPEC, "")
        return ()
    st.cond(HARDWARE_CHANGE_PENDING, True, top.reason, top.message)
    if before is not None and before.status is ConditionStatus.TRUE and before.message == top.message:
        return ()
    return (Event("Warning", "HardwareChangePending", top.message),)


def _describe(vm: VMInfo | DuplicateVM) -> str:
    return f"{vm.name} ({vm.moref}, instance UUID {vm.instance_uuid})"


def _duplicate_condition(snap: Snapshot, st: _Status, vm: VMInfo) -> tuple[Event, ...]:
    """Set ``VMUnique`` from ``vm.duplicates`` and what this reconcile destroyed; one Warning
    event naming both VMs when that changes (never twice for the same message)."""
    before = get_condition(snap.machine.status.conditions if snap.machine.status else None, VM_UNIQUE)
    destroyed = snap.duplicates_destroyed
    left = [d for d in vm.duplicates if d.moref not in {x.moref for x in destroyed}]
    events: list[Event] = []
    recorded = bool(snap.machine.status and snap.machine.status.instance_uuid == vm.instance_uuid)
    kept = f"kept {_describe(vm)} ({'recorded in status.instanceUUID' if recorded else 'the oldest'})"
    for d in destroyed:
        events.append(Event("Warning", "DuplicateVMDestroyed",
                            f"VM {_describe(d)} also carried this machine's UID; {kept}; destroyed it: created by a clone "
                            "of a template, powered off and never powered on"))
    if not left:
        if before is not None and before.status is not ConditionStatus.TRUE:
            st.cond(VM_UNIQUE, True, R.UNIQUE, f"only {_describe(vm)} carries this machine's UID")
        return tuple(events)
    message = f"{len(left) + 1} VMs carry this machine's UID: {kept}; " + "; ".join(
        f"left {_describe(d)}: {d.why} (delete it in vCenter if it is not needed)" for d in left)
    st.cond(VM_UNIQUE, False, R.DUPLICATE_VM, message)
    if before is None or before.status is ConditionStatus.TRUE or before.message != message:
        events.append(Event("Warning", R.DUPLICATE_VM, message))
    return tuple(events)


def recorded_provider(m: VSphereMachine) -> str | None:
    """The Provider a machine records: ``spec.providerRef.name``, else the
    ``banlieue.io/provider`` label the VirtualMachine controller sets; None when neither."""
    if m.spec.provider_ref is not None and m.spec.provider_ref.name:
        return m.spec.provider_ref.name
    return (m.metadata.labels or {}).get(LABEL_PROVIDER) or None


def _decide_delete(snap: Snapshot, st: _Status, has_finalizer: bool, capi: bool) -> Plan:
    m = snap.machine
    if not has_finalizer:
        return Plan()
    st.ready(False, R.DELETING, "deleting the VM")
    fd_name = (capi_failure_domain(snap.capi_machine) if capi else None) or m.spec.failure_domain or (m.status.failure_domain if m.status else None)
    provider: Provider | None = None
    last: str | None = None
    try:
        provider = resolve_placement(m, fd_name, snap.providers, capi=capi).provider
    except PlacementError as err:
        recorded = recorded_provider(m)
        if recorded is not None and recorded in snap.known_connections:
            # The Provider object is gone but this process still holds its last connection.
            last = recorded
            st.ready(False, R.DELETING, f"deleting the VM with the last known connection of Provider {recorded} ({err.message})")
        elif m.status is not None and m.status.instance_uuid:
            # The Provider (or its failure domain) is gone: nothing can reach the VM any more.
            note = f"{err.message}; dropping the finalizer without deleting VM {m.status.instance_uuid}: delete it in vCenter by hand"
            return Plan(status=st.status, remove_finalizer=True, events=(Event("Warning", "ProviderGone", note),))
        else:
            # Never provisioned and no place resolves: no VM can exist for it.
            return Plan(status=st.status, remove_finalizer=True, events=(Event("Normal", "Deleted", f"nothing to delete: {err.message}"),))
    if provider is not None and snap.connection_error is not None:
        reason, message = snap.connection_error
        name = provider.metadata.name or ""
        if name in snap.known_connections:
            # The Secret went first (namespace deletion): the last good connection still works.
            last = name
            st.ready(False, R.DELETING, f"deleting the VM with the last known connection of Provider {name} ({reason}: {message})")
        else:
            st.ready(False, R.DELETING, f"cannot reach vCenter to delete the VM ({reason}: {message}); retrying")
            return _with_events(snap, Plan(status=st.status, requeue_after=RETRY_SECONDS))
    if not snap.looked_up:
        return Plan(status=st.status, provider=provider, connect=True, last_known=last)
    failure = snap.failure
    if failure is not None:
        if failure.reason == "PowerOffPending":
            st.ready(False, R.DELETING, f"waiting for the guest to shut down: {failure.message}")
            return _with_events(snap, Plan(status=st.status, requeue_after=POWER_OFF_POLL_SECONDS))
        st.ready(False, R.DELETING, f"cannot delete the VM yet ({failure.reason}: {failure.message}); retrying")
        # A destroy whose outcome is unknown is looked at again soon: the VM may be gone already,
        # or its task still running (waited for, never sent twice; ADR 0012).
        unknown = failure.reason == DESTROY_OUTCOME_UNKNOWN
        return _with_events(snap, Plan(status=st.status, requeue_after=CLONE_WAIT_SECONDS if unknown else RETRY_SECONDS))
    if snap.destroyed or snap.vm is None:
        events = [Event("Normal", "Deleted", f"VM {m.metadata.name} destroyed")] if snap.destroyed else []
        return Plan(status=st.status, remove_finalizer=True, events=tuple(events))
    action = Action("destroy", off_mode=m.spec.power_off_mode.value, soft_timeout=_soft_timeout(m))
    return _with_events(snap, Plan(status=st.status, action=action, write_status_first=True, provider=provider, last_known=last))


def _soft_timeout(m: VSphereMachine) -> float:
    return float(m.spec.guest_soft_power_off_timeout_seconds or DEFAULT_GUEST_SOFT_POWER_OFF_TIMEOUT_SECONDS)


def waiting_for_cluster_api(machine: VSphereMachine, now: datetime, served: bool) -> VSphereMachineStatus:
    """The status of a CAPI-path machine (label ``cluster.x-k8s.io/cluster-name``) while the CAPI
    Machine and Cluster kinds cannot be read: ``Ready`` False ``WaitingForClusterAPI``, the
    message saying whether they are not served (``served`` False: CAPI's CRDs are not installed;
    looked up every few seconds) or served with caches still syncing. Everything else of the
    current status is kept."""
    status = (machine.status or VSphereMachineStatus()).model_copy(deep=True)
    status.observed_generation = machine.metadata.generation
    gv = f"{CAPI_MACHINE.group}/{CAPI_MACHINE.version}"
    message = (
        f"waiting for the Cluster API caches of Machine and Cluster ({gv}) to sync"
        if served
        else f"waiting for Cluster API: Machine and Cluster ({gv}) are not served by the API server "
        f"(install Cluster API, or remove the label {CAPI_LABEL_CLUSTER_NAME} to manage this machine without it)"
    )
    status.conditions = set_condition(status.conditions, READY, False, R.WAITING_FOR_CLUSTER_API, message,
                                      machine.metadata.generation, now)
    return status
