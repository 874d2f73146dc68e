"""VMs changed behind banlieue's back (issue 10, fifth bullet), with the expected behaviour of
SPEC §3 and ``banlieue/reconcilers/vspheremachine/decide.py``:

- powered off in vCenter -> powered back on (desired ``PoweredOn``), Ready again;
- deleted in vCenter -> reported (VSphereMachine ``Ready=False``, reason ``VMNotFound``, a Warning
  Event, and the VirtualMachine not Ready), never silently re-created;
- renamed in vCenter -> still found by its UID (``banlieue.uid``): Ready, no second clone.

Then everything is deleted: a VM already gone is success, nothing is left behind.
"""

from __future__ import annotations

import time

import pytest

from .harness import EVENTS, VSMS, ChaosEnv, condition, wait_for
from .invariants import assert_exact_vms, assert_serving, delete_all_and_check_clean

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(180)]

QUIET = 10.0  # seconds the deleted VMs are watched for a silent re-creation


def test_powered_off_deleted_renamed_behind_our_back(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.single_vcenter()
    manager = env.start_banlieue("manager")
    names = env.create_vms(f"vm-{i:03d}" for i in range(9))
    env.wait_ready(names, 60)
    off, gone, renamed = names[0:3], names[3:6], names[6:9]
    uids = {v["metadata"]["name"]: v["metadata"]["uid"] for v in env.items(VSMS)}
    with vc.oracle() as oracle:
        by_uid = {v.uid: v for v in oracle.managed()}
        for name in off:
            oracle.power_off(by_uid[uids[name]].moref)
        for name in gone:
            oracle.destroy(by_uid[uids[name]].moref)
        for name in renamed:
            oracle.rename(by_uid[uids[name]].moref, f"renamed-{name}")

        def powered_on_again() -> bool:
            power = {v.uid: v.power for v in oracle.managed()}
            return all(power.get(uids[n]) == "poweredOn" for n in off)

        wait_for("VMs powered off behind our back powered on again", powered_on_again, 60)

        def reported() -> dict[str, str] | None:
            vsms = {v["metadata"]["name"]: v for v in env.items(VSMS)}
            reasons = {n: str(condition(vsms.get(n), "Ready").get("reason")) for n in gone}
            return reasons if all(r == "VMNotFound" for r in reasons.values()) else None

        reasons = wait_for("deleted VMs reported VMNotFound", reported, 60)
        assert reasons
        vms = env.vms()
        for name in gone:
            ready = condition(vms[name], "Ready")
            assert ready.get("status") == "False", f"{name} still Ready after its VM was deleted: {ready}"
            assert ready.get("message"), f"{name}: Ready=False without a message"
        warned = wait_for("a Warning event VMNotFound per deleted VM", lambda: {
            e["involvedObject"]["name"] for e in env.items(EVENTS)
            if e.get("reason") == "VMNotFound" and e.get("type") == "Warning"} >= set(gone) or None, 15)
        assert warned
        deadline = time.monotonic() + QUIET
        while time.monotonic() < deadline:
            recreated = [v.name for v in oracle.managed() if v.uid in {uids[n] for n in gone}]
            assert not recreated, f"deleted VMs silently re-created: {recreated}"
            time.sleep(1.0)
        current = {v.uid: v for v in oracle.managed()}
        for name in renamed:
            vm = current[uids[name]]
            assert vm.moref == by_uid[uids[name]].moref and vm.name == f"renamed-{name}", vm
    env.wait_ready(off + renamed, 30)
    assert_exact_vms(env, off + renamed)
    delete_all_and_check_clean(env)
    assert_serving(manager)
