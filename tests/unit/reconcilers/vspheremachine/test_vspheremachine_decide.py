"""VSphereMachine decide: one table row per rule (SPEC §3), and no input makes it raise."""

from __future__ import annotations

import base64
import gzip
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from banlieue.api.conditions import HARDWARE_CHANGE_PENDING, PAUSED, READY, get_condition
from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.provider import Provider
from banlieue.backends.base import NicStatus, VMInfo
from banlieue.backends.vsphere import guestinfo
from banlieue.reconcilers.vspheremachine.decide import (
    STEADY_RESYNC_SECONDS,
    Failure,
    Plan,
    Snapshot,
    clone_started,
    decide,
    machine_addresses,
)
from banlieue.reconcilers.vspheremachine.placement import BootstrapData, DomainChoice, read_bootstrap

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
FIN = "infrastructure.banlieue.io/vspheremachine"
UID = "11111111-2222-3333-4444-555555555555"


def machine(
    spec: dict[str, Any] | None = None, *, finalizer: bool = True, deleting: bool = False, status: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, capi_owner: bool = False,
) -> VSphereMachine:
    meta: dict[str, Any] = {"name": "m1", "namespace": "ns", "uid": UID, "generation": 2}
    if finalizer:
        meta["finalizers"] = [FIN]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:00:00Z"
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if capi_owner:
        meta["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "cm1", "uid": "u", "controller": True}]
    base = {"providerRef": {"name": "vc1"}, "datacenter": "DC0", "cluster": "DC0_C0", "template": "ubuntu", "numCPUs": 2, "memoryMiB": 2048}
    return VSphereMachine.from_wire({"metadata": meta, "spec": {**base, **(spec or {})}, **({"status": status} if status else {})})


def provider(name: str = "vc1", fds: tuple[tuple[str, str, str], ...] = (("vc1-dc0-c0", "DC0", "DC0_C0"),)) -> Provider:
    return Provider.from_wire({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "providerClassRef": {"name": "vsphere"},
            "connection": {"endpoint": "vc", "credentialsRef": {"name": "creds"}},
            "capabilities": {
                "storageClasses": [{"name": "gold", "target": {"datastore": "LocalDS_0"}}, {"name": "pod", "target": {"datastoreCluster": "POD"}}],
                "networkClasses": [{"name": "prod", "target": {"distributedPortGroup": "DC0_DVPG0"}}],
            },
        },
        "status": {"failureDomains": [{"name": n, "attributes": {"raw": {"datacenter": d, "cluster": c}}} for n, d, c in fds]},
    })


BIOS = "4210e3d5-8c1a-4f3b-9d2e-1a2b3c4d5e6f"
NIC = NicStatus(mac_address="00:50:56:00:00:01", network="DC0_DVPG0", ip_addresses=())


def vm(power: str = "PoweredOn", ips: tuple[str, ...] = ("10.0.0.5",), cpus: int = 2, mem: int = 2048,
       bios: str = BIOS, nics: tuple[NicStatus, ...] | None = None) -> VMInfo:
    """A VM with one NIC reporting ``ips`` (guest.ipAddress: the first), unless ``nics`` is given."""
    nics = (replace(NIC, ip_addresses=ips),) if nics is None else nics
    return VMInfo(uid=UID, moref="vm-42", name="m1", power_state=power, bios_uuid=bios, instance_uuid="inst-1",  # type: ignore[arg-type]
                  num_cpus=cpus, num_cores_per_socket=1, memory_mib=mem, disks_gib=(20,), nics=nics, ip_address=ips[0] if ips else None)


PROV = (provider(),)
CAPI_MACHINE = {"metadata": {"name": "cm1"}, "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "boot"}, "failureDomain": "vc1-dc0-c0"}}
CLUSTER = {"metadata": {"name": "c1"}, "spec": {}, "status": {"initialization": {"infrastructureProvisioned": True}}}
BOOT = BootstrapData(b"#cloud-config\n", "cloud-config")
CAPI_LABELS = {"cluster.x-k8s.io/cluster-name": "c1"}
PROVISIONED = {"instanceUUID": "inst-1", "initialization": {"provisioned": True}}
RECENT_CLONING = {"failureDomain": "vc1-dc0-c0", "conditions": [
    {"type": "Ready", "status": "False", "reason": "Cloning", "message": "cloning template ubuntu into DC0/DC0_C0 since 2026-01-02T03:04:03Z",
     "lastTransitionTime": "2026-01-02T03:04:03Z"},
    {"type": "Paused", "status": "False", "reason": "NotPaused", "message": "", "lastTransitionTime": "2026-01-02T03:04:03Z"}]}
"""A machine whose Cloning status was written 2 s before NOW (progress changes are deferred)."""


def cloning_since(since: str) -> dict[str, Any]:
    return {"type": "Ready", "status": "False", "reason": "Cloning", "message": f"cloning template ubuntu into DC0/DC0_C0 since {since}",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def snap(m: VSphereMachine, **kw: Any) -> Snapshot:
    return Snapshot(machine=m, now=NOW, **kw)


def ready(plan: Plan) -> tuple[str, str] | None:
    cond = get_condition(plan.status.conditions if plan.status else None, READY)
    return (cond.status.value, cond.reason) if cond else None


def looked(m: VSphereMachine, v: VMInfo | None = None, **kw: Any) -> Snapshot:
    return snap(m, providers=PROV, looked_up=True, vm=v, **kw)


CASES: list[Any] = [
    # (snapshot, expected Ready (status, reason) or None, checks on the plan)
    pytest.param(snap(machine(finalizer=False)), None, {"add_finalizer": True}, id="standalone-adds-finalizer-first"),
    pytest.param(snap(machine(), providers=PROV), None, {"connect": True}, id="resolved-then-connect-and-look-up"),
    pytest.param(snap(machine({"providerRef": {"name": "nope"}})), ("False", "ProviderNotFound"), {}, id="provider-missing"),
    pytest.param(snap(machine({"providerRef": None})), ("False", "InvalidSpec"), {"message": "set spec.failureDomain or spec.providerRef.name"},
                 id="no-provider-nor-failure-domain"),
    pytest.param(snap(machine({"failureDomain": "zz"}), providers=PROV), ("False", "FailureDomainNotFound"), {}, id="failure-domain-unknown"),
    pytest.param(snap(machine({"template": None}), providers=PROV), ("False", "InvalidSpec"), {}, id="template-required"),
    pytest.param(snap(machine({"disks": [{"name": "os", "sizeGiB": 20, "storageClass": "silver"}]}), providers=PROV),
                 ("False", "InvalidSpec"), {"message": "storage class 'silver' is not offered"}, id="unknown-storage-class"),
    pytest.param(snap(machine({"disks": [{"name": "os", "sizeGiB": 20, "storageClass": "pod"}]}), providers=PROV),
                 ("False", "InvalidSpec"), {"message": "datastore cluster"}, id="datastore-cluster-unsupported"),
    pytest.param(snap(machine({"network": {"devices": [{"name": "eth0", "networkClass": "dev"}]}}), providers=PROV),
                 ("False", "InvalidSpec"), {"message": "network class 'dev'"}, id="unknown-network-class"),
    pytest.param(snap(machine({"bootstrapDataSecretRef": {"name": "b"}}), providers=PROV, bootstrap_error="Secret b not found"),
                 ("False", "WaitingForBootstrapData"), {"message": "Secret b not found", "requeue_after": 30.0}, id="standalone-waits-for-bootstrap-secret"),
    pytest.param(snap(machine(), providers=PROV, connection_error=("SecretMissing", "Secret ns/creds not found")),
                 ("False", "SecretMissing"), {}, id="credentials-secret-missing"),
    # A certificate that does not verify is said as an unreachable vCenter (what listens on an
    # endpoint is not told; the Provider's rule).
    pytest.param(looked(machine(), failure=Failure("lookup", "TLSVerifyFailed", "bad cert")), ("False", "ConnectFailed"),
                 {"requeue_after": 60.0}, id="lookup-tls-failure"),
    pytest.param(looked(machine()), ("False", "Cloning"), {"action": "create", "write_status_first": True}, id="not-found-clones"),
    pytest.param(looked(machine(status={"conditions": [cloning_since("2026-01-02T03:00:05Z")]})), ("False", "Cloning"),
                 {"action": None, "requeue_after": 5.0, "message": "since 2026-01-02T03:00:05Z"}, id="clone-started-earlier-waits-for-it"),
    pytest.param(looked(machine(status={"conditions": [cloning_since("2026-01-02T02:50:00Z")]})), ("False", "Cloning"),
                 {"action": "create", "message": "since 2026-01-02T03:04:05Z"}, id="clone-grace-expired-clones-again"),
    pytest.param(looked(machine(), failure=Failure("create", "TemplateNotFound", "no tpl")), ("False", "TemplateNotFound"),
                 {"requeue_after": 5.0, "retry": False}, id="template-not-found"),
    pytest.param(looked(machine(), failure=Failure("create", "DatastoreNotFound", "no ds")), ("False", "InvalidSpec"), {}, id="datastore-not-found"),
    # A NIC's MAC another VM has (or one vCenter refused in a clone): its own reason, not
    # InvalidSpec or CloneFailed with the word in the message; re-checked with a refused clone's
    # back-off (5 s doubling to 60 s: decide.REFUSED_CLONE_REASONS).
    pytest.param(looked(machine(), failure=Failure("create", "MacAddressConflict", "NIC 'eth0': macAddress 00:50:56:00:00:01 is already used")),
                 ("False", "MacAddressConflict"), {"retry": False, "requeue_after": 5.0, "message": "NIC 'eth0': macAddress"},
                 id="mac-address-conflict"),
    pytest.param(looked(machine(), failure=Failure("create", "TaskFailed", "boom")), ("False", "CloneFailed"),
                 {"retry": False, "requeue_after": 5.0}, id="clone-failed-retries-in-seconds"),
    pytest.param(looked(machine(status=PROVISIONED)), ("False", "VMNotFound"), {"action": None}, id="vm-removed-by-hand-not-recreated"),
    pytest.param(looked(machine(), vm("PoweredOff")), None, {"action": "create"}, id="existing-unprovisioned-converges"),
    pytest.param(looked(machine(), vm("PoweredOff"), converged=True), None, {"action": "power"}, id="converged-then-power-on"),
    pytest.param(looked(machine(), vm(ips=()), converged=True, powered=True), ("False", "WaitingForIPAddress"),
                 {"provider_id": f"vsphere://{BIOS}", "provisioned": None}, id="powered-on-waits-for-ip"),
    pytest.param(looked(machine(), vm(), converged=True), ("True", "Provisioned"), {"provider_id": f"vsphere://{BIOS}"}, id="provisioned"),
    pytest.param(looked(machine({"providerID": f"vsphere://{BIOS}"}, status=PROVISIONED), vm()), ("True", "Provisioned"),
                 {"provider_id": None, "action": None, "requeue_after": STEADY_RESYNC_SECONDS}, id="steady-state-no-action-slow-resync"),
    # A CPU edit on a running VM waits for a power-off (HardwareChangePending), never InvalidSpec.
    pytest.param(looked(machine({"numCPUs": 4}, status=PROVISIONED), vm("PoweredOff", ips=())), None, {"action": "create"},
                 id="cpu-drift-of-a-stopped-vm-reconfigures"),
    pytest.param(looked(machine({"powerState": "PoweredOff"}, status=PROVISIONED), vm()), None, {"action": "power"}, id="power-off-requested"),
    pytest.param(looked(machine({"powerState": "PoweredOff"}, status=PROVISIONED), vm("PoweredOff", ips=())), ("True", "Provisioned"), {}, id="powered-off-as-requested-is-ready"),
    pytest.param(looked(machine({"powerState": "PoweredOff"}, status=PROVISIONED), vm(), failure=Failure("power", "PowerOffPending", "guest")),
                 ("False", "PoweringOff"), {"requeue_after": 10.0}, id="soft-power-off-pending"),
    # Issue 19: a power call whose answer was lost is looked at again soon (the backend reads the
    # power state before sending anything again), not reported as a connection failure.
    pytest.param(looked(machine(status=PROVISIONED), vm("PoweredOff", ips=()),
                        failure=Failure("power", "PowerOutcomeUnknown", "power PoweredOn of m1: outcome unknown")),
                 ("False", "PoweringOn"), {"requeue_after": 5.0, "message": "outcome unknown"}, id="power-outcome-unknown-looks-again"),
    pytest.param(snap(machine(annotations={"cluster.x-k8s.io/paused": ""}), providers=PROV), ("False", "Paused"),
                 {"paused": True, "action": None}, id="paused-annotation-standalone"),
    pytest.param(looked(machine(annotations={"cluster.x-k8s.io/paused": ""}, status={**PROVISIONED, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}), vm()),
                 ("True", "Provisioned"), {"paused": True, "action": None}, id="paused-keeps-ready-true"),
    # deletion
    pytest.param(snap(machine(deleting=True), providers=PROV), None, {"connect": True}, id="delete-connects-first"),
    pytest.param(looked(machine(deleting=True), vm()), ("False", "Deleting"), {"action": "destroy"}, id="delete-destroys"),
    pytest.param(looked(machine(deleting=True, status=PROVISIONED)), ("False", "Deleting"), {"remove_finalizer": True}, id="delete-vm-already-gone"),
    pytest.param(looked(machine(deleting=True), destroyed=True), ("False", "Deleting"), {"remove_finalizer": True, "event": "Deleted"}, id="delete-done"),
    pytest.param(snap(machine(deleting=True, status=PROVISIONED), providers=()), ("False", "Deleting"),
                 {"remove_finalizer": True, "event": "ProviderGone"}, id="delete-provider-gone"),
    pytest.param(snap(machine(deleting=True), providers=PROV, connection_error=("SecretMissing", "gone")), ("False", "Deleting"),
                 {"remove_finalizer": False, "requeue_after": 60.0, "message": "SecretMissing"}, id="delete-secret-missing-retries"),
    pytest.param(looked(machine(deleting=True), vm(), failure=Failure("destroy", "PowerOffPending", "guest")), ("False", "Deleting"),
                 {"requeue_after": 10.0}, id="delete-waits-for-guest-shutdown"),
    pytest.param(looked(machine(deleting=True), vm(), failure=Failure("destroy", "DestroyOutcomeUnknown", "destroy of m1: outcome unknown")),
                 ("False", "Deleting"), {"remove_finalizer": False, "requeue_after": 5.0}, id="delete-outcome-unknown-not-done-looks-again"),
    pytest.param(snap(machine(deleting=True, finalizer=False)), None, {"remove_finalizer": False}, id="delete-without-finalizer-noop"),
    # CAPI path
    pytest.param(snap(machine(finalizer=False, labels=CAPI_LABELS)), ("False", "WaitingForOwner"), {"add_finalizer": False}, id="capi-waits-for-owner"),
    pytest.param(snap(machine(finalizer=False, labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE), ("False", "WaitingForCluster"),
                 {"add_finalizer": False}, id="capi-waits-for-cluster"),
    pytest.param(snap(machine(finalizer=False, labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE,
                      cluster={**CLUSTER, "spec": {"paused": True}}), ("False", "Paused"), {"paused": True, "add_finalizer": False}, id="capi-cluster-paused"),
    pytest.param(snap(machine(deleting=True, labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE, providers=PROV,
                      cluster={**CLUSTER, "metadata": {"name": "c1", "annotations": {"cluster.x-k8s.io/paused": "true"}}}),
                 ("False", "Paused"), {"paused": True, "action": None, "remove_finalizer": False}, id="capi-paused-blocks-deletion"),
    pytest.param(snap(machine(finalizer=False, labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE, cluster=CLUSTER), None,
                 {"add_finalizer": True}, id="capi-adds-finalizer-once-cluster-found"),
    pytest.param(snap(machine(labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE, cluster={**CLUSTER, "status": {}}),
                 ("False", "WaitingForClusterInfrastructure"), {}, id="capi-waits-for-cluster-infrastructure"),
    pytest.param(snap(machine(labels=CAPI_LABELS, capi_owner=True), capi_machine={"spec": {}}, cluster=CLUSTER, providers=PROV),
                 ("False", "WaitingForBootstrapData"), {"requeue_after": None}, id="capi-waits-for-bootstrap-data"),
    pytest.param(snap(machine(labels=CAPI_LABELS, capi_owner=True), capi_machine=CAPI_MACHINE, cluster=CLUSTER, providers=PROV,
                      bootstrap=BootstrapData(b"{}", "ignition")), ("False", "InvalidSpec"), {"message": "ignition"}, id="capi-ignition-unsupported"),
    # Issue 17: a CAPI machine with no failure domain and no Provider is placed by banlieue.
    pytest.param(snap(machine({"providerRef": None, "datacenter": None, "cluster": None}, labels=CAPI_LABELS, capi_owner=True),
                      capi_machine={**CAPI_MACHINE, "spec": {"bootstrap": {"dataSecretName": "boot"}}}, cluster=CLUSTER,
                      bootstrap=BOOT, providers=PROV,
                      domain_choice=DomainChoice(None, "Machine.spec.failureDomain is not set and Cluster c1 publishes no failure domain")),
                 ("False", "FailureDomainNotFound"), {"message": "Cluster c1 publishes no failure domain"}, id="capi-no-failure-domain-none-fits"),
    pytest.param(Snapshot(machine=machine({"providerRef": None, "datacenter": None, "cluster": None}, labels=CAPI_LABELS, capi_owner=True),
                          now=NOW, capi_machine={**CAPI_MACHINE, "spec": {"bootstrap": {"dataSecretName": "boot"}}}, cluster=CLUSTER,
                          bootstrap=BOOT, providers=PROV, looked_up=True, domain_choice=DomainChoice("vc1-dc0-c0")),
                 ("False", "Cloning"), {"action": "create", "spec_dc": ("DC0", "DC0_C0"), "failure_domain": "vc1-dc0-c0"},
                 id="capi-no-failure-domain-chosen-by-banlieue-recorded-before-clone"),
    pytest.param(Snapshot(machine=machine({"providerRef": None, "datacenter": None, "cluster": None}, labels=CAPI_LABELS, capi_owner=True,
                                          status={"failureDomain": "vc1-dc0-c0"}),
                          now=NOW, capi_machine={**CAPI_MACHINE, "spec": {"bootstrap": {"dataSecretName": "boot"}}}, cluster=CLUSTER,
                          bootstrap=BOOT, providers=(provider(fds=(("vc1-dc0-c0", "DC0", "DC0_C0"), ("vc1-dc0-c1", "DC0", "DC0_C1"))),),
                          looked_up=True, domain_choice=DomainChoice("vc1-dc0-c1")),
                 None, {"action": "create", "spec_dc": ("DC0", "DC0_C0")}, id="capi-no-failure-domain-chosen-once-never-moves"),
    pytest.param(snap(machine({"providerRef": None, "datacenter": None, "cluster": None}, labels=CAPI_LABELS, capi_owner=True),
                      capi_machine=CAPI_MACHINE, cluster=CLUSTER, bootstrap=BOOT,
                      providers=(provider("vc0", (("other", "DC9", "C9"),)), provider())), None,
                 {"connect": True, "provider": "vc1"}, id="capi-failure-domain-picks-provider"),
    pytest.param(Snapshot(machine=machine({"providerRef": None, "datacenter": None, "cluster": None}, labels=CAPI_LABELS, capi_owner=True),
                          now=NOW, capi_machine=CAPI_MACHINE, cluster=CLUSTER, bootstrap=BOOT, providers=PROV, looked_up=True),
                 ("False", "Cloning"), {"action": "create", "spec_dc": ("DC0", "DC0_C0"), "user_data": b"#cloud-config\n",
                                        "failure_domain": "vc1-dc0-c0"}, id="capi-clones-into-failure-domain"),
]


@pytest.mark.parametrize(("s", "want_ready", "checks"), CASES)
def test_decide(s: Snapshot, want_ready: tuple[str, str] | None, checks: dict[str, Any]) -> None:
    plan = decide(s)
    if want_ready is not None:
        assert ready(plan) == want_ready
    cond = get_condition(plan.status.conditions if plan.status else None, READY)
    for key, value in checks.items():
        if key == "action":
            assert (plan.action.kind if plan.action else None) == value
        elif key == "message":
            assert cond is not None and value in cond.message
        elif key == "paused":
            paused = get_condition(plan.status.conditions if plan.status else None, PAUSED)
            assert paused is not None and (paused.status.value == "True") == value
        elif key == "provisioned":
            assert plan.status is not None
            assert (plan.status.initialization.provisioned if plan.status.initialization else None) is value
        elif key == "event":
            assert value in [e.reason for e in plan.events]
        elif key == "provider":
            assert plan.provider is not None and plan.provider.metadata.name == value
        elif key == "spec_dc":
            assert plan.action is not None and plan.action.spec is not None
            assert (plan.action.spec.datacenter, plan.action.spec.cluster) == value
        elif key == "user_data":
            assert plan.action is not None and plan.action.spec is not None and plan.action.spec.user_data == value
        elif key == "failure_domain":
            assert plan.status is not None and plan.status.failure_domain == value
        else:
            assert getattr(plan, key) == value, key
    if plan.status is not None:
        assert get_condition(plan.status.conditions, READY) is not None, "Ready must always be present"
        assert plan.status.observed_generation == 2


def disks_vm(power: str, disks: dict[str, int], cpus: int = 2) -> VMInfo:
    """A provisioned VM whose disks carry names (``banlieue.disk.*`` labels)."""
    return replace(vm(power, ips=("10.0.0.5",) if power == "PoweredOn" else (), cpus=cpus),
                   disks_gib=tuple(disks.values()), disk_names=tuple(disks))


def disks_spec(disks: dict[str, int]) -> dict[str, Any]:
    return {"disks": [{"name": n, "sizeGiB": s} for n, s in disks.items()]}


THREE = {"os": 20, "logs": 5, "data": 50}
HARDWARE_CASES: list[Any] = [
    # (snapshot, Ready (status, reason), action, HardwareChangePending (status, reason)); issue 19.
    pytest.param(looked(machine({"numCPUs": 4, **disks_spec(THREE)}, status=PROVISIONED), disks_vm("PoweredOn", THREE)),
                 ("True", "Provisioned"), None, ("True", "WaitingForPowerOff"), id="cpu-edit-on-running-vm-pending-stays-ready"),
    pytest.param(looked(machine({"numCPUs": 4, "powerState": "PoweredOff", **disks_spec(THREE)}, status=PROVISIONED),
                        disks_vm("PoweredOn", THREE)),
                 None, "power", None, id="power-off-carried-out-although-cpu-edit-pending"),
    pytest.param(looked(machine({"numCPUs": 4, "powerState": "PoweredOff", **disks_spec(THREE)}, status=PROVISIONED),
                        disks_vm("PoweredOff", THREE)),
                 None, "create", None, id="cpu-edit-applied-once-powered-off"),
    pytest.param(looked(machine({"numCPUs": 4, **disks_spec(THREE)}, status=PROVISIONED), disks_vm("PoweredOff", THREE)),
                 None, "create", None, id="cpu-edit-applied-before-power-on"),
    pytest.param(looked(machine({"numCPUs": 4, "powerState": "PoweredOff", **disks_spec(THREE)}, status=PROVISIONED),
                        disks_vm("PoweredOn", THREE), failure=Failure("create", "InvalidSpec", "the VM is powered on")),
                 None, "power", None, id="refused-change-never-blocks-power"),
    pytest.param(looked(machine(disks_spec(THREE), status=PROVISIONED), disks_vm("PoweredOn", THREE),
                        failure=Failure("create", "InvalidSpec", "no free unit")),
                 ("True", "Provisioned"), None, ("True", "ChangeFailed"), id="refused-change-keeps-running-vm-ready"),
    pytest.param(looked(machine(disks_spec({"os": 20, "data": 50}), status=PROVISIONED), disks_vm("PoweredOn", THREE)),
                 ("True", "Provisioned"), None, ("True", "DiskRemovedFromSpec"), id="disk-removed-from-spec-kept-reported"),
    pytest.param(looked(machine(disks_spec({"os": 10, "logs": 5, "data": 50}), status=PROVISIONED), disks_vm("PoweredOn", THREE)),
                 ("True", "Provisioned"), None, ("True", "DiskShrinkRefused"), id="shrink-refused-stays-ready"),
    pytest.param(looked(machine(disks_spec({"os": 20, "data": 60}), status=PROVISIONED), disks_vm("PoweredOn", THREE)),
                 None, "create", None, id="grow-by-name-on-running-vm"),
    # The first disk is the OS disk whatever its name (issue 19): a rename is converged (its
    # label follows), never reported removed; a rename that shrinks it is refused like any shrink.
    pytest.param(looked(machine(disks_spec({"root": 20, "logs": 5, "data": 50}), status=PROVISIONED), disks_vm("PoweredOn", THREE)),
                 None, "create", None, id="os-disk-rename-converges"),
    pytest.param(looked(machine(disks_spec({"root": 10, "logs": 5, "data": 50}), status=PROVISIONED), disks_vm("PoweredOn", THREE),
                        converged=True),
                 ("True", "Provisioned"), None, ("True", "DiskShrinkRefused"), id="os-disk-rename-shrink-refused"),
    pytest.param(looked(machine(disks_spec(THREE), status={**PROVISIONED, "conditions": [
                     {"type": "HardwareChangePending", "status": "True", "reason": "WaitingForPowerOff", "message": "x",
                      "lastTransitionTime": "2026-01-02T03:00:00Z"}]}), disks_vm("PoweredOn", THREE)),
                 ("True", "Provisioned"), None, ("False", "HardwareInSpec"), id="pending-cleared-once-in-spec"),
]


@pytest.mark.parametrize(("s", "want_ready", "action", "pending"), HARDWARE_CASES)
def test_hardware_changes_on_provisioned_vms(
    s: Snapshot, want_ready: tuple[str, str] | None, action: str | None, pending: tuple[str, str] | None
) -> None:
    plan = decide(s)
    assert (plan.action.kind if plan.action else None) == action
    if want_ready is not None:
        assert ready(plan) == want_ready
    if pending is not None:
        cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
        assert cond is not None and (cond.status.value, cond.reason) == pending
        if pending[0] == "True":
            assert cond.message and "HardwareChangePending" in [e.reason for e in plan.events]


def test_an_empty_disk_list_never_advises_detaching_the_os_disk() -> None:
    """Issue 19 (new-user pass): ``disks: []`` on a class with VMs reported the boot disk with
    "detach or delete it in vCenter"; it is named the OS disk, kept, and to be put back first."""
    plan = decide(looked(machine({"disks": []}, status=PROVISIONED), disks_vm("PoweredOn", THREE), converged=True))
    assert ready(plan) == ("True", "Provisioned")
    cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
    assert cond is not None and cond.reason == "DiskRemovedFromSpec" and cond.message, cond
    first, rest = cond.message.split("; ", 1)
    assert first.startswith("disk os (20 GiB) is the VM's OS disk") and "put os back as the first disk" in first, first
    assert "detach it" not in first and "delete it" not in first and "disk data (50 GiB), logs (5 GiB)" in rest and "detach or delete it" in rest, rest


FW_DISKS = {"os": 20, "data": 50}


def fw_vm(power: str, firmware: str, data: str = "thin") -> VMInfo:
    return replace(disks_vm(power, FW_DISKS), firmware=firmware, disk_provisioning=("thick", data))  # type: ignore[arg-type]


def test_changes_waiting_for_a_power_off_are_one_cause_with_one_hint() -> None:
    """Secure boot and a CPU count edited together on a running VM: one WaitingForPowerOff cause
    ("firmware efi -> efi-secure, numCPUs 2 -> 4 is applied ..."), not the hint twice (behind a
    more actionable reason it read "...; WaitingForPowerOff: firmware ...; WaitingForPowerOff: numCPUs ...")."""
    spec = {**disks_spec(FW_DISKS), "firmware": "efi-secure", "numCPUs": 4,
            "disks": [{"name": "os", "sizeGiB": 20}, {"name": "data", "sizeGiB": 40}]}
    plan = decide(looked(machine(spec, status=PROVISIONED), fw_vm("PoweredOn", "efi"), converged=True))
    cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
    assert cond is not None and cond.reason == "DiskShrinkRefused", cond
    message = cond.message or ""
    assert message.count("WaitingForPowerOff") == 1 and message.count("is applied the next time") == 1, message
    assert "WaitingForPowerOff: firmware efi -> efi-secure, numCPUs 2 -> 4 is applied the next time" in message, message


@pytest.mark.parametrize(("spec", "running", "action", "pending", "says"), [
    # Issue 19: firmware and provisioning edits on provisioned VMs were silently never applied.
    ({"firmware": "efi"}, fw_vm("PoweredOn", "bios"), None, "FirmwareChangeRefused", "firmware bios -> efi is not applied"),
    ({"firmware": "efi", "powerState": "PoweredOff"}, fw_vm("PoweredOff", "bios"), None, "FirmwareChangeRefused",
     "does not boot with efi"),
    ({"firmware": "efi-secure"}, fw_vm("PoweredOn", "efi"), None, "WaitingForPowerOff", "firmware efi -> efi-secure is applied"),
    ({"firmware": "efi-secure"}, fw_vm("PoweredOff", "efi"), "create", None, None),
    ({"firmware": "efi", "disks": [{"name": "os", "sizeGiB": 20}, {"name": "data", "sizeGiB": 50, "provisioning": "thick"}]},
     fw_vm("PoweredOn", "efi"), None, "ProvisioningChangeRefused", "disk data is thin and the spec asks thick"),
    # The OS disk's provisioning is the template's (thick here): the class's default thin is no change.
    ({"firmware": "efi"}, fw_vm("PoweredOn", "efi"), None, None, None),
], ids=["bios-to-efi-running", "bios-to-efi-off", "secure-boot-waits", "secure-boot-applied-off", "provisioning", "in-spec"])
def test_firmware_and_provisioning_edits_are_reported_not_ignored(
    spec: dict[str, Any], running: VMInfo, action: str | None, pending: str | None, says: str | None
) -> None:
    plan = decide(looked(machine({**disks_spec(FW_DISKS), **spec}, status=PROVISIONED), running, converged=action is None))
    assert (plan.action.kind if plan.action else None) == action
    if action is None:
        assert ready(plan) == ("True", "Provisioned")
        cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
        if pending is None:
            assert cond is None
        else:
            assert cond is not None and cond.reason == pending and says in (cond.message or ""), cond
    else:
        assert plan.action is not None and plan.action.spec is not None and plan.action.spec.firmware == spec["firmware"]


def test_a_renamed_os_disk_is_not_reported_removed_and_keeps_its_size() -> None:
    running = disks_vm("PoweredOn", THREE)
    plan = decide(looked(machine(disks_spec({"root": 30, "logs": 5, "data": 50}), status=PROVISIONED), running))
    assert plan.action is not None and plan.action.spec is not None
    assert [(d.name, d.size_gib) for d in plan.action.spec.disks] == [("root", 30), ("logs", 5), ("data", 50)]
    after = decide(looked(machine(disks_spec({"root": 20, "logs": 5, "data": 50}), status=PROVISIONED), running, converged=True))
    assert get_condition(after.status.conditions if after.status else None, HARDWARE_CHANGE_PENDING) is None
    shrink = decide(looked(machine(disks_spec({"root": 10, "logs": 5, "data": 50}), status=PROVISIONED), running, converged=True))
    cond = get_condition(shrink.status.conditions if shrink.status else None, HARDWARE_CHANGE_PENDING)
    assert cond is not None and cond.reason == "DiskShrinkRefused" and "disk root is 20 GiB" in cond.message, cond
    assert "DiskRemovedFromSpec" not in cond.message and "detach" not in cond.message, cond.message


def test_a_removed_disk_is_named_with_its_size_and_an_edit_converges_by_name() -> None:
    running = disks_vm("PoweredOn", THREE, cpus=2)
    plan = decide(looked(machine({"numCPUs": 4, **disks_spec({"os": 20, "data": 60})}, status=PROVISIONED), running))
    # data grows to 60 by name; logs (the disk at index 1) is not touched; CPUs wait for a power-off.
    assert plan.action is not None and plan.action.spec is not None
    assert [(d.name, d.size_gib) for d in plan.action.spec.disks] == [("os", 20), ("data", 60)]
    assert plan.action.spec.num_cpus == 2
    after = decide(looked(machine({"numCPUs": 4, **disks_spec({"os": 20, "data": 60})}, status=PROVISIONED),
                          replace(running, disks_gib=(20, 5, 60)), converged=True))
    cond = get_condition(after.status.conditions if after.status else None, HARDWARE_CHANGE_PENDING)
    assert cond is not None and cond.reason == "DiskRemovedFromSpec"
    # Several causes: the condition's reason's own first, unprefixed (never "DiskRemovedFromSpec:
    # DiskRemovedFromSpec: ..." once displayed as "reason: message"), each other one named by its reason (issue 24 3d).
    assert cond.message.startswith("disk logs (5 GiB) is no longer in the spec"), cond.message
    assert "; WaitingForPowerOff: numCPUs 2 -> 4 is applied the next time" in cond.message, cond.message


def test_one_pending_cause_is_not_prefixed_and_several_are_ordered_by_reason() -> None:
    from banlieue.reconcilers.vspheremachine.hardware import Pending, summary

    assert summary((Pending("WaitingForPowerOff", "numCPUs 1 -> 2 ..."),)) == Pending("WaitingForPowerOff", "numCPUs 1 -> 2 ...")
    both = summary((Pending("WaitingForPowerOff", "cpu"), Pending("DiskShrinkRefused", "os"), Pending("DiskShrinkRefused", "data")))
    # The condition's own reason is never repeated in its message (was "DiskShrinkRefused: DiskShrinkRefused: os"
    # once displayed as "reason: message").
    assert both == Pending("DiskShrinkRefused", "os; data; WaitingForPowerOff: cpu")
    assert summary((Pending("DiskShrinkRefused", "os"), Pending("DiskShrinkRefused", "data"))) == Pending("DiskShrinkRefused", "os; data")
    # Several causes of another reason: that reason once, before all of them (was
    # "os; WaitingForPowerOff: firmware ...; WaitingForPowerOff: numCPUs ...").
    many = summary((Pending("WaitingForPowerOff", "firmware"), Pending("DiskShrinkRefused", "os"),
                    Pending("WaitingForPowerOff", "cpu"), Pending("DiskRemovedFromSpec", "logs")))
    assert many == Pending("DiskShrinkRefused", "os; DiskRemovedFromSpec: logs; WaitingForPowerOff: firmware; cpu")


def nics_vm(nics: dict[str, tuple[str, bool]]) -> VMInfo:
    """A running provisioned VM whose cards carry names: name -> (port group, connected)."""
    cards = tuple(NicStatus(mac_address=f"00:50:56:00:00:0{i}", network=net, ip_addresses=(), name=n, connected=c)
                  for i, (n, (net, c)) in enumerate(nics.items()))
    return replace(vm("PoweredOn"), nics=cards)


def nics_spec(nics: list[tuple[str, str]]) -> dict[str, Any]:
    return {"network": {"devices": [{"name": n, "portGroup": pg} for n, pg in nics]}}


AB = {"a": ("VM Network", True), "b": ("DC0_DVPG0", True)}
def test_status_addresses_follow_the_spec_nics_by_name_after_a_rename() -> None:
    """A NIC renamed in the spec (eth0 -> primary): its old card is kept disconnected (ADR 0012)
    while Tools may still report the old address, also as guest.ipAddress. The addresses are the
    spec NICs' in spec order, found by the name each card carries (never by position), then any
    other connected card's; a disconnected card's address (guest.ipAddress included) is not one
    the machine answers on."""
    cards = (NicStatus("00:50:56:00:00:01", "VM Network", ("10.0.0.5",), name="eth0", connected=False),
             NicStatus("00:50:56:00:00:02", "DC0_DVPG0", ("10.0.1.5",), name="eth1"),
             NicStatus("00:50:56:00:00:03", "VM Network", ("10.0.0.9",), name="primary"),
             NicStatus("00:50:56:00:00:04", "VM Network", ("10.0.2.5",)))
    running = replace(vm("PoweredOn"), nics=cards, ip_address="10.0.0.5")
    spec = nics_spec([("primary", "VM Network"), ("eth1", "DC0_DVPG0")])
    plan = decide(looked(machine(spec, status=PROVISIONED), running))
    assert plan.status is not None and plan.status.addresses is not None
    assert [a.address for a in plan.status.addresses] == ["10.0.0.9", "10.0.1.5", "10.0.2.5"]
    # Cards carrying no names yet (adopted, not converged): Tools' order, guest.ipAddress first.
    unnamed = replace(running, nics=tuple(replace(c, name=None, connected=True) for c in cards), ip_address="10.0.0.9")
    assert [a.address for a in machine_addresses(unnamed)] == ["10.0.0.9", "10.0.0.5", "10.0.1.5", "10.0.2.5"]


NIC_CASES: list[Any] = [
    # (spec NICs, VM cards, action, HardwareChangePending reason or "": none); issue 19, NICs by name.
    pytest.param([("b", "DC0_DVPG0"), ("a", "VM Network")], AB, None, "", id="reorder-changes-nothing"),
    pytest.param([("a", "VM Network")], {**AB, "b": ("DC0_DVPG0", False)}, None, "NicRemovedFromSpec",
                 id="removed-nic-kept-disconnected-reported"),
    pytest.param([("a", "VM Network")], AB, "create", None, id="removed-nic-still-connected-is-converged"),
    pytest.param([("a", "VM Network"), ("b", "VM Network")], AB, "create", None, id="network-edit-converged"),
    pytest.param([("a", "VM Network"), ("b", "DC0_DVPG0"), ("c", "VM Network")], AB, "create", None, id="added-nic-converged"),
    pytest.param([("a", "VM Network"), ("b", "DC0_DVPG0")], {**AB, "b": ("DC0_DVPG0", False)}, "create", None,
                 id="re-added-nic-reconnected"),
]


@pytest.mark.parametrize(("nics", "cards", "action", "pending"), NIC_CASES)
def test_nic_edits_on_provisioned_vms_follow_names(
    nics: list[tuple[str, str]], cards: dict[str, tuple[str, bool]], action: str | None, pending: str | None
) -> None:
    plan = decide(looked(machine(nics_spec(nics), status=PROVISIONED), nics_vm(cards)))
    assert (plan.action.kind if plan.action else None) == action
    if pending is not None:
        assert ready(plan) == ("True", "Provisioned")
        cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
        if not pending:
            assert cond is None  # nothing differs, nothing pending
            return
        assert cond is not None and cond.reason == pending
        if pending == "NicRemovedFromSpec":
            assert "b (00:50:56:00:00:01)" in (cond.message or "")


def test_storage_and_network_classes_resolve_through_provider() -> None:
    m = machine({"disks": [{"name": "os", "sizeGiB": 30, "storageClass": "gold"}, {"name": "data", "sizeGiB": 5, "datastore": "DS1"}],
                 "network": {"devices": [{"name": "eth0", "networkClass": "prod"}, {"name": "eth1", "portGroup": "VM Network",
                                                                                    "addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"}]}})
    plan = decide(looked(m))
    assert plan.action is not None and plan.action.spec is not None
    spec = plan.action.spec
    assert spec.datastore == "LocalDS_0" and [d.datastore for d in spec.disks] == ["LocalDS_0", "DS1"]
    assert [(n.network, n.dhcp4) for n in spec.nics] == [("DC0_DVPG0", True), ("VM Network", False)]
    assert (spec.uid, spec.name, spec.hostname) == (UID, "m1", "m1")


def test_single_failure_domain_fills_datacenter_and_cluster() -> None:
    plan = decide(looked(machine({"datacenter": None, "cluster": None})))
    assert plan.action is not None and plan.action.spec is not None
    assert (plan.action.spec.datacenter, plan.action.spec.cluster) == ("DC0", "DC0_C0")
    assert plan.status is not None and plan.status.failure_domain == "vc1-dc0-c0"


def test_status_mirrors_vm_and_skips_link_local() -> None:
    v = replace(vm(), ip_address="10.0.0.5")
    plan = decide(looked(machine(), v, converged=True))
    assert plan.status is not None
    assert (plan.status.instance_uuid, plan.status.bios_uuid, plan.status.vm_ref, plan.status.power_state) == ("inst-1", BIOS, "vm-42", "PoweredOn")
    assert [a.address for a in machine_addresses(vm(ips=("fe80::1",)))] == []


@pytest.mark.parametrize("ips", [
    pytest.param((), id="none"),
    pytest.param(("169.254.10.20",), id="ipv4-link-local"),
    pytest.param(("fe80::250:56ff:fe00:1", "FE80::1%eth0"), id="ipv6-link-local"),
    pytest.param(("127.0.0.1", "::1"), id="loopback"),
    pytest.param(("0.0.0.0", "not-an-ip"), id="unspecified-and-garbage"),
])
def test_not_provisioned_without_a_usable_address(ips: tuple[str, ...]) -> None:
    """Issue 20 item 2 (CAPV #249, #938, #985; govmomi #1259): a powered-on machine with a NIC
    is provisioned only once a usable address is reported; the others never reach
    status.addresses."""
    plan = decide(looked(machine(), vm(ips=ips), converged=True, powered=True))
    assert ready(plan) == ("False", "WaitingForIPAddress")
    assert plan.status is not None and plan.status.initialization is None
    assert plan.status.addresses is None
    assert plan.provider_id == f"vsphere://{BIOS}", "providerID still comes first (CAPI contract)"
    usable = decide(looked(machine(), vm(ips=(*ips, "192.0.2.7", "2001:db8::7")), converged=True))
    assert ready(usable) == ("True", "Provisioned")
    assert usable.status is not None and usable.status.initialization is not None and usable.status.initialization.provisioned
    assert [a.address for a in usable.status.addresses or []] == ["192.0.2.7", "2001:db8::7"]


def test_machine_without_nic_is_provisioned_without_address() -> None:
    """The documented exception: no NIC, no address can ever come."""
    plan = decide(looked(machine(), vm(ips=(), nics=()), converged=True))
    assert ready(plan) == ("True", "Provisioned")
    assert plan.status is not None and plan.status.initialization is not None and plan.status.initialization.provisioned


def test_provisioned_is_never_taken_back_when_the_address_goes() -> None:
    m = machine({"providerID": f"vsphere://{BIOS}"}, status=PROVISIONED)
    plan = decide(looked(m, vm(ips=("169.254.1.1",))))
    assert ready(plan) == ("False", "WaitingForIPAddress")
    assert plan.status is not None and plan.status.initialization is not None and plan.status.initialization.provisioned


@pytest.mark.parametrize("bios", ["", "   ", "not-a-uuid"])
def test_no_provider_id_while_the_bios_uuid_is_missing(bios: str) -> None:
    """Issue 20 item 3 (CAPV #1107): never ``vsphere://`` alone; wait with a reason."""
    plan = decide(looked(machine(), vm(bios=bios), converged=True))
    assert plan.provider_id is None
    assert ready(plan) == ("False", "WaitingForBIOSUUID")
    assert plan.status is not None and plan.status.initialization is None
    assert plan.requeue_after is not None


def test_provider_id_is_the_lower_case_canonical_uuid() -> None:
    plan = decide(looked(machine(), vm(bios="{" + BIOS.upper().replace("-", "") + "}"), converged=True))
    assert plan.provider_id == f"vsphere://{BIOS}"


def test_provider_id_is_never_rewritten_when_the_bios_uuid_changes() -> None:
    """Issue 20 item 3 (CAPV #1756): a condition and one Warning event, not a rewrite."""
    other = "4210aaaa-bbbb-4ccc-8ddd-eeeeffff0000"
    m = machine({"providerID": f"vsphere://{BIOS}"}, status=PROVISIONED)
    plan = decide(looked(m, vm(bios=other)))
    assert plan.provider_id is None
    cond = get_condition(plan.status.conditions if plan.status else None, "ProviderIDMatchesVM")
    assert cond is not None and (cond.status.value, cond.reason) == ("False", "BIOSUUIDChanged")
    assert other in (cond.message or "") and BIOS in (cond.message or "")
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["BIOSUUIDChanged"]
    again = decide(looked(machine({"providerID": f"vsphere://{BIOS}"}, status=plan.status.to_wire() if plan.status else None), vm(bios=other)))
    assert again.provider_id is None and "BIOSUUIDChanged" not in [e.reason for e in again.events], "one Event per change"


@pytest.mark.parametrize("reason", ["TemplateNotFound", "ResourcePoolNotFound", "FolderNotFound", "DatastoreNotFound"])
def test_missing_vcenter_object_is_rechecked_with_backoff(reason: str) -> None:
    """Issue 20 item 4 (CAPV #1176, #1925): a missing template, pool, folder or datastore is
    re-checked soon, then less often (5 s doubling to 300 s), never left for good."""
    waits = [decide(looked(machine(), failure=Failure("create", reason, "missing"), missing_retries=n)).requeue_after for n in range(8)]
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    plan = decide(looked(machine(), failure=Failure("create", reason, "missing"), missing_retries=3))
    assert not plan.retry and ready(plan) == ("False", "TemplateNotFound" if reason == "TemplateNotFound" else "InvalidSpec")


def test_a_refused_clone_is_retried_on_a_vcenter_sized_backoff() -> None:
    """Issue 22: a clone vCenter refused (a fault or a failed task; CloneFailed) is sent again
    after 5 s doubling to 60 s (CAPV: 1 min after a failed task), never on the work queue's 5 ms
    back-off; an unknown outcome keeps its own 5 s look-up and a missing object its own back-off."""
    waits = [decide(looked(machine(), failure=Failure("create", "TaskFailed", "refused"), task_failures=n)).requeue_after
             for n in range(6)]
    assert waits == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    plan = decide(looked(machine(), failure=Failure("create", "InsufficientResourcesFault", "refused"), task_failures=2))
    assert not plan.retry and plan.requeue_after == 20.0 and ready(plan) == ("False", "CloneFailed")
    missing = decide(looked(machine(), failure=Failure("create", "TemplateNotFound", "no tpl"), task_failures=4))
    assert missing.requeue_after == 5.0


def test_an_event_during_a_refused_clones_backoff_does_not_clone() -> None:
    """Issue 22, found on kube-apiserver: reconciles caused by events (the machine's own status
    writes) while the back-off of a refused clone runs must not clone (they sent 37 CloneVM_Task
    in 12 s); after it, the clone is sent."""
    waiting = decide(looked(machine(), clone_not_before=NOW + timedelta(seconds=7.5), task_failures=1))
    assert waiting.action is None and waiting.status is None and waiting.requeue_after == 7.5
    after = decide(looked(machine(), clone_not_before=NOW - timedelta(seconds=1), task_failures=1))
    assert after.action is not None and after.action.kind == "create"


def test_events_on_transitions_only() -> None:
    first = decide(looked(machine(), vm(), converged=True))
    assert [e.reason for e in first.events] == ["Provisioned"]
    again = decide(looked(machine({"providerID": f"vsphere://{BIOS}"}, status=first.status.to_wire() if first.status else None), vm()))
    assert again.events == ()
    assert again.status == first.status


def test_read_bootstrap_formats() -> None:
    b64 = base64.b64encode
    got = read_bootstrap({"metadata": {"name": "b"}, "data": {"value": b64(b"{}").decode(), "format": b64(b"ignition").decode()}}, "value")
    assert got == BootstrapData(b"{}", "ignition")
    assert read_bootstrap({"stringData": {"value": "x"}}, "value").format == "cloud-config"


_text = st.one_of(st.none(), st.text(max_size=8))
_machine_specs = st.fixed_dictionaries({}, optional={
    "providerRef": st.one_of(st.none(), st.just({"name": "vc1"}), st.just({"name": "x"})),
    "failureDomain": st.one_of(st.none(), st.sampled_from(["vc1-dc0-c0", "zz", ""])),
    "datacenter": _text, "cluster": _text, "template": _text,
    "numCPUs": st.one_of(st.none(), st.integers(1, 8)), "memoryMiB": st.one_of(st.none(), st.integers(1, 9000)),
    "powerState": st.sampled_from(["PoweredOn", "PoweredOff", "Suspended"]),
    "powerOffMode": st.sampled_from(["hard", "soft", "trySoft"]),
    "disks": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]), "sizeGiB": st.integers(1, 50)},
                                            optional={"storageClass": st.sampled_from(["gold", "pod", "x"])}), max_size=2),
    "bootstrapDataSecretRef": st.one_of(st.none(), st.just({"name": "b"})),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=_machine_specs, finalizer=st.booleans(), deleting=st.booleans(), capi=st.booleans(), owner=st.booleans(),
    status=st.sampled_from([None, PROVISIONED, {"failureDomain": "vc1-dc0-c0"}, RECENT_CLONING]),
    vm_=st.one_of(st.none(), st.builds(vm, st.sampled_from(["PoweredOn", "PoweredOff", "Suspended"]), st.sampled_from([(), ("10.1.1.1",)]))),
    failure=st.one_of(st.none(), st.builds(Failure, st.sampled_from(["connect", "lookup", "create", "power", "destroy"]),
                                           st.sampled_from(["TemplateNotFound", "PowerOffPending", "Transient", "TaskFailed", "X"]), st.text(max_size=5))),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    capi_machine=st.sampled_from([None, CAPI_MACHINE, {"spec": {}}, {"spec": {"bootstrap": 3}}]),
    cluster=st.sampled_from([None, CLUSTER, {"spec": {"paused": True}}, {"status": {"initialization": None}}]),
    providers=st.sampled_from([(), PROV, (provider("vc1", ()),)]),
    conn_err=st.sampled_from([None, ("SecretInvalid", "x")]),
)
def test_decide_never_raises(spec: dict[str, Any], finalizer: bool, deleting: bool, capi: bool, owner: bool, status: dict[str, Any] | None,
                             vm_: VMInfo | None, failure: Failure | None, flags: tuple[bool, bool, bool, bool, bool], capi_machine: Any,
                             cluster: Any, providers: tuple[Provider, ...], conn_err: tuple[str, str] | None) -> None:
    m = machine(spec, finalizer=finalizer, deleting=deleting, status=status, labels=CAPI_LABELS if capi else None, capi_owner=owner)
    s = Snapshot(machine=m, now=NOW, capi_machine=capi_machine, cluster=cluster, providers=providers, bootstrap=BOOT if flags[3] else None,
                 connection_error=conn_err, looked_up=flags[0], vm=vm_, failure=failure, converged=flags[1], destroyed=flags[2],
                 converged_spec=_spec_of(machine()) if flags[4] else None)
    plan = decide(s)
    if plan.requeue_after is not None:
        assert plan.requeue_after > 0
    if plan.status is not None:
        cond = get_condition(plan.status.conditions, READY)
        assert cond is not None
        assert not cond.message.startswith("internal error"), cond.message  # the guard in decide never fires
    assert not (plan.add_finalizer and plan.remove_finalizer)


# --- guestinfo size limit: a base64 value over 64 KiB is InvalidSpec before any vCenter call -------

MAX_RAW = 65536 // 4 * 3  # 49152 bytes: exactly 65536 base64-encoded
BIG_NICS = {"network": {"devices": [{"name": f"eth{i}", "portGroup": "VM Network", "nameservers": ["10.0.0.53"] * 40,
                                     "addresses": [f"10.{i}.{j // 250}.{j % 250}/16" for j in range(300)]}
                                    for i in range(10)]}}


RANDOM_70000 = random.Random(20).randbytes(70000)
"""Incompressible: gzip cannot bring it under the limit."""


@pytest.mark.parametrize(("m", "data", "vm_found", "want"), [
    pytest.param(machine(), b"x" * MAX_RAW, False, ("False", "Cloning"), id="user-data-at-the-limit-clones"),
    pytest.param(machine(), b"x" * (MAX_RAW + 1), False, ("False", "Cloning"), id="user-data-one-byte-over-is-compressed"),
    pytest.param(machine(), b"y" * 200_000, False, ("False", "Cloning"), id="user-data-200000-compressible-clones"),
    pytest.param(machine(), RANDOM_70000, False, ("False", "InvalidSpec"), id="user-data-70000-incompressible-names-sizes"),
    # Issue 19 (F2): a provisioned VM is kept as it is and stays Ready; the refusal is pending.
    pytest.param(machine(status=PROVISIONED), RANDOM_70000, True, ("True", "Provisioned"), id="existing-vm-not-reconfigured"),
    pytest.param(machine(BIG_NICS), b"#cloud-config\n", False, ("False", "InvalidSpec"), id="metadata-over-the-limit-is-invalid"),
])
def test_guestinfo_size_limit(m: VSphereMachine, data: bytes, vm_found: bool, want: tuple[str, str]) -> None:
    boot = BootstrapData(data, "cloud-config")
    for looked_up in (False, True):
        plan = decide(snap(m, bootstrap=boot, providers=PROV, looked_up=looked_up, vm=vm() if vm_found and looked_up else None,
                           spec_error=guestinfo.spec_error))
        if want[1] in ("Cloning", "Provisioned") and not looked_up:
            assert plan.connect, "under the limit, or with a VM to keep, the machine goes on to vCenter"
            continue
        assert ready(plan) == want
        if want[1] == "Provisioned":
            assert plan.action is None, "the existing VM is not reconfigured"
            pending = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
            assert pending is not None and (pending.status.value, pending.reason) == ("True", "ChangeFailed")
            assert "65536" in pending.message and "kept as it is" in pending.message
            cond = pending
        if want[1] == "InvalidSpec":
            assert plan.action is None and not plan.connect, "nothing is cloned or reconfigured"
            cond = get_condition(plan.status.conditions if plan.status else None, READY)
            assert cond is not None and "65536" in cond.message and "guestinfo" in cond.message
    if data is RANDOM_70000:
        compressed = len(guestinfo.encode_user_data(data)[0])
        assert compressed > 65536
        assert cond is not None and cond.message.removeprefix("the spec is not applied, the VM is kept as it is: ") == (
            f"bootstrap user data is 70000 bytes (93336 base64-encoded, {compressed} gzip+base64-encoded); a vSphere "
            "guestinfo value holds at most 65536 bytes even compressed: shrink it (move large files out of the "
            "cloud-config, fetch them at boot)")


def test_backend_guestinfo_compresses_what_does_not_fit_plain() -> None:
    """Issue 20 item 5: plain base64 while it fits, then gzip+base64 (cloud-init's VMware
    datasource decodes both); refused only when even that does not fit."""
    from banlieue.backends.base import InvalidSpec, NicSpec
    from banlieue.backends.vsphere import guestinfo

    nic = NicSpec(name="eth0", network="VM Network")
    assert guestinfo.encoded_size(b"x" * MAX_RAW) == 65536 and guestinfo.encoded_size(b"") == 0
    ok = guestinfo.guestinfo(UID, "m1", [(nic, "00:50:56:00:00:01")], b"x" * MAX_RAW)
    assert len(ok[guestinfo.USERDATA]) == 65536 and ok[guestinfo.USERDATA_ENCODING] == "base64"
    kubeadm = b"#cloud-config\nwrite_files:\n" + b"".join(b"- path: /etc/kubernetes/pki/f%d.crt\n  content: |\n    %s\n" % (i, b"MIIC" * 300) for i in range(60))
    assert len(kubeadm) > 70000
    big = guestinfo.guestinfo(UID, "m1", [(nic, "00:50:56:00:00:01")], kubeadm)
    assert big[guestinfo.USERDATA_ENCODING] == "gzip+base64" and len(big[guestinfo.USERDATA]) <= 65536
    assert gzip.decompress(base64.b64decode(big[guestinfo.USERDATA])) == kubeadm, "what cloud-init decodes"
    assert guestinfo.decode(big)[1] == kubeadm
    assert big == guestinfo.guestinfo(UID, "m1", [(nic, "00:50:56:00:00:01")], kubeadm), "deterministic: no spurious re-converge"
    with pytest.raises(InvalidSpec, match=r"70000 bytes.*93336 base64-encoded.*gzip\+base64-encoded"):
        guestinfo.guestinfo(UID, "m1", [(nic, "00:50:56:00:00:01")], RANDOM_70000)


async def test_vsphere_backend_spec_error_is_the_guestinfo_size_limit() -> None:
    """The check decide is given in production (``Backend.spec_error`` of the VSphereBackend)."""
    from banlieue.backends.base import NicSpec, VMSpec
    from banlieue.backends.vsphere.backend import VSphereBackend

    nic = NicSpec(name="eth0", network="VM Network")
    spec = VMSpec(uid=UID, name="m1", datacenter="DC0", cluster="C0", template="t", num_cpus=1, memory_mib=512, nics=(nic,))
    backend = VSphereBackend(max_workers=1)
    try:
        assert backend.spec_error(replace(spec, user_data=b"x" * MAX_RAW)) is None
        assert backend.spec_error(replace(spec, user_data=b"y" * 70000)) is None, "compressed, it fits"
        assert backend.spec_error(replace(spec, user_data=RANDOM_70000)) == guestinfo.size_error(UID, "m1", [nic], RANDOM_70000)
        assert "70000 bytes" in (backend.spec_error(replace(spec, user_data=RANDOM_70000)) or "")
    finally:
        await backend.close()


@pytest.mark.parametrize("status", [
    pytest.param({"conditions": [cloning_since("2026-01-02T03:04:00Z")]}, id="stale-copy-cloning-without-instance-uuid"),
    pytest.param(PROVISIONED, id="provisioned"),
])
def test_vm_not_found_from_create_is_vm_not_found(status: dict[str, Any]) -> None:
    """create_vm raises VMNotFound for a UID whose VM it returned before (removed by hand): the
    machine is VMNotFound at once, whatever its copy says, and nothing is cloned or retried."""
    failure = Failure("create", "VMNotFound", "the VM for u was removed from vCenter; not cloning it again")
    plan = decide(looked(machine(status=status), None, failure=failure))
    assert ready(plan) == ("False", "VMNotFound")
    assert plan.action is None and not plan.retry and plan.requeue_after is None
    cond = get_condition(plan.status.conditions if plan.status else None, READY)
    assert cond is not None and "removed from vCenter" in cond.message and "delete VSphereMachine m1 (kubectl delete vspheremachine m1 -n ns)" in cond.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "VMNotFound")]


@pytest.mark.parametrize("failure", [
    pytest.param(None, id="lookup-finds-nothing"),
    pytest.param(Failure("create", "VMNotFound", "the VM for u was removed from vCenter; not cloning it again"), id="create-says-removed"),
])
def test_a_vanished_vm_shows_no_power_state_and_no_address(failure: Failure | None) -> None:
    """issue 24 3a: a machine whose vCenter VM vanished kept PoweredOn and its old IP."""
    was_running = {**PROVISIONED, "powerState": "PoweredOn", "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}
    plan = decide(looked(machine(status=was_running), None, failure=failure))
    assert ready(plan) == ("False", "VMNotFound")
    assert plan.status is not None and plan.status.power_state is None and plan.status.addresses is None
    assert "powerState" not in plan.status.to_wire() and "addresses" not in plan.status.to_wire()


# --- ADR 0011: progress-only status changes are coalesced ------------------------------------------

def _cloned_at(at: str) -> dict[str, Any]:
    """The status a machine has right after the Cloning write at ``at`` (its first status)."""
    return {"failureDomain": "vc1-dc0-c0", "conditions": [
        {**cloning_since(at), "lastTransitionTime": at},
        {"type": "Paused", "status": "False", "reason": "NotPaused", "message": "", "lastTransitionTime": at}]}


def _spec_of(m: VSphereMachine) -> Any:
    plan = decide(looked(m))
    assert plan.action is not None and plan.action.spec is not None
    return plan.action.spec


@pytest.mark.parametrize(("s", "want_ready", "want_requeue"), [
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z")), vm(ips=()), converged=True, powered=True), None, 8.1,
                 id="waiting-for-ip-2s-after-cloning-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z")), vm("PoweredOff"), converged=True, powered=True), None, 8.1,
                 id="powering-on-2s-after-cloning-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:03:55Z")), vm(ips=()), converged=True, powered=True),
                 ("False", "WaitingForIPAddress"), 60.0, id="waiting-for-ip-10s-after-cloning-written"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:03:56Z")), vm(ips=()), converged=True, powered=True), None, 1.1,
                 id="waiting-for-ip-9s-after-cloning-deferred-for-the-rest"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z")), vm(), converged=True, powered=True),
                 ("True", "Provisioned"), STEADY_RESYNC_SECONDS, id="ready-transition-never-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z")), failure=Failure("create", "TaskFailed", "boom")),
                 ("False", "CloneFailed"), None, id="failure-never-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z"), annotations={"cluster.x-k8s.io/paused": ""}), vm(ips=())),
                 ("False", "Paused"), None, id="paused-never-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:03Z"), deleting=True), vm(ips=())),
                 ("False", "Deleting"), None, id="deletion-never-deferred"),
    pytest.param(looked(machine(status=_cloned_at("2026-01-02T03:04:09Z")), vm(ips=()), converged=True, powered=True),
                 ("False", "WaitingForIPAddress"), 60.0, id="last-write-in-the-future-clock-skew-written"),
    pytest.param(looked(machine(status={**_cloned_at("2026-01-02T03:04:03Z"), "conditions": [
        {**cloning_since("2026-01-02T03:04:03Z"), "lastTransitionTime": "2026-01-02T03:04:03Z"}]}), vm(ips=()), converged=True, powered=True),
                 ("False", "WaitingForIPAddress"), 60.0, id="another-condition-changes-written"),
])
def test_progress_only_changes_coalesced(s: Snapshot, want_ready: tuple[str, str] | None, want_requeue: float | None) -> None:
    plan = decide(s)
    assert ready(plan) == want_ready
    if want_requeue is not None:
        assert plan.requeue_after == pytest.approx(want_requeue)
    if want_ready is None:
        assert plan.status is None and not [e for e in plan.events if e.transition]
        assert plan.provider_id == f"vsphere://{BIOS}", "spec.providerID is still written (before provisioned, SPEC §3)"


def test_clone_again_after_grace_is_written_even_right_after_a_status_write() -> None:
    """A new clone start is the ADR 0009 record: never deferred, even though Ready stays Cloning."""
    status = {"conditions": [{**cloning_since("2026-01-02T02:50:00Z"), "lastTransitionTime": "2026-01-02T03:04:03Z"}]}
    plan = decide(looked(machine(status=status)))
    assert ready(plan) == ("False", "Cloning") and plan.write_status_first
    assert plan.status is not None and plan.action is not None


def test_restart_safe_anchor_is_the_later_of_transition_and_clone_start() -> None:
    """Ready became False long ago (WaitingForBootstrapData), but the clone started 2 s ago:
    the Cloning write is the last one, so the next progress change is deferred."""
    status = {"conditions": [{**cloning_since("2026-01-02T03:04:03Z"), "lastTransitionTime": "2026-01-02T02:00:00Z"},
                             {"type": "Paused", "status": "False", "reason": "NotPaused", "message": "",
                              "lastTransitionTime": "2026-01-02T02:00:00Z"}]}
    plan = decide(looked(machine(status=status), vm(ips=()), converged=True, powered=True))
    assert plan.status is None and plan.requeue_after == pytest.approx(8.1)


def test_deferred_status_does_not_converge_twice() -> None:
    """The status that would record provisioned was deferred: with the spec this process
    converged to in memory, the next reconcile goes on to power and status, not a second
    converge; after a restart (no memory) it converges again; a changed spec converges again."""
    m = machine(status=_cloned_at("2026-01-02T03:04:03Z"))
    spec = _spec_of(machine())
    assert decide(looked(m, vm())).action is not None, "no memory: converge (idempotent)"
    plan = decide(looked(m, vm(), converged_spec=spec))
    assert plan.action is None and ready(plan) == ("True", "Provisioned")
    changed = machine({"disks": [{"name": "os", "sizeGiB": 20}]}, status=_cloned_at("2026-01-02T03:04:03Z"))
    assert decide(looked(changed, vm(), converged_spec=spec)).action is not None
    provisioned = machine({"numCPUs": 4}, status={**PROVISIONED, "conditions": _cloned_at("2026-01-02T03:04:03Z")["conditions"]})
    stopped = vm("PoweredOff", ips=())
    assert decide(looked(provisioned, stopped, converged_spec=_spec_of(machine({"numCPUs": 4})))).action is not None, \
        "once provisioned is stored, hardware drift is checked as before (CPUs change while the VM is off)"


def test_an_edit_reaching_a_running_vm_not_provisioned_yet_waits_for_a_power_off() -> None:
    """F1 (issue 19): a CPU edit made while the VM was cloned reaches it powered on before its
    first address: HardwareChangePending WaitingForPowerOff and no converge (was: a converge the
    backend refused, Ready False InvalidSpec every minute); a power request is carried out."""
    spec = _spec_of(machine())
    changed = machine({"numCPUs": 4}, status=_cloned_at("2026-01-02T03:04:03Z"))
    plan = decide(looked(changed, vm(), converged_spec=spec))
    assert plan.action is None and ready(plan) == ("True", "Provisioned")
    cond = get_condition(plan.status.conditions if plan.status else None, HARDWARE_CHANGE_PENDING)
    assert cond is not None and (cond.status.value, cond.reason) == ("True", "WaitingForPowerOff")
    assert cond.message and "-> 4" in cond.message
    refused = Failure("create", "InvalidSpec", "the VM is powered on: CPU and memory change only while it is powered off")
    plan = decide(replace(looked(changed, vm(), converged_spec=spec), failure=refused))
    assert ready(plan) == ("True", "Provisioned"), "a refused converge of a running VM never makes it NotReady"
    off = machine({"numCPUs": 4, "powerState": "PoweredOff"}, status=_cloned_at("2026-01-02T03:04:03Z"))
    plan = decide(looked(off, vm(), converged_spec=spec))
    assert plan.action is not None and plan.action.kind == "power" and plan.action.state == "PoweredOff"


def test_a_powered_off_vm_shows_no_address() -> None:
    """Issue 19 case 5: vCenter may keep guest.ipAddress of a stopped VM; the status must not."""
    m = machine({"powerState": "PoweredOff"}, status={**PROVISIONED, "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]})
    plan = decide(looked(m, vm("PoweredOff", ips=("10.0.0.5",))))
    assert plan.status is not None and plan.status.addresses is None
    assert ready(plan) == ("True", "Provisioned")


def test_a_clone_with_an_unknown_outcome_keeps_the_cloning_marker_and_is_not_sent_again() -> None:
    """Issue 19 case 4: the clone's answer was lost (request timeout, vCenter frozen). The status
    keeps "Cloning ... since <start>" (was: CloneFailed, which erased it, and the retry cloned a
    second VM), and the next passes look the VM up and wait instead of cloning."""
    m = machine(status=_cloned_at("2026-01-02T03:04:03Z"))
    lost = Failure("create", "CloneOutcomeUnknown", "clone of 'm1': no answer (timed out); it may still be running")
    plan = decide(looked(m, None, failure=lost))
    assert plan.action is None and not plan.retry
    assert plan.status is not None
    assert clone_started(plan.status) == datetime(2026, 1, 2, 3, 4, 3, tzinfo=UTC)
    again = decide(looked(machine(status=plan.status.to_wire()), None))
    assert again.action is None, "looked up, not found, the clone may still run: wait, never clone again"
    landed = decide(looked(machine(status=plan.status.to_wire()), vm()))
    assert landed.action is not None and landed.action.kind == "create"  # converge the VM the clone made


def test_a_lookup_that_fails_while_a_clone_may_run_keeps_the_cloning_marker() -> None:
    """A vCenter that stops answering mid-clone fails the lookups too: the marker survives them
    (was: ConnectFailed replaced it, and the first pass after the vCenter came back cloned again
    while the first clone was still running)."""
    m = machine(status=_cloned_at("2026-01-02T03:04:03Z"))
    plan = decide(looked(m, None, failure=Failure("lookup", "Timeout", "vCenter did not answer in time")))
    assert plan.status is not None and plan.action is None
    assert clone_started(plan.status) == datetime(2026, 1, 2, 3, 4, 3, tzinfo=UTC)
    assert "vCenter did not answer in time" in (get_condition(plan.status.conditions, READY).message or "")  # type: ignore[union-attr]
    assert decide(looked(machine(status=plan.status.to_wire()), None)).action is None


@pytest.mark.parametrize(("state", "clones"), [
    ("running", False),   # its task still runs: wait, however long past the window
    ("queued", False),
    ("error", True),      # the task failed, no VM: clone again at once
    ("unknown", True),    # vCenter forgot the task: the window (passed here) decides, as before
    (None, True),
])
def test_a_recorded_clone_task_decides_past_the_window(state: str | None, clones: bool) -> None:
    """Issue 19: a restarted manager reads the clone task the annotation names. The marker here
    is 700 s old, past the 600 s window that alone would send a second clone."""
    m = machine(status=_cloned_at("2026-01-02T02:52:23Z"))
    plan = decide(looked(m, None, clone_task=state))
    assert (plan.action is not None and plan.action.kind == "create") is clones
    if not clones:
        assert ready(plan) == ("False", "Cloning") and plan.requeue_after == 5.0


def test_a_clone_waited_for_in_no_history_says_what_it_waits_for() -> None:
    """A new-user review: the marker kept the message of the failure that made the outcome
    unknown ("ConnectFailed: cannot reach ..."), with the vCenter answering again. A pass that
    finds no task, no history and clones in flight on the vCenter ("unknown") says so, keeps
    the start time and gives the time it clones again at the latest."""
    status = _cloned_at("2026-01-02T03:04:03Z")
    status["conditions"][0]["message"] = ("ConnectFailed: cannot reach the Provider's vCenter; "
                                          "cloning since 2026-01-02T03:04:03Z")
    plan = decide(looked(machine(status=status), None, clone_task="unknown"))
    assert plan.action is None and ready(plan) == ("False", "Cloning") and plan.status is not None
    message = get_condition(plan.status.conditions, READY).message or ""  # type: ignore[union-attr]
    assert "ConnectFailed" not in message and "vCenter is cloning other VMs" in message
    assert "at 2026-01-02T03:14:03Z" in message  # the 600 s window's end
    assert clone_started(plan.status) == datetime(2026, 1, 2, 3, 4, 3, tzinfo=UTC)


def test_a_failed_clone_task_is_cloned_again_within_the_window() -> None:
    m = machine(status=_cloned_at("2026-01-02T03:04:03Z"))  # 2 s old
    assert decide(looked(m, None)).action is None
    plan = decide(looked(m, None, clone_task="error"))
    assert plan.action is not None and plan.action.kind == "create"


def test_another_vm_with_the_uid_is_destroyed_when_removable_else_reported() -> None:
    """ADR 0012 decision 9: the VM found (the one kept) goes on; a removable duplicate is
    destroyed first; one that is not is reported (VMUnique False, a Warning naming both)."""
    from banlieue.api.conditions import VM_UNIQUE
    from banlieue.backends.base import DuplicateVM

    ours = DuplicateVM("vm-50", "m1-b", "inst-2", "PoweredOff", True, "")
    copy = DuplicateVM("vm-51", "m1-copy", "inst-3", "PoweredOn", False, "it is PoweredOn")
    m = machine(status=PROVISIONED)
    twins = replace(vm(), duplicates=(ours, copy))
    plan = decide(looked(m, twins))
    assert plan.action is not None and (plan.action.kind, plan.action.moref) == ("destroy_duplicate", "vm-50")

    after = decide(looked(m, replace(vm(), duplicates=(copy,)), duplicates_destroyed=(ours,)))
    cond = get_condition(after.status.conditions if after.status else None, VM_UNIQUE)
    assert cond is not None and (cond.status.value, cond.reason) == ("False", "DuplicateVM")
    assert "vm-42" in cond.message and "vm-51" in cond.message and "recorded in status.instanceUUID" in cond.message
    assert ready(after) == ("True", "Provisioned")  # the kept VM is fine: no NotReady
    reasons = {e.reason: e.message for e in after.events}
    assert "vm-50" in reasons["DuplicateVMDestroyed"] and "vm-42" in reasons["DuplicateVMDestroyed"]
    assert reasons["DuplicateVM"] == cond.message

    # Reported once: the same message stored gives no second event; gone, the condition clears.
    stored = machine(status={**PROVISIONED, "conditions": [cond.to_wire()]})
    again = decide(looked(stored, replace(vm(), duplicates=(copy,))))
    assert "DuplicateVM" not in {e.reason for e in again.events}
    alone = decide(looked(stored, vm()))
    cleared = get_condition(alone.status.conditions if alone.status else None, VM_UNIQUE)
    assert cleared is not None and (cleared.status.value, cleared.reason) == ("True", "Unique")
    assert get_condition(decide(looked(m, vm())).status.conditions, VM_UNIQUE) is None  # type: ignore[union-attr]
