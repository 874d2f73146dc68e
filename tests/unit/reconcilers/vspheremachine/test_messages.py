"""banlieue.reconcilers.vspheremachine.messages: a condition never quotes what vCenter said."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from banlieue.backends.base import BackendError, InvalidSpec, NotFound
from banlieue.backends.vsphere.faults import map_exception, task_error
from banlieue.reconcilers.vspheremachine.messages import UNREACHABLE, condition_message

FOREIGN = "esx-07.corp.example:/vmfs/volumes/other-tenant-ds/secret-vm"


@pytest.mark.parametrize("err", [
    map_exception(vim.fault.InsufficientResourcesFault(msg=FOREIGN)),
    map_exception(vim.fault.NoPermission(msg=FOREIGN, privilegeId="VirtualMachine.Inventory.Create")),
    map_exception(vim.fault.NotFound(msg=FOREIGN)),
    map_exception(vim.fault.InvalidDeviceSpec(msg=FOREIGN)),
    map_exception(ConnectionRefusedError(111, FOREIGN)),
    map_exception(TimeoutError(FOREIGN)),
    task_error(vim.fault.FileAlreadyExists(msg=FOREIGN), "clone"),
    BackendError(f"power on: outcome unknown ({FOREIGN})", reason="PowerOutcomeUnknown"),
])
@pytest.mark.parametrize("step", ["lookup", "create", "power", "destroy"])
def test_what_vcenter_said_is_never_in_the_message(err: BackendError, step: str) -> None:
    message = condition_message(step, err)  # type: ignore[arg-type]
    assert FOREIGN not in message and "esx-07" not in message
    assert "\n" not in message and message


def test_banlieues_own_sentences_built_from_the_spec_are_kept() -> None:
    own = NotFound("template 'ubuntu' not found in 'DC0'", reason="TemplateNotFound", public=True)
    assert condition_message("create", own) == "template 'ubuntu' not found in 'DC0'"
    assert condition_message("create", InvalidSpec("disk 'os' is 20 GiB; shrinking to 10 GiB is not possible", public=True)).startswith("disk 'os'")


def test_messages_name_the_reason_and_what_to_do() -> None:
    assert condition_message("lookup", map_exception(ConnectionResetError())) == UNREACHABLE
    refused = condition_message("create", map_exception(vim.fault.InsufficientResourcesFault(msg=FOREIGN)))
    assert "InsufficientResourcesFault" in refused and "clone" in refused and "log" in refused
    assert "privilege" in condition_message("destroy", map_exception(vim.fault.NoPermission(msg=FOREIGN)))
    assert "caBundle" in condition_message("create", BackendError("x", reason="TLSVerifyFailed"))
