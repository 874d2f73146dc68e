"""The vCenter's identity in the adapter (ADR 0013), against two vcsims: a Connection pinned to
one vCenter's instance UUID sends nothing that reads or changes a VM to another vCenter, also when
that other vCenter takes over the same address (a restart of another simulator on the port)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from banlieue.backends.base import Capabilities, Connection, Transient, VCenterIdentityChanged, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.testing.vcsim import VcsimProcess, start_vcsim

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]
MakeConn = Callable[..., Connection]
VM_METHODS = ("RetrievePropertiesEx", "CloneVM_Task", "Destroy_Task", "PowerOffVM_Task", "CreateContainerView")


def vm_spec(uid: str) -> VMSpec:
    return VMSpec(uid=uid, name=f"vm-{uid[:8]}", datacenter="DC0", cluster="DC0_C0", template="ubuntu-22.04",
                  num_cpus=1, memory_mib=256)


def sent(backend: VSphereBackend, conn: Connection) -> dict[str, int]:
    """SOAP requests sent to ``conn``'s vCenter by method (the backend's own accounting)."""
    return dict(backend.sessions.endpoint_for(conn).soap_by_method)


async def test_a_connection_pinned_to_another_vcenter_sends_nothing(
    backend: VSphereBackend, make_conn: MakeConn, vcsim_factory: Callable[..., VcsimProcess]
) -> None:
    a, b = vcsim_factory(dc=1, cluster=1), vcsim_factory(dc=1, cluster=1)
    assert a.info["instance_uuid"] != b.info["instance_uuid"]
    # The machine's VM lives in b; its Provider recorded b; the endpoint now reaches a.
    in_b = make_conn(b, provider="t/vc", vcenter_instance_uuid=b.info["instance_uuid"])
    created = await backend.create_vm(in_b, vm_spec(str(uuid.uuid4())))
    moved = make_conn(a, provider="t/vc", vcenter_instance_uuid=b.info["instance_uuid"])
    about = await backend.about(moved)  # the Provider's identity probe is never refused
    assert about.instance_uuid == a.info["instance_uuid"] and about.api_type == "VirtualCenter"
    before = sent(backend, moved)
    for call in (lambda: backend.find_vm(moved, created.vm.uid or "x", created.vm.instance_uuid),
                 lambda: backend.create_vm(moved, vm_spec(str(uuid.uuid4()))),
                 lambda: backend.set_power_state(moved, created.vm.uid or "x", "PoweredOn"),
                 lambda: backend.destroy_vm(moved, created.vm.uid or "x"),
                 lambda: backend.inventory(moved, Capabilities())):
        with pytest.raises(VCenterIdentityChanged, match=b.info["instance_uuid"]):
            await call()
    after = sent(backend, moved)
    assert {m: after.get(m, 0) - before.get(m, 0) for m in VM_METHODS} == dict.fromkeys(VM_METHODS, 0)
    with pytest.raises(VCenterIdentityChanged):
        async for _ in backend.watch(moved):
            break
    # Pinned to the vCenter it reaches, everything works; the VM is still in b.
    assert await backend.find_vm(in_b, created.vm.uid or "x") is not None


async def test_another_vcenter_behind_the_same_address_is_seen_at_the_relogin(
    backend: VSphereBackend, make_conn: MakeConn
) -> None:
    first = start_vcsim(tls=False, dc=1, cluster=1)
    port = first.port
    try:
        conn = make_conn(first, provider="t/same-port", vcenter_instance_uuid=first.info["instance_uuid"])
        await backend.inventory(conn, Capabilities())
        first.stop()
        with pytest.raises(Transient):  # down: the kept-alive connection goes
            await backend.inventory(conn, Capabilities())
        second = start_vcsim(tls=False, dc=1, cluster=1, listen=f"127.0.0.1:{port}")
        try:
            assert second.info["instance_uuid"] != first.info["instance_uuid"]
            # NotAuthenticated on the old session, a re-login that reads who answers, refused.
            with pytest.raises(VCenterIdentityChanged):
                await backend.inventory(conn, Capabilities())
            # A restart that keeps the instance UUID is the same vCenter again.
            second.stop()
            with pytest.raises(Transient):
                await backend.inventory(conn, Capabilities())
            third = start_vcsim(tls=False, dc=1, cluster=1, listen=f"127.0.0.1:{port}", instance_uuid=first.info["instance_uuid"])
            try:
                assert third.info["instance_uuid"] == first.info["instance_uuid"]
                inv = await backend.inventory(conn, Capabilities())
                assert inv.failure_domains
            finally:
                third.stop()
        finally:
            second.stop()
    finally:
        first.stop()
