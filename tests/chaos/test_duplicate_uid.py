"""Two VMs with one UID (issue 19; ADR 0012 decision 9): with the manager running, a second VM
carrying a machine's ``banlieue.uid`` appears in vCenter. The VM recorded in the machine's
status is kept; the extra one is destroyed only when provably ours and empty (a clone of the
template, never powered on: what a second clone of the machine leaves), and otherwise only
reported (a copy of the machine's VM made by hand in vCenter): ``VMUnique`` False
``DuplicateVM`` and Warning events naming both VMs. Ground truth: the test's own pyvmomi session."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.backends.vsphere.find import UID_KEY

from .harness import EVENTS, IMAGE, NS, VSMS, ChaosEnv, condition, wait_for
from .vcenter import Oracle

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(180)]


def clone(oracle: Oracle, source: str, name: str, uid: str, power_on: bool = False) -> str:
    """Clone VM ``source`` (a template or a VM) into ``name`` carrying ``uid`` (vcsim does not
    copy a source's extraConfig as vCenter does: the UID is given as the clone spec's)."""
    src = vim.VirtualMachine(source, stub=oracle.si._stub)
    pool = next(c for c in oracle.content.rootFolder.childEntity[0].hostFolder.childEntity).resourcePool
    spec = vim.vm.CloneSpec(location=vim.vm.RelocateSpec(pool=pool), powerOn=power_on, template=False,
                            config=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=UID_KEY, value=uid)]))
    task = src.CloneVM_Task(folder=oracle.content.rootFolder.childEntity[0].vmFolder, name=name, spec=spec)
    while task.info.state in ("queued", "running"):
        pass
    assert task.info.state == "success", task.info.error
    return str(task.info.result._moId)


def events_text(env: ChaosEnv) -> str:
    items = env.items(EVENTS) + env.items(f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
    return json.dumps([(e.get("reason"), e.get("message") or e.get("note")) for e in items])


def test_a_second_vm_with_a_machines_uid_is_destroyed_only_when_ours_and_empty(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.single_vcenter()
    env.start_banlieue("manager", leader_elect=False)
    env.create_vms(["twin"], desiredPowerState="PoweredOff")
    env.wait_ready(["twin"], 90)
    vsm: Any = env.get(f"{VSMS}/twin")
    uid, kept = vsm["metadata"]["uid"], vsm["status"]["vmRef"]
    with vc.oracle() as oracle:
        template = oracle.find_template(IMAGE)
        assert template is not None
        extra = clone(oracle, template.moref, "twin-extra", uid)  # a second clone of the machine
        copy = clone(oracle, kept, "twin-copy", uid)  # a copy of its VM made by hand

    def left() -> set[str]:
        with vc.oracle() as oracle:
            return {v.moref for v in oracle.managed() if v.uid == uid}

    wait_for("the extra clone destroyed", lambda: extra not in left(), 60, interval=0.2)
    unique = wait_for("VMUnique False", lambda: (lambda c: c if c.get("reason") == "DuplicateVM" else None)(
        condition(env.get(f"{VSMS}/twin"), "VMUnique")), 30)
    assert left() == {kept, copy}, "the kept VM or the hand-made copy was destroyed"
    assert unique["status"] == "False" and kept in unique["message"] and copy in unique["message"], unique
    assert "not from a template" in unique["message"], unique
    now: Any = env.get(f"{VSMS}/twin")
    assert now["status"]["vmRef"] == kept and now["status"]["instanceUUID"] == vsm["status"]["instanceUUID"]
    text = wait_for("the Warning events", lambda: (lambda t: t if "DuplicateVMDestroyed" in t and
                                                    '"DuplicateVM"' in t else None)(events_text(env)), 30)
    destroyed = [m for r, m in json.loads(text) if r == "DuplicateVMDestroyed"]
    assert destroyed and extra in destroyed[0] and kept in destroyed[0], destroyed
