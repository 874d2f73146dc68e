"""Table tests of the VirtualMachine ``decide`` (banlieue.reconcilers.virtualmachine.decide), one
row per rule, and a hypothesis test that no snapshot makes it raise."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reconciler_objects import fd, image, provider, vm_class, with_rows

from banlieue.api.conditions import get_condition, set_condition
from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.provider import Provider
from banlieue.api.virtualmachine import VirtualMachine, VirtualMachineStatus
from banlieue.reconcilers.virtualmachine.decide import (
    NOT_SCHEDULED_INFRA_MESSAGE,
    AddressClaim,
    Plan,
    Snapshot,
    address_conflict,
    decide,
    static_addresses,
)
from banlieue.reconcilers.virtualmachine.machine_decide import desired_machine, machine_differs, owns

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NS = "default"
FIN = "banlieue.io/virtualmachine"
PROVIDERS = [provider("a", [fd("a-dc0-c0", cluster="c0", mem=2000), fd("a-dc0-c1", cluster="c1", mem=1000)], {"site": "a"}),
             provider("b", [fd("b-dc0-c0", cluster="c0", mem=500)], {"site": "b"})]
IMAGE = image({"a": True, "b": True})
CLASS = vm_class(mem=100)


def vm(*, placement: dict[str, Any] | None = None, scheduled: tuple[str, str] | None = None, finalizer: bool = True,
       power: str = "PoweredOn", policy: str = "automatic", annotations: dict[str, str] | None = None,
       deleting: bool = False, paused: bool = False, user_data: bool = False, conditions: list[dict[str, Any]] | None = None,
       status: dict[str, Any] | None = None) -> VirtualMachine:
    st_: dict[str, Any] = dict(status or {})
    if scheduled:
        st_["scheduled"] = {"providerName": scheduled[0], "providerClass": "vsphere", "failureDomain": scheduled[1],
                            "scheduledAt": "2026-01-01T00:00:00Z"}
    if conditions:
        st_["conditions"] = conditions
    meta: dict[str, Any] = {"name": "vm-1", "namespace": NS, "uid": "uid-1", "generation": 3,
                            "labels": {"app": "web"}, "finalizers": [FIN] if finalizer else [],
                            "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    spec: dict[str, Any] = {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"}, "placement": placement or {},
                            "desiredPowerState": power, "migrationPolicy": policy, "paused": paused}
    if user_data:
        spec["userData"] = {"secretRef": {"name": "ud"}}
    return VirtualMachine.from_wire({"metadata": meta, "spec": spec, "status": st_})


def machine(where: tuple[str, str] = ("a", "a-dc0-c0"), *, ready: tuple[str, str] | None = None, provisioned: bool = False,
            power: str | None = None, deleting: bool = False, spec: dict[str, Any] | None = None) -> VSphereMachine:
    status: dict[str, Any] = {}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": ready[0], "reason": ready[1], "message": f"{ready[1]} msg",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    if provisioned:
        status.update(initialization={"provisioned": True}, addresses=[{"type": "InternalIP", "address": "10.0.0.9"}])
    if power:
        status["powerState"] = power
    meta: dict[str, Any] = {"name": "vm-1", "namespace": NS, "labels": {"banlieue.io/owned-by": "vm-1"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return VSphereMachine.from_wire({"metadata": meta, "spec": {"providerRef": {"name": where[0]}, "failureDomain": where[1],
                                                                "providerID": "vsphere://x" if provisioned else None,
                                                                **(spec or {})}, "status": status})


def snap(the_vm: VirtualMachine, *, m: VSphereMachine | None = None, cls: Any = CLASS, img: Any = IMAGE,
         providers: list[Provider] = PROVIDERS) -> Snapshot:
    return Snapshot(the_vm, cls, img, with_rows(providers, img), (), m, NOW)


def cond(plan: Plan, type_: str) -> tuple[str, str]:
    assert plan.status is not None
    c = get_condition(VirtualMachineStatus.from_wire(plan.status).conditions, type_)
    assert c is not None, type_
    return (c.status.value, c.reason)


READY_MACHINE = machine(ready=("True", "Provisioned"), provisioned=True, power="PoweredOn")
MOVE = {"providerSelector": {"matchLabels": {"site": "b"}}}

# (id, snapshot, expected plan flags, expected conditions {type: (status, reason)})
ROWS: list[tuple[str, Snapshot, dict[str, Any], dict[str, tuple[str, str]]]] = [
    ("new-vm-scheduled-and-machine-applied", snap(vm(finalizer=False)),
     {"add_finalizer": True, "apply": ("a", "a-dc0-c0"), "placement": ("a", "a-dc0-c0")},
     {"Scheduled": ("True", "Scheduled"), "PlacementValid": ("True", "Valid"), "Ready": ("False", "WaitingForInfrastructure"),
      "InfrastructureReady": ("False", "WaitingForInfrastructure"), "Migrating": ("False", "NotMigrating"),
      "Paused": ("False", "NotPaused")}),
    ("class-not-found", snap(vm(), cls=None), {},
     {"Scheduled": ("False", "ClassNotFound"), "Ready": ("False", "ClassNotFound"), "PlacementValid": ("Unknown", "NotScheduled")}),
    ("image-not-found", snap(vm(), img=None), {}, {"Scheduled": ("False", "ImageNotFound"), "Ready": ("False", "ImageNotFound")}),
    # Issue 19 case 5: the class or image of a running VM deleted: it stays Ready (was: ClassNotFound).
    ("class-deleted-under-a-running-vm", snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE, cls=None), {},
     {"Ready": ("True", "Ready"), "ReferencesResolved": ("False", "ClassNotFound"),
      "InfrastructureReady": ("True", "Provisioned")}),
    ("image-deleted-under-a-running-vm", snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE, img=None), {},
     {"Ready": ("True", "Ready"), "ReferencesResolved": ("False", "ImageNotFound")}),
    ("nothing-fits", snap(vm(placement={"providerSelector": {"matchLabels": {"site": "z"}}})), {},
     {"Scheduled": ("False", "NoProviderMatched"), "Ready": ("False", "NoProviderMatched")}),
    ("image-not-ready", snap(vm(), img=image({"a": False})), {}, {"Scheduled": ("False", "ImageNotReady")}),
    ("provisioning-progress-collapsed", snap(vm(scheduled=("a", "a-dc0-c0")), m=machine(ready=("False", "Cloning"))), {},
     {"InfrastructureReady": ("False", "WaitingForInfrastructure"), "Ready": ("False", "WaitingForInfrastructure")}),
    ("infrastructure-failure-mirrored", snap(vm(scheduled=("a", "a-dc0-c0")), m=machine(ready=("False", "CloneFailed"))), {},
     {"InfrastructureReady": ("False", "CloneFailed"), "Ready": ("False", "CloneFailed")}),
    ("ready-needs-provisioned", snap(vm(scheduled=("a", "a-dc0-c0")), m=machine(ready=("True", "Provisioned"), power="PoweredOn")),
     {}, {"InfrastructureReady": ("True", "Provisioned"), "Ready": ("False", "WaitingForInfrastructure")}),
    ("ready-when-infra-ready-provisioned-and-powered", snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE), {},
     {"Ready": ("True", "Ready"), "InfrastructureReady": ("True", "Provisioned")}),
    ("powered-off-desired-not-yet-observed", snap(vm(scheduled=("a", "a-dc0-c0"), power="PoweredOff"), m=READY_MACHINE),
     {"apply": ("a", "a-dc0-c0")}, {"Ready": ("False", "WaitingForPowerState")}),
    ("automatic-drift-deletes-machine-first", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0")), m=READY_MACHINE),
     {"delete_machine": True}, {"Migrating": ("True", "ProviderChanged"), "PlacementValid": ("False", "NoProviderMatched"),
                                "Ready": ("False", "ProviderChanged")}),
    ("automatic-drift-waits-while-machine-deleting",
     snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0")), m=machine(deleting=True)), {}, {"Migrating": ("True", "ProviderChanged")}),
    ("automatic-drift-places-again-once-machine-gone", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0"))),
     {"apply": ("b", "b-dc0-c0"), "placement": ("b", "b-dc0-c0")},
     {"Migrating": ("True", "ProviderChanged"), "PlacementValid": ("True", "Valid"), "Scheduled": ("True", "Scheduled"),
      "Ready": ("False", "ProviderChanged")}),
    ("failure-domain-changed-reason",
     snap(vm(placement={"failureDomainSelector": {"matchLabels": {"cluster": "c1"}}}, scheduled=("a", "a-dc0-c0")), m=READY_MACHINE),
     {"delete_machine": True}, {"Migrating": ("True", "FailureDomainChanged")}),
    ("migration-finishes-when-new-machine-ready",
     snap(vm(placement=MOVE, scheduled=("b", "b-dc0-c0"), conditions=[
         {"type": "Migrating", "status": "True", "reason": "ProviderChanged", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
          m=machine(("b", "b-dc0-c0"), ready=("True", "Provisioned"), provisioned=True, power="PoweredOn")),
     {"apply": ("b", "b-dc0-c0")}, {"Migrating": ("False", "NotMigrating"), "Ready": ("True", "Ready")}),
    ("manual-drift-waits-for-annotation", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0"), policy="manual"), m=READY_MACHINE),
     {"apply": ("a", "a-dc0-c0")}, {"PlacementValid": ("False", "NoProviderMatched"), "Migrating": ("False", "NotMigrating"),
                                    "Scheduled": ("True", "Scheduled")}),
    ("manual-drift-with-annotation-deletes", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0"), policy="manual",
                                                     annotations={"banlieue.io/migrate": "true"}), m=READY_MACHINE),
     {"delete_machine": True}, {"Migrating": ("True", "ProviderChanged")}),
    ("manual-migration-clears-annotation", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0"), policy="manual",
                                                   annotations={"banlieue.io/migrate": "true"})),
     {"apply": ("b", "b-dc0-c0"), "clear_migrate_annotation": True}, {"Migrating": ("True", "ProviderChanged")}),
    ("never-keeps-old-placement", snap(vm(placement=MOVE, scheduled=("a", "a-dc0-c0"), policy="never"), m=READY_MACHINE),
     {"apply": ("a", "a-dc0-c0")}, {"PlacementValid": ("False", "NoProviderMatched"), "Migrating": ("False", "NotMigrating")}),
    ("automatic-drift-nowhere-to-go-keeps-machine",
     snap(vm(placement={"providerSelector": {"matchLabels": {"site": "z"}}}, scheduled=("a", "a-dc0-c0")), m=READY_MACHINE),
     {"apply": ("a", "a-dc0-c0")}, {"PlacementValid": ("False", "NoProviderMatched"), "Ready": ("True", "Ready")}),
    ("paused-does-nothing-else", snap(vm(paused=True, finalizer=False)), {},
     {"Paused": ("True", "Paused"), "Ready": ("False", "Paused")}),
    ("deleting-deletes-machine", snap(vm(deleting=True, scheduled=("a", "a-dc0-c0")), m=READY_MACHINE),
     {"delete_machine": True}, {"Ready": ("False", "Deleting")}),
    ("deleting-waits-for-machine", snap(vm(deleting=True, scheduled=("a", "a-dc0-c0")), m=machine(deleting=True)), {},
     {"Ready": ("False", "Deleting")}),
    ("paused-wins-over-deletion", snap(vm(paused=True, deleting=True, scheduled=("a", "a-dc0-c0")), m=READY_MACHINE), {},
     {"Paused": ("True", "Paused")}),
    ("annotation-without-drift-is-cleared", snap(vm(scheduled=("a", "a-dc0-c0"), policy="manual",
                                                    annotations={"banlieue.io/migrate": "true"}), m=READY_MACHINE),
     {"apply": ("a", "a-dc0-c0"), "clear_migrate_annotation": True}, {"PlacementValid": ("True", "Valid")}),
    ("status-lost-adopts-machine-placement", snap(vm(), m=machine(("a", "a-dc0-c1"))),
     {"apply": ("a", "a-dc0-c1"), "placement": ("a", "a-dc0-c1")}, {"Scheduled": ("True", "Scheduled")}),
]


@pytest.mark.parametrize(("snapshot", "flags", "conds"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_decide_rules(snapshot: Snapshot, flags: dict[str, Any], conds: dict[str, tuple[str, str]]) -> None:
    plan = decide(snapshot)
    assert plan.add_finalizer is flags.get("add_finalizer", False)
    assert plan.delete_machine is flags.get("delete_machine", False)
    assert plan.clear_migrate_annotation is flags.get("clear_migrate_annotation", False)
    assert not plan.remove_finalizer
    if "apply" in flags:
        assert plan.apply_machine is not None
        assert (plan.apply_machine["spec"]["providerRef"]["name"], plan.apply_machine["spec"]["failureDomain"]) == flags["apply"]
    elif "apply" not in flags and snapshot.machine is None:
        assert plan.apply_machine is None
    if "placement" in flags:
        assert plan.placement == flags["placement"]
    for type_, expected in conds.items():
        assert cond(plan, type_) == expected


def test_mirror_is_held_while_the_machine_is_provisioning() -> None:
    cloning = machine(ready=("False", "WaitingForIPAddress"), provisioned=True, power="PoweredOn")
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=cloning))
    assert plan.status is not None
    assert not {"observedPowerState", "addresses", "providerID", "initialization"} & set(plan.status)
    done = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE))
    assert done.status is not None
    assert {"observedPowerState", "addresses", "providerID", "initialization"} <= set(done.status)


FOREIGN = VSphereMachine.from_wire({"metadata": {"name": "vm-1", "namespace": NS, "ownerReferences": [
    {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m", "uid": "m-uid", "controller": True}]},
    "spec": {"providerRef": {"name": "a"}}})


def test_foreign_machine_is_never_applied_deleted_or_mirrored() -> None:
    plan = decide(snap(vm(finalizer=False), m=FOREIGN))
    assert (plan.apply_machine, plan.delete_machine, plan.add_finalizer) == (None, False, False)
    assert cond(plan, "Ready") == ("False", "InfrastructureConflict")
    assert cond(plan, "Scheduled") == ("False", "InfrastructureConflict")
    assert decide(snap(vm(deleting=True), m=FOREIGN)) == Plan(remove_finalizer=True)


def test_machine_owned_by_uid_or_label() -> None:
    the_vm = vm()
    ours = VSphereMachine.from_wire(desired_machine(the_vm, CLASS, _placement(Plan(placement=("a", "a-dc0-c0")))))
    assert owns(the_vm, ours)
    assert owns(the_vm, machine())  # no controller reference: the owned-by label decides
    assert not owns(the_vm, FOREIGN)
    recreated = VirtualMachine.from_wire({**the_vm.to_wire(), "metadata": {**the_vm.to_wire()["metadata"], "uid": "uid-2"}})
    assert not owns(recreated, ours)


def test_deleted_vm_without_machine_drops_finalizer_and_writes_nothing_else() -> None:
    plan = decide(snap(vm(deleting=True, scheduled=("a", "a-dc0-c0"))))
    assert plan == Plan(remove_finalizer=True)
    assert decide(snap(vm(deleting=True, finalizer=False))) == Plan()


def test_paused_does_not_apply_or_add_finalizer() -> None:
    plan = decide(snap(vm(paused=True, finalizer=False)))
    assert (plan.add_finalizer, plan.apply_machine, plan.delete_machine) == (False, None, False)


def test_second_decide_on_its_own_result_changes_nothing() -> None:
    """Writes that change nothing are skipped: feed the written status back in."""
    first = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE))
    assert first.status is not None
    again = vm(status=first.status)
    wanted = desired_machine(again, CLASS, _placement(first))
    applied = VSphereMachine.from_wire({**wanted, "spec": {**wanted["spec"], "providerID": "vsphere://x"},
                                        "status": READY_MACHINE.to_wire()["status"]})
    second = decide(snap(again, m=applied))
    assert second.status is None
    assert second.apply_machine is None
    assert not second.events


def _placement(plan: Plan) -> Any:
    from banlieue.reconcilers.virtualmachine.scheduler import Placement

    assert plan.placement is not None
    return Placement(plan.placement[0], "vsphere", plan.placement[1], "ubuntu-tpl")


def test_machine_spec_labels_owner_and_user_data_reference() -> None:
    cls = vm_class(mem=100).model_copy(deep=True)
    cls = type(cls).from_wire({**cls.to_wire(), "spec": {**cls.to_wire()["spec"], "network": {"interfaces": [
        {"name": "eth0", "networkClass": "default",
         "ipam": {"source": "static", "static": {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"}}}]}}})
    plan = decide(snap(vm(user_data=True, power="PoweredOff"), cls=cls))
    body = plan.apply_machine
    assert body is not None
    assert body["metadata"]["labels"] == {"app": "web", "banlieue.io/owned-by": "vm-1", "banlieue.io/provider": "a"}
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "name": "vm-1",
                                                   "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]
    # ADR 0011: born with the provider's finalizer, so the provider sends no finalizer patch.
    assert body["metadata"]["finalizers"] == ["infrastructure.banlieue.io/vspheremachine"]
    spec = body["spec"]
    assert spec["template"] == "ubuntu-tpl"
    assert (spec["numCPUs"], spec["memoryMiB"], spec["firmware"], spec["powerState"]) == (2, 100, "efi", "PoweredOff")
    assert spec["disks"] == [{"name": "d0", "sizeGiB": 20, "provisioning": "thin", "storageClass": "standard"}]
    assert spec["network"]["devices"] == [{"name": "eth0", "networkClass": "default", "dhcp4": False,
                                           "addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"}]
    assert spec["bootstrapDataSecretRef"] == {"name": "ud", "key": "user-data"}
    VSphereMachine.from_wire(body)  # the body is a valid VSphereMachine


def _with_nics(cls: Any, *interfaces: dict[str, Any]) -> Any:
    wire = cls.to_wire()
    return type(cls).from_wire({**wire, "spec": {**wire["spec"], "network": {"interfaces": list(interfaces)}}})


def _with_overrides(the_vm: VirtualMachine, *interfaces: dict[str, Any]) -> VirtualMachine:
    wire = the_vm.to_wire()
    return VirtualMachine.from_wire({**wire, "spec": {**wire["spec"], "network": {"interfaces": list(interfaces)}}})


NET_CLASS = _with_nics(
    CLASS,
    {"name": "eth0", "networkClass": "default",
     "ipam": {"source": "static", "static": {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1", "nameservers": ["10.0.0.53"]}}},
    {"name": "eth1", "networkClass": "default"},
)


def test_per_vm_network_settings_override_the_class_field_by_field() -> None:
    """SPEC §2 VirtualMachine spec.network: each field set replaces the class's for that
    interface (matched by name, not position); addresses turn IPv4 DHCP off; unset fields keep
    the class's values."""
    the_vm = _with_overrides(vm(), {"name": "eth1", "addresses": ["192.168.7.9/24", "fd00::9/64"], "gateway6": "fd00::1"},
                             {"name": "eth0", "addresses": ["10.0.0.77/24"]})
    body = desired_machine(the_vm, NET_CLASS, _placement(Plan(placement=("a", "a-dc0-c0"))))
    assert body["spec"]["network"]["devices"] == [
        {"name": "eth0", "networkClass": "default", "dhcp4": False, "addresses": ["10.0.0.77/24"],
         "gateway4": "10.0.0.1", "nameservers": ["10.0.0.53"]},
        {"name": "eth1", "networkClass": "default", "dhcp4": False, "addresses": ["192.168.7.9/24", "fd00::9/64"],
         "gateway6": "fd00::1"},
    ]
    # Name servers alone on a DHCP interface keep DHCP on.
    dns_only = _with_overrides(vm(), {"name": "eth1", "nameservers": ["1.1.1.1"]})
    body = desired_machine(dns_only, NET_CLASS, _placement(Plan(placement=("a", "a-dc0-c0"))))
    assert body["spec"]["network"]["devices"][1] == {"name": "eth1", "networkClass": "default", "dhcp4": True,
                                                     "nameservers": ["1.1.1.1"]}
    VSphereMachine.from_wire(body)


def test_an_override_removed_is_removed_from_the_machine() -> None:
    """A setting the desired device no longer has (the VM's override dropped) makes the machine
    differ, so the apply removes it (the controller owns those fields)."""
    dns_only = _with_overrides(vm(), {"name": "eth1", "nameservers": ["1.1.1.1"]})
    target = _placement(Plan(placement=("a", "a-dc0-c0")))
    live = VSphereMachine.from_wire(desired_machine(dns_only, NET_CLASS, target))
    assert not machine_differs(live, desired_machine(dns_only, NET_CLASS, target))
    assert machine_differs(live, desired_machine(vm(), NET_CLASS, target))


def test_an_override_of_an_interface_the_class_lacks_is_refused() -> None:
    """The class is another object (admission cannot see it): a new VM is not scheduled and says
    which names exist; a placed VM keeps running as it is (ADR 0012)."""
    bad = _with_overrides(vm(), {"name": "eth0", "nameservers": ["1.1.1.1"]}, {"name": "nic9", "addresses": ["10.0.0.9/24"]})
    plan = decide(snap(bad, cls=NET_CLASS))
    assert plan.apply_machine is None and plan.placement is None
    assert cond(plan, "Scheduled") == ("False", "InterfaceNotInClass")
    assert plan.status is not None
    message = get_condition(VirtualMachineStatus.from_wire(plan.status).conditions, "Scheduled").message  # type: ignore[union-attr]
    assert "VMClass small has no interface nic9 (its interfaces: eth0, eth1)" in message, message
    assert [e.reason for e in plan.events] == ["FailedScheduling"]

    placed = _with_overrides(vm(scheduled=("a", "a-dc0-c0")), {"name": "nic9"})
    plan = decide(snap(placed, cls=NET_CLASS, m=READY_MACHINE))
    assert plan.apply_machine is None and not plan.delete_machine
    assert cond(plan, "ReferencesResolved") == ("False", "InterfaceNotInClass")
    assert cond(plan, "Ready")[0] == "True"


def test_machine_differs_detects_removed_field_and_ignores_defaults() -> None:
    wanted = desired_machine(vm(), CLASS, _placement(Plan(placement=("a", "a-dc0-c0"))))
    live = VSphereMachine.from_wire(wanted)  # adds server defaults (cloneMode, powerOffMode)
    assert not machine_differs(live, wanted)
    with_ref = VSphereMachine.from_wire({**wanted, "spec": {**wanted["spec"], "bootstrapDataSecretRef": {"name": "x"}}})
    assert machine_differs(with_ref, wanted)
    relabelled = VSphereMachine.from_wire({**wanted, "metadata": {**wanted["metadata"], "labels": {"x": "y"}}})
    assert machine_differs(relabelled, wanted)
    # A finalizer removed by hand is the provider's to restore: no apply (no fight over it).
    unfinalized = VSphereMachine.from_wire({**wanted, "metadata": {**wanted["metadata"], "finalizers": []}})
    assert not machine_differs(unfinalized, wanted)


def test_deleting_machine_is_never_applied_to() -> None:
    """ADR 0011: the apply carries the provider's finalizer, and a machine being deleted must
    never get it back (kube refuses new finalizers then): no apply while it is deleting, even
    when it differs from the desired body."""
    wanted = desired_machine(vm(), CLASS, _placement(Plan(placement=("a", "a-dc0-c0"))))
    deleting = VSphereMachine.from_wire({**wanted, "metadata": {**wanted["metadata"], "finalizers": [],
                                                                "deletionTimestamp": "2026-01-01T00:00:00Z"},
                                         "spec": {**wanted["spec"], "numCPUs": 7}})
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=deleting))
    assert plan.apply_machine is None


_cond_types = st.sampled_from(["Ready", "Scheduled", "Migrating", "PlacementValid"])
_conds = st.lists(st.builds(lambda t, s, r: {"type": t, "status": s, "reason": r, "message": "",
                                             "lastTransitionTime": "2026-01-01T00:00:00Z"},
                            _cond_types, st.sampled_from(["True", "False", "Unknown"]), st.sampled_from(["A", "ProviderChanged"])),
                  max_size=4, unique_by=lambda c: c["type"])
_where = st.tuples(st.sampled_from(["a", "b", "z"]), st.sampled_from(["a-dc0-c0", "a-dc0-c1", "b-dc0-c0", "q"]))


def message(plan: Plan, type_: str) -> str:
    assert plan.status is not None
    c = get_condition(VirtualMachineStatus.from_wire(plan.status).conditions, type_)
    assert c is not None, type_
    return c.message


@pytest.mark.parametrize(
    ("snapshot", "scheduled_message"),
    [
        pytest.param(Snapshot(vm(), None, IMAGE, tuple(PROVIDERS), (), None, NOW),
                     'VMClass "small" not found: check spec.classRef.name (kubectl get bvmc lists the VMClasses, '
                     "if you may list them; else ask your cluster administrator)", id="class-not-found"),
        pytest.param(Snapshot(vm(), CLASS, None, tuple(PROVIDERS), (), None, NOW),
                     'VMImage "ubuntu" not found: check spec.imageRef.name (kubectl get bvmi lists the VMImages, '
                     "if you may list them; else ask your cluster administrator)", id="image-not-found"),
        pytest.param(snap(vm(placement={"providerSelector": {"matchLabels": {"site": "z"}}})), None, id="nothing-fits"),
    ],
)
def test_unscheduled_vm_without_machine_says_there_is_none(snapshot: Snapshot, scheduled_message: str | None) -> None:
    plan = decide(snapshot)
    assert cond(plan, "InfrastructureReady") == ("False", "WaitingForInfrastructure")
    assert message(plan, "InfrastructureReady") == NOT_SCHEDULED_INFRA_MESSAGE
    assert "VSphereMachine vm-1" not in message(plan, "InfrastructureReady")
    assert cond(plan, "Scheduled")[0] == "False"
    if scheduled_message is not None:
        assert message(plan, "Scheduled") == scheduled_message
        # Ready carries the Scheduled reason and message (what blocks the VM).
        assert message(plan, "Ready") == scheduled_message


def test_machine_being_created_is_waited_for_by_name() -> None:
    plan = decide(snap(vm()))
    assert plan.apply_machine is not None
    assert message(plan, "InfrastructureReady") == "VSphereMachine vm-1 is not Ready yet"


def test_unscheduled_vm_with_a_leftover_machine_mirrors_the_machine() -> None:
    plan = decide(Snapshot(vm(), None, IMAGE, tuple(PROVIDERS), (), machine(ready=("False", "CloneFailed")), NOW))
    assert cond(plan, "InfrastructureReady") == ("False", "CloneFailed")


@st.composite
def _snapshots(draw: st.DrawFn) -> Snapshot:
    the_vm = vm(placement=draw(st.sampled_from([{}, MOVE, {"providerSelector": {"matchLabels": {"site": "z"}}},
                                                {"failureDomainSelector": {"matchLabels": {"cluster": "c1"}}}])),
                scheduled=draw(st.one_of(st.none(), _where)), finalizer=draw(st.booleans()),
                power=draw(st.sampled_from(["PoweredOn", "PoweredOff", "Suspended"])),
                policy=draw(st.sampled_from(["automatic", "manual", "never"])),
                annotations=draw(st.sampled_from([{}, {"banlieue.io/migrate": "true"}])), deleting=draw(st.booleans()),
                paused=draw(st.booleans()), user_data=draw(st.booleans()), conditions=draw(_conds))
    m = draw(st.one_of(st.none(), st.builds(
        lambda w, r, p, pw, d: machine(w, ready=r, provisioned=p, power=pw, deleting=d), _where,
        st.one_of(st.none(), st.tuples(st.sampled_from(["True", "False"]), st.sampled_from(["Cloning", "CloneFailed", "Provisioned"]))),
        st.booleans(), st.one_of(st.none(), st.sampled_from(["PoweredOn", "PoweredOff"])), st.booleans())))
    base = snap(the_vm, m=m, cls=draw(st.sampled_from([None, CLASS])), img=draw(st.sampled_from([None, IMAGE, image({})])),
                providers=draw(st.sampled_from([[], PROVIDERS, PROVIDERS[:1]])))
    return Snapshot(base.vm, base.vm_class, base.image, base.providers, base.peers, base.machine, base.now)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshots())
def test_decide_never_raises_and_always_has_ready(snapshot: Snapshot) -> None:
    plan = decide(snapshot)
    if plan.status is not None:
        status = VirtualMachineStatus.from_wire(plan.status)
        assert get_condition(status.conditions, "Ready") is not None
    if plan.apply_machine is not None:
        VSphereMachine.from_wire(plan.apply_machine)
    assert not (plan.remove_finalizer and plan.apply_machine)


def test_a_pending_change_mirrored_while_a_class_edit_is_held_says_which_class_it_is_from() -> None:
    """The machine reports a change pending from the class as it was last applied (disk d0
    shrunk to 2 GiB); the class is then edited back to 10 GiB with a storage class the VM's
    failure domain does not offer: ReferencesResolved False ClassNotOffered holds the whole edit,
    and the mirrored HardwareChangePending read as if the current class asked 2 GiB. It now says
    the edit is held and that its cause comes from the class as last applied."""
    held = machine(ready=("True", "Provisioned"), provisioned=True, power="PoweredOn",
                   spec={"disks": [{"name": "d0", "sizeGiB": 2, "storageClass": "standard"}]})
    assert held.status is not None
    stale = "disk d0 is 10 GiB and the spec asks 2 GiB: a disk is never shrunk"
    held.status.conditions = set_condition(held.status.conditions, "HardwareChangePending", True, "DiskShrinkRefused",
                                           stale, 1, NOW)
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=held, cls=vm_class(mem=100, disks=(10,), sc="fast")))
    assert cond(plan, "ReferencesResolved") == ("False", "ClassNotOffered")
    assert cond(plan, "HardwareChangePending") == ("True", "DiskShrinkRefused")
    pending = get_condition(VirtualMachineStatus.from_wire(plan.status or {}).conditions, "HardwareChangePending")
    assert pending is not None and pending.message == (
        "the VMClass edit is not applied (ClassNotOffered, see ReferencesResolved); from the class as last applied: " + stale)
    # Once nothing holds the edit, the machine's message is mirrored as it is.
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=held, cls=vm_class(mem=100, disks=(2,))))
    pending = get_condition(VirtualMachineStatus.from_wire(plan.status or {}).conditions, "HardwareChangePending")
    assert pending is not None and pending.message == stale


def test_a_pending_class_edit_is_mirrored_and_the_vm_stays_ready_and_not_failed() -> None:
    """Issue 19 case 2: the machine's HardwareChangePending is shown on the VirtualMachine, which
    stays Ready (counted Ready, not Failed, in banlieue_virtual_machines)."""
    from banlieue.reconcilers.metrics import phase_of

    pending = machine(ready=("True", "Provisioned"), provisioned=True, power="PoweredOn")
    assert pending.status is not None
    pending.status.conditions = set_condition(pending.status.conditions, "HardwareChangePending", True, "WaitingForPowerOff",
                                              "numCPUs 1 -> 2 is applied the next time the VM is powered off", 1, NOW)
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=pending))
    assert cond(plan, "HardwareChangePending") == ("True", "WaitingForPowerOff")
    assert cond(plan, "Ready") == ("True", "Ready")
    assert plan.status is not None
    assert phase_of({"metadata": {}, "status": plan.status}) == "Ready"
    # A machine that never had anything pending adds no condition (no extra status write).
    assert "HardwareChangePending" not in {c["type"] for c in decide(snap(vm(scheduled=("a", "a-dc0-c0")), m=READY_MACHINE)).status["conditions"]}  # type: ignore[index]


def test_a_deleted_class_leaves_the_running_vm_alone_and_a_new_one_is_picked_up() -> None:
    running = vm(scheduled=("a", "a-dc0-c0"))
    gone = decide(snap(running, m=READY_MACHINE, cls=None))
    assert gone.apply_machine is None and not gone.delete_machine
    assert gone.status is not None and gone.status["addresses"]  # still mirrored
    back = decide(snap(VirtualMachine.from_wire({**running.to_wire(), "status": gone.status}), m=READY_MACHINE))
    assert cond(back, "ReferencesResolved") == ("True", "Resolved") and cond(back, "Ready") == ("True", "Ready")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param([{"name": "eth0", "gateway4": "10.9.0.1"}],
                     "eth0 gateway4 10.9.0.1 is outside its networks (10.0.0.0/24)", id="gateway4-outside"),
        pytest.param([{"name": "eth0", "addresses": ["172.16.0.5/24"]}],
                     "eth0 gateway4 10.0.0.1 is outside its networks (172.16.0.0/24)", id="gateway-vs-new-address"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.9/24", "fd00::9/64"], "gateway6": "fd01::1"}],
                     "eth1 gateway6 fd01::1 is outside its networks (fd00::/64)", id="gateway6-outside"),
        pytest.param([{"name": "eth0", "addresses": ["10.0.0.1/24"]}],
                     "eth0 gateway4 10.0.0.1 is the interface's own address", id="gateway4-own-address"),
        pytest.param([{"name": "eth0", "gateway4": "10.0.0.255"}],
                     "eth0 gateway4 10.0.0.255 is the broadcast address of 10.0.0.0/24", id="gateway4-broadcast"),
        pytest.param([{"name": "eth0", "gateway4": "10.0.0.0"}],
                     "eth0 gateway4 10.0.0.0 is the network address of 10.0.0.0/24", id="gateway4-network"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.9/24", "fd00::9/64"], "gateway6": "fd00::9"}],
                     "eth1 gateway6 fd00::9 is the interface's own address", id="gateway6-own-address"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.0/24"]}],
                     "eth1 address 192.168.7.0/24 is the network address of 192.168.7.0/24", id="network-address"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.255/24"]}],
                     "eth1 address 192.168.7.255/24 is the broadcast address of 192.168.7.0/24", id="broadcast"),
        pytest.param([{"name": "eth1", "addresses": ["10.0.0.77/24"]}],
                     "address 10.0.0.77 is on interfaces eth0 and eth1", id="one-address-two-nics"),
    ],
)
def test_network_settings_valid_alone_but_inconsistent_are_refused(overrides: list[dict[str, Any]], expected: str) -> None:
    """New-user finding: each value passed admission (isIP/isCIDR) yet the guest could not use the
    combination. Effective settings = the VM's overrides over NET_CLASS (eth0 static
    10.0.0.77/24 via 10.0.0.1 set by the override below, eth1 DHCP)."""
    base = {"name": "eth0", "addresses": ["10.0.0.77/24"], "gateway4": "10.0.0.1"}
    merged = {o["name"]: o for o in [base, *overrides]}
    if overrides[0]["name"] == "eth0":
        merged["eth0"] = {**base, **overrides[0]}
    bad = _with_overrides(vm(), *merged.values())
    plan = decide(snap(bad, cls=NET_CLASS))
    assert plan.apply_machine is None and plan.placement is None
    assert cond(plan, "Scheduled") == ("False", "NetworkSettingsInconsistent")
    assert plan.status is not None
    message = get_condition(VirtualMachineStatus.from_wire(plan.status).conditions, "Scheduled").message  # type: ignore[union-attr]
    assert expected in message, message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param([{"name": "eth0", "addresses": ["fd00::5/64"]}],
                     "eth0 has gateway4 10.0.0.1 but no IPv4 address (its addresses replace the class's, and DHCPv4 is "
                     "off)", id="class-gateway4-left-without-ipv4"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.9/24"], "gateway4": "192.168.7.1"}],
                     "gateway4 is set on interfaces eth0 and eth1", id="two-default-gateways"),
        pytest.param([{"name": "eth1", "gateway4": "10.9.9.9"}],
                     "gateway4 is set on interfaces eth0 and eth1", id="two-default-gateways-one-on-dhcp"),
        # Stored before admission refused them (CRD rules are not re-run on stored objects): the
        # VSphereMachine built from them would be refused, so the VM says why instead.
        pytest.param([{"name": "eth1", "addresses": ["224.0.0.5/24"]}],
                     "eth1 address 224.0.0.5/24 is not a unicast host address", id="stored-multicast-address"),
        pytest.param([{"name": "eth1", "addresses": ["169.254.0.5/16"]}],
                     "eth1 address 169.254.0.5/16 is not a unicast host address", id="stored-link-local-address"),
        pytest.param([{"name": "eth0", "addresses": ["127.0.0.5/8"], "gateway4": "127.0.0.1"}],
                     "eth0 gateway4 127.0.0.1 is not a unicast address", id="stored-loopback-gateway"),
    ],
)
def test_gateways_the_class_and_the_vm_give_together_are_checked(overrides: list[dict[str, Any]], expected: str) -> None:
    """New-user finding: admission sees the VM's overrides only; with its class's values the
    interface may be left with a gateway4 and no IPv4 (netplan then has a default route with no
    source address), or two interfaces may each declare a default gateway of one family (two
    default routes of the same metric: which one the guest uses is not defined)."""
    plan = decide(snap(_with_overrides(vm(), *overrides), cls=NET_CLASS))
    assert plan.apply_machine is None and plan.placement is None
    assert cond(plan, "Scheduled") == ("False", "NetworkSettingsInconsistent")
    assert plan.status is not None
    message = get_condition(VirtualMachineStatus.from_wire(plan.status).conditions, "Scheduled").message  # type: ignore[union-attr]
    assert expected in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param([{"name": "eth0", "addresses": ["10.0.0.77/24"], "gateway4": "10.0.0.1"}], id="gateway-inside"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.9/24", "fd00::9/64"], "gateway6": "fe80::1"}], id="link-local-gateway6"),
        pytest.param([{"name": "eth1", "addresses": ["192.168.7.0/31"]}], id="slash-31-has-no-network-address"),
        pytest.param([{"name": "eth1", "gateway6": "fd00:9::1"}], id="dhcp-interface-gateway-not-judged"),
        pytest.param([{"name": "eth0", "addresses": ["10.0.0.77/24", "fd00::5/64"]}], id="ipv4-kept-with-gateway4"),
    ],
)
def test_consistent_network_settings_are_placed(overrides: list[dict[str, Any]]) -> None:
    plan = decide(snap(_with_overrides(vm(), *overrides), cls=NET_CLASS))
    assert cond(plan, "Scheduled")[1] != "NetworkSettingsInconsistent"
    assert plan.apply_machine is not None


def test_a_running_vm_given_inconsistent_settings_keeps_running_as_it_is() -> None:
    placed = _with_overrides(vm(scheduled=("a", "a-dc0-c0")), {"name": "eth1", "addresses": ["192.168.7.255/24"]})
    plan = decide(snap(placed, cls=NET_CLASS, m=READY_MACHINE))
    assert plan.apply_machine is None and not plan.delete_machine
    assert cond(plan, "ReferencesResolved") == ("False", "NetworkSettingsInconsistent")
    assert cond(plan, "Ready")[0] == "True"


@pytest.mark.parametrize("missing", ["class", "image"])
def test_power_is_carried_out_when_the_class_or_image_is_gone(missing: str) -> None:
    """New-user finding (issue 19: power requests are always carried out): with its VMClass or
    VMImage deleted, a running VM could not be powered off (the machine was left alone, so its
    spec.powerState stayed PoweredOn). Only powerState changes; every other field the machine
    has is applied as it is (one field manager: a field left out would be released)."""
    live = machine(ready=("True", "Provisioned"), provisioned=True, power="PoweredOn",
                   spec={"numCPUs": 2, "memoryMiB": 1024, "powerState": "PoweredOn", "template": "ubuntu-22.04",
                         "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}]})
    kw: dict[str, Any] = {"cls": None} if missing == "class" else {"img": None}
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0"), power="PoweredOff"), m=live, **kw))
    assert plan.apply_machine is not None and not plan.delete_machine
    spec = plan.apply_machine["spec"]
    assert spec["powerState"] == "PoweredOff"
    before = {k: v for k, v in live.to_wire()["spec"].items() if k != "powerState" and k in spec}
    assert {k: v for k, v in spec.items() if k != "powerState"} == before
    assert set(spec) - {"powerState"} == {"providerRef", "failureDomain", "numCPUs", "memoryMiB", "template", "disks"}
    # Already there: nothing to apply.
    plan = decide(snap(vm(scheduled=("a", "a-dc0-c0"), power="PoweredOn"), m=live, **kw))
    assert plan.apply_machine is None


def _created(the_vm: VirtualMachine, when: str) -> VirtualMachine:
    wire = the_vm.to_wire()
    return VirtualMachine.from_wire({**wire, "metadata": {**wire["metadata"], "creationTimestamp": when}})


def test_static_addresses_are_the_effective_ones_by_network_class() -> None:
    """A class's static addresses, replaced by the VM's own per interface; DHCP interfaces claim none."""
    assert static_addresses(vm(), NET_CLASS) == [("eth0", "default", "10.0.0.5")]
    overridden = _with_overrides(vm(), {"name": "eth1", "addresses": ["192.168.7.9/24", "fd00::9/64"]},
                                 {"name": "eth0", "addresses": ["10.0.0.77/24"]})
    assert static_addresses(overridden, NET_CLASS) == [
        ("eth0", "default", "10.0.0.77"), ("eth1", "default", "192.168.7.9"), ("eth1", "default", "fd00::9")]
    assert static_addresses(vm(), CLASS) == []


def _claim(ip: str = "10.0.0.5", *, placed: bool = False, created: str | None = "2026-01-01T00:00:00Z",
           holder: str = "VirtualMachine web-0", network_class: str = "default") -> AddressClaim:
    return AddressClaim(ip=ip, network_class=network_class, holder=holder, placed=placed,
                        created=None if created is None else datetime.fromisoformat(created))


@pytest.mark.parametrize(
    ("claim", "refused"),
    [
        pytest.param(_claim(placed=True, created="2026-06-01T00:00:00Z"), True, id="placed-holder-wins-even-if-newer"),
        pytest.param(_claim(), True, id="older-unplaced-holder-wins"),
        pytest.param(_claim(created="2026-06-01T00:00:00Z"), False, id="newer-unplaced-waits-for-us"),
        pytest.param(_claim(created="2026-03-01T00:00:00Z", holder="VirtualMachine a"), True, id="same-time-lower-name"),
        pytest.param(_claim(created="2026-03-01T00:00:00Z", holder="VirtualMachine z"), False, id="same-time-higher-name"),
        pytest.param(_claim(placed=True, network_class="storage-net"), False, id="other-network-class"),
        pytest.param(_claim("10.0.0.6", placed=True), False, id="other-address"),
    ],
)
def test_the_later_claim_of_a_static_address_is_refused(claim: AddressClaim, refused: bool) -> None:
    """Rule: on one network class of a namespace, a static address belongs to the VM already
    placed, else to the oldest claim (creation time, then kind and name); the others wait."""
    me = _created(vm(), "2026-03-01T00:00:00Z")
    got = address_conflict(me, NET_CLASS, (claim,))
    assert (got is not None) is refused
    if got is not None:
        assert got[0] == "AddressConflict"
        assert "10.0.0.5" in got[1] and claim.holder in got[1] and "eth0" in got[1], got[1]


def test_a_vm_whose_class_gives_a_static_address_another_vm_holds_is_not_cloned() -> None:
    """A VMClass with a static address shared by two VMs: the second is not scheduled (no
    VSphereMachine) and says which VM holds the address and how to give it its own."""
    s = Snapshot(_created(vm(), "2026-03-01T00:00:00Z"), NET_CLASS, IMAGE, with_rows(PROVIDERS, IMAGE), (), None, NOW,
                 address_claims=(_claim(placed=True),))
    plan = decide(s)
    assert plan.apply_machine is None and plan.placement is None
    assert cond(plan, "Scheduled") == ("False", "AddressConflict")
    placed = decide(Snapshot(_created(vm(scheduled=("a", "a-dc0-c0")), "2026-03-01T00:00:00Z"), NET_CLASS, IMAGE,
                             with_rows(PROVIDERS, IMAGE), (), READY_MACHINE, NOW, address_claims=(_claim(placed=True),)))
    assert cond(placed, "Scheduled")[1] != "AddressConflict"  # a running VM is never taken down for it
