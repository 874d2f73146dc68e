"""Status and providerID writes by name land only on the object the reconcile read (same UID),
on the API double and on envtest's kube-apiserver (``BANLIEUE_TEST_APISERVER`` picks one; unset,
both). A reconcile holding a stale copy of object A (as an informer cache may after ``kubectl
delete`` and a re-create under the same name) must not write A's status or providerID onto B:
both servers accept an apply naming another object's UID (tests/envtest/test_differential.py),
so the guard is the read object's resourceVersion (``reconcilers.same_object``). A concurrent
write by another field manager to the same object is no reason to drop ours."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from banlieue.api.conditions import READY
from banlieue.api.infrastructure import VSphereMachine, VSphereMachineStatus
from banlieue.api.meta import Condition
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    ANNOTATION_CLONE_TASK,
    ANNOTATION_MIGRATE,
    FIELD_MANAGER_CONTROLLER,
    FIELD_MANAGER_PROVIDER_VSPHERE,
    VIRTUAL_MACHINE,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.same_object import Replaced
from banlieue.reconcilers.virtualmachine.controller import VirtualMachineReconciler
from banlieue.reconcilers.virtualmachine.decide import Plan
from banlieue.reconcilers.vspheremachine.controller import VSphereMachineReconciler
from banlieue.reconcilers.vspheremachine.decide import Snapshot
from banlieue.runtime.client import Client
from banlieue.runtime.config import load_config
from banlieue.runtime.errors import NotFound
from banlieue.runtime.manager import Manager
from banlieue.testing.apiservers import ApiServerUnderTest, kinds, start_api_server

pytestmark = [pytest.mark.kubectl, pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("kubectl") is None and not Path("bin/kubectl").exists(),
                                 reason="kubectl not installed")]

NS = "same"
NAME = "m1"
UUID_A = "42000000-0000-0000-0000-00000000000a"


def _kubectl() -> str:
    return str(Path("bin/kubectl").resolve()) if Path("bin/kubectl").exists() else str(shutil.which("kubectl"))


def _machine() -> dict[str, Any]:
    return {"apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachine", "metadata": {"name": NAME, "namespace": NS},
            "spec": {"providerRef": {"name": "vc1"}, "template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 2048}}


def _vm() -> dict[str, Any]:
    return {"apiVersion": VIRTUAL_MACHINE.api_version, "kind": "VirtualMachine", "metadata": {"name": NAME, "namespace": NS},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}}}


def _provisioned() -> VSphereMachineStatus:
    """The status A's reconcile would write: A's VM, found in vCenter."""
    return VSphereMachineStatus.from_wire({
        "instanceUUID": UUID_A, "biosUUID": UUID_A, "powerState": "PoweredOn", "initialization": {"provisioned": True},
        "conditions": [Condition(type=READY, status="True", reason="Provisioned", message="",
                                 last_transition_time="2026-01-01T00:00:00Z").to_wire()]})


@pytest.fixture(scope="module", params=kinds(both_by_default=True))
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServerUnderTest]:
    """The API server ``request.param`` with banlieue's CRDs and namespace ``same``, shared by the
    module's tests (each removes its objects: ``client``)."""
    with start_api_server(request.param, tmp_path_factory.mktemp("same-object")) as server:
        server.install(_kubectl())
        status, answer = server.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        assert status == 201, answer
        yield server


@pytest.fixture
async def client(api: ApiServerUnderTest) -> AsyncIterator[Client]:
    """A cluster-admin client of ``api``; after the test, the VirtualMachine and VSphereMachine
    ``m1`` are gone (finalizers dropped), so the next test creates them afresh."""
    c = Client(await load_config(str(api.kubeconfig_path)))
    try:
        yield c
    finally:
        for kind in (VIRTUAL_MACHINE, VSPHERE_MACHINE):
            with contextlib.suppress(NotFound):
                await c.patch(kind, NAME, NS, {"metadata": {"finalizers": None}})
            with contextlib.suppress(NotFound):
                await c.delete(kind, NAME, NS)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    await c.get(kind, NAME, NS)
                except NotFound:
                    break
                await asyncio.sleep(0.1)
        await c.close()


def _context(client: Client, field_manager: str) -> RoleContext:
    mgr = Manager(client, metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False)
    return RoleContext(client=client, cache=mgr.cache, recorder=mgr.get_event_recorder(field_manager), field_manager=field_manager)


async def _outcome(write: Awaitable[Any]) -> BaseException | None:
    """The exception ``write`` raised, None when it returned."""
    try:
        await write
    except Exception as err:
        return err
    return None


async def _replace(client: Client, kind: Any, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create A, keep the copy read, delete A, create B under the same name: (A as read, B)."""
    a = await client.create(kind, body)
    await client.delete(kind, NAME, NS)
    b = await client.create(kind, body)
    assert b["metadata"]["uid"] != a["metadata"]["uid"]
    return a, b


async def test_vspheremachine_status_and_provider_id_never_land_on_a_recreated_machine(client: Client) -> None:
    backend = VSphereBackend(max_workers=1)
    try:
        rec = VSphereMachineReconciler(_context(client, FIELD_MANAGER_PROVIDER_VSPHERE), backend)
        stale, b = await _replace(client, VSPHERE_MACHINE, _machine())
        snap = Snapshot(machine=VSphereMachine.from_wire(stale), now=datetime.now(UTC))
        outcomes = [await _outcome(rec._write_status(stale, _provisioned())),
                    await _outcome(rec._write_provider_id(stale, f"vsphere://{UUID_A}")),
                    await _outcome(rec._record_clone_task(snap, "task-of-a"))]
        now = await client.get(VSPHERE_MACHINE, NAME, NS)
        assert now["metadata"]["uid"] == b["metadata"]["uid"]
        assert ANNOTATION_CLONE_TASK not in (now["metadata"].get("annotations") or {})
        assert not (now.get("status") or {}).get("instanceUUID"), now["status"]
        assert "providerID" not in now["spec"], now["spec"]
        assert all(isinstance(o, Replaced) for o in outcomes), outcomes
        assert not rec._written_status and not rec._written_provider_id  # nothing remembered as written

        # B itself, read and then written by another field manager (a label, as CAPI adds):
        # the same object, so both writes land (after one GET each).
        read = await client.get(VSPHERE_MACHINE, NAME, NS)
        await client.apply(VSPHERE_MACHINE, {**_machine(), "metadata": {"name": NAME, "namespace": NS, "labels": {"x": "y"}}},
                           field_manager=FIELD_MANAGER_CONTROLLER, force=True)
        written = await rec._write_status(read, _provisioned())
        assert written["status"]["instanceUUID"] == UUID_A and written["metadata"]["uid"] == b["metadata"]["uid"]
        written = await rec._write_provider_id(read, f"vsphere://{UUID_A}")
        assert written["spec"]["providerID"] == f"vsphere://{UUID_A}"
        assert written["metadata"]["labels"] == {"x": "y"}
        await rec._record_clone_task(replace(snap, machine=VSphereMachine.from_wire(read)), "task-of-b")
        assert rec._annotated[b["metadata"]["uid"]]["metadata"]["annotations"] == {ANNOTATION_CLONE_TASK: "task-of-b"}

    finally:
        await backend.close()


async def test_virtualmachine_status_never_lands_on_a_recreated_vm(client: Client) -> None:
    rec = VirtualMachineReconciler(_context(client, FIELD_MANAGER_CONTROLLER))
    stale, b = await _replace(client, VIRTUAL_MACHINE, _vm())
    outcome = await _outcome(rec.execute(f"{NS}/{NAME}", stale, None, Plan(status={"providerID": f"vsphere://{UUID_A}"})))
    now = await client.get(VIRTUAL_MACHINE, NAME, NS)
    assert now["metadata"]["uid"] == b["metadata"]["uid"]
    assert not (now.get("status") or {}).get("providerID"), now.get("status")
    assert isinstance(outcome, Replaced), outcome

    # B, read, then relabelled by someone else: still B, so the status lands.
    read = await client.get(VIRTUAL_MACHINE, NAME, NS)
    await client.patch(VIRTUAL_MACHINE, NAME, NS, {"metadata": {"labels": {"x": "y"}}})
    await rec.execute(f"{NS}/{NAME}", read, None, Plan(status={"providerID": "vsphere://b"}))
    now = await client.get(VIRTUAL_MACHINE, NAME, NS)
    assert now["status"]["providerID"] == "vsphere://b" and now["metadata"]["labels"] == {"x": "y"}


async def test_a_finalizer_is_never_moved_onto_a_recreated_object(client: Client) -> None:
    """A stale copy's finalizer removal (the provider's deletion reconcile) must not strip the
    finalizer of the machine re-created under the name: the VM of B would be left behind."""
    fin = "infrastructure.banlieue.io/vspheremachine"
    body = _machine()
    body["metadata"]["finalizers"] = [fin]
    stale = await client.create(VSPHERE_MACHINE, body)
    await client.delete(VSPHERE_MACHINE, NAME, NS)
    await client.patch(VSPHERE_MACHINE, NAME, NS, {"metadata": {"finalizers": None}})
    b = await client.create(VSPHERE_MACHINE, body)
    outcome = await _outcome(client.remove_finalizer(VSPHERE_MACHINE, stale, fin))
    now = await client.get(VSPHERE_MACHINE, NAME, NS)
    assert now["metadata"]["uid"] == b["metadata"]["uid"] and now["metadata"]["finalizers"] == [fin]
    assert isinstance(outcome, NotFound), outcome


async def test_machine_apply_migrate_patch_and_provider_id_never_land_on_a_replaced_object(client: Client) -> None:
    """The VirtualMachine controller read machine A (and VM A with ``banlieue.io/migrate``); both
    were deleted and re-created under their names before it wrote: B's spec and B's annotation
    stay as they are. The provider's providerID write from a copy of a machine deleted since
    does not re-create it."""
    rec = VirtualMachineReconciler(_context(client, FIELD_MANAGER_CONTROLLER))
    stale_machine, machine_b = await _replace(client, VSPHERE_MACHINE, _machine())
    vm_body = _vm()
    vm_body["metadata"]["annotations"] = {ANNOTATION_MIGRATE: "true"}
    stale_vm, vm_b = await _replace(client, VIRTUAL_MACHINE, vm_body)
    apply = {**_machine(), "spec": {**_machine()["spec"], "numCPUs": 8}}
    outcome = await _outcome(rec.execute(f"{NS}/{NAME}", stale_vm, stale_machine,
                                         Plan(apply_machine=apply, clear_migrate_annotation=True)))
    now = await client.get(VSPHERE_MACHINE, NAME, NS)
    assert now["metadata"]["uid"] == machine_b["metadata"]["uid"] and now["spec"]["numCPUs"] == 2, now["spec"]
    assert isinstance(outcome, Replaced), outcome

    outcome = await _outcome(rec.execute(f"{NS}/{NAME}", stale_vm, None, Plan(clear_migrate_annotation=True)))
    vm_now = await client.get(VIRTUAL_MACHINE, NAME, NS)
    assert vm_now["metadata"]["uid"] == vm_b["metadata"]["uid"]
    assert vm_now["metadata"]["annotations"] == {ANNOTATION_MIGRATE: "true"}
    assert isinstance(outcome, Replaced), outcome

    # The objects themselves, read and then relabelled by someone else: both writes land.
    machine_read = await client.get(VSPHERE_MACHINE, NAME, NS)
    vm_read = await client.get(VIRTUAL_MACHINE, NAME, NS)
    await client.patch(VSPHERE_MACHINE, NAME, NS, {"metadata": {"labels": {"x": "y"}}})
    await client.patch(VIRTUAL_MACHINE, NAME, NS, {"metadata": {"labels": {"x": "y"}}})
    await rec.execute(f"{NS}/{NAME}", vm_read, machine_read, Plan(apply_machine=apply, clear_migrate_annotation=True))
    assert (await client.get(VSPHERE_MACHINE, NAME, NS))["spec"]["numCPUs"] == 8
    assert not (await client.get(VIRTUAL_MACHINE, NAME, NS))["metadata"].get("annotations")

    # A server-side apply creates what does not exist: the providerID written from a copy of a
    # machine deleted meanwhile (no finalizer left) must not bring it back as a new object.
    backend = VSphereBackend(max_workers=1)
    try:
        provider = VSphereMachineReconciler(_context(client, FIELD_MANAGER_PROVIDER_VSPHERE), backend)
        stale = await client.get(VSPHERE_MACHINE, NAME, NS)
        await client.delete(VSPHERE_MACHINE, NAME, NS)
        outcome = await _outcome(provider._write_provider_id(stale, f"vsphere://{UUID_A}"))
        assert isinstance(await _outcome(client.get(VSPHERE_MACHINE, NAME, NS)), NotFound), "the machine was re-created"
        assert isinstance(outcome, NotFound), outcome
    finally:
        await backend.close()

