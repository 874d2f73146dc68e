"""A clone refused because a VM of the machine's name, not banlieue's, is already in the folder
(new-user finding: it showed only ``CloneFailed (TaskFailed)``): ``Ready`` False ``VMNameInUse``
with what to do and none of vCenter's text; once that VM is gone the machine goes on.

A real Manager running the vspheremachine controller against the API server (HTTP) and vcsim
(SOAP); the test makes the other VM with its own pyVmomi session, as a vSphere user would.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pyVmomi import vim
from reconciler_harness import b64, vms_with_uid
from test_vspheremachine_vcsim import (  # sibling helpers
    machine,
    make_provider,
    ready_of,
    running,
    wait_reason,
)

from banlieue.reconcilers.kinds import SECRET, VSPHERE_MACHINE
from banlieue.reconcilers.vspheremachine import decide
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]


def _wait(task: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while task.info.state not in ("success", "error"):
        assert time.monotonic() < deadline, "vcsim task did not finish"
        time.sleep(0.05)
    assert task.info.state == "success", task.info.error


def _find_vm(si: Any, name: str) -> Any:
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return next(vm for vm in view.view if vm.name == name)
    finally:
        view.Destroy()


async def test_a_vm_of_the_same_name_in_the_folder_is_vm_name_in_use(
        apiserver: Any, client: Client, ns: str, vcsim: VcsimProcess, si: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    template = _find_vm(si, "ubuntu-22.04")
    dc = si.content.rootFolder.childEntity[0]  # DC0: its VM folder is where the machine clones to
    pool = next(c for c in dc.hostFolder.childEntity if c.name == "DC0_C0").resourcePool
    _wait(template.CloneVM_Task(folder=dc.vmFolder, name="taken", spec=vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool))))
    await make_provider(client, ns, vcsim)
    await client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "boot", "namespace": ns},
                                 "data": {"value": b64("#cloud-config\n")}})
    async with running(apiserver, ns):
        created = await client.create(VSPHERE_MACHINE, machine("taken", ns, bootstrapDataSecretRef={"name": "boot"}))
        obj = await wait_reason(client, ns, "taken", "VMNameInUse", "CloneFailed", "WaitingForIPAddress", "Provisioned")
        status, reason, message = ready_of(obj)  # type: ignore[misc]
        assert (status, reason) == ("False", "VMNameInUse"), message
        assert message == ("vCenter refused the clone: a VM of this machine's name already exists in the target folder "
                           "and is not this machine's (DuplicateName); rename or remove that VM in vCenter (the clone is "
                           "retried, at most a minute apart), or create the machine under another name")
        assert vms_with_uid(si, created["metadata"]["uid"]) == []
        # A refused clone backs off (decide.TASK_FAILURE_FIRST_RETRY_SECONDS, 5 s first): the
        # machine stays VMNameInUse instead of cloning again on its own status write's event
        # (it flipped back to Cloning within milliseconds, a clone every 1.5 s, CI run of 117f454).
        held_until = time.monotonic() + decide.TASK_FAILURE_FIRST_RETRY_SECONDS - 1.5
        while time.monotonic() < held_until:
            now = ready_of(await client.get(VSPHERE_MACHINE, "taken", ns))
            assert now is not None and now[1] == "VMNameInUse", now
            await asyncio.sleep(0.1)
        # The user removes the other VM in vCenter: the machine is cloned without being edited.
        _wait(_find_vm(si, "taken").Destroy_Task())
        await wait_reason(client, ns, "taken", "WaitingForIPAddress", "Provisioned", timeout=30)
        assert len(vms_with_uid(si, created["metadata"]["uid"])) == 1
