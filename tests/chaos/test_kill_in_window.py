"""The manager killed (``kill -9``) in each window where a vCenter call's outcome is unknown
(issue 19; ADR 0012 "unknown outcomes are resolved, not retried"), then started again:

1. a CloneVM_Task sent and not answered yet (vcsim holds the answer 3 s: ``--method-delay``);
2. a PowerOnVM_Task whose task runs on after the call answered (``--task-delay PowerOn``, 30 s,
   so the restarted manager meets it running);
3. a Destroy_Task likewise (``--task-delay Destroy``).

The kill lands inside the window, checked from vCenter's side (no VM yet; the task is running).
After the restart: one VM per UID, the desired end state reached, nothing leaked, and vCenter's
own task list (TaskManager.recentTask, the oracle's session) shows the power and destroy tasks
were sent once, never a second time on top of the first. ``LockHandoff=0``: without it vcsim
holds the VM's lock for the task delay and nothing can read the VM, which vCenter never does."""

from __future__ import annotations

import time
from typing import Any

import pytest

from banlieue.reconcilers.kinds import ANNOTATION_CLONE_TASK

from .harness import VMS, VSMS, ChaosEnv, condition, wait_for
from .invariants import assert_exact_vms, assert_serving, wait_for_clean
from .vcenter import Oracle, SimVM, Vcenter

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(240)]

DELAY_MS = 3000
TASK_DELAY_MS = 30000
"""Longer than a manager's restart (start, login, first reconcile: 2-4 s idle, over 15 s on a
loaded machine), so the new process meets the task still running."""


def tasks_of(oracle: Oracle, kind: str) -> dict[str, list[str]]:
    """VM moref -> states of its recent ``VirtualMachine.<kind>`` tasks, in vCenter's order."""
    out: dict[str, list[str]] = {}
    for task in oracle.content.taskManager.recentTask or []:
        try:
            info = task.info
        except TypeError:
            continue  # vcsim's file tasks name a non-entity (VirtualDiskManager) pyVmomi cannot read
        if info.descriptionId == f"VirtualMachine.{kind}" and info.entity is not None:
            out.setdefault(info.entity._moId, []).append(str(info.state))
    return out


def running(env: ChaosEnv, kind: str, moref: str) -> bool:
    with env.vcenters["vc"].oracle() as oracle:
        return "running" in tasks_of(oracle, kind).get(moref, [])


def managed(vc: Vcenter) -> list[SimVM]:
    with vc.oracle() as oracle:
        return oracle.managed()


def set_power(env: ChaosEnv, name: str, state: str) -> None:
    for _ in range(10):
        vm: Any = env.get(f"{VMS}/{name}")
        vm["spec"]["desiredPowerState"] = state
        status, _ = env.call("PUT", f"{VMS}/{name}", vm)
        if status == 200:
            return
        assert status == 409, status  # a status write in between: read again
    raise AssertionError(f"could not set {name} {state}")


def test_kill_9_in_each_unknown_outcome_window(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.single_vcenter(method_delay={"CloneVM_Task": DELAY_MS},
                            task_delay={"LockHandoff": 0, "PowerOn": TASK_DELAY_MS, "Destroy": TASK_DELAY_MS})
    manager = env.start_banlieue("manager", leader_elect=False)
    name = "window"

    # 1. Clone sent, answer not back: the Cloning marker is written before the call.
    env.create_vms([name], desiredPowerState="PoweredOff")
    wait_for("Cloning marker", lambda: condition(env.get(f"{VSMS}/{name}"), "Ready").get("reason") == "Cloning", 30,
             interval=0.1)
    time.sleep(0.5)
    with vc.oracle() as oracle:
        assert oracle.managed() == [], "the clone answered before the kill: not the window under test"
    manager.restart()
    manager.wait_ready()
    env.wait_ready([name], 90)
    assert_exact_vms(env, [name])
    [vm] = managed(vc)
    moref = vm.moref

    # 2. Power-on sent, its task running when the manager dies.
    set_power(env, name, "PoweredOn")
    wait_for("PowerOn task running", lambda: running(env, "powerOn", moref), 30, interval=0.1)
    manager.restart()
    manager.wait_ready()
    assert running(env, "powerOn", moref), "the task ended before the new manager started: not the window under test"
    wait_for("Ready and powered on", lambda: not env.not_ready([name]) and [v.power for v in managed(vc)] == ["poweredOn"],
             90)
    with vc.oracle() as oracle:
        assert tasks_of(oracle, "powerOn").get(moref) == ["success"], "a second PowerOnVM_Task was sent"
    assert_exact_vms(env, [name])

    # 3. Destroy sent, its task running when the manager dies.
    assert env.delete(f"{VMS}/{name}") == 200
    wait_for("Destroy task running", lambda: running(env, "destroy", moref), 60, interval=0.1)
    manager.restart()
    manager.wait_ready()
    assert running(env, "destroy", moref), "the task ended before the new manager started: not the window under test"
    wait_for_clean(env, 90)
    with vc.oracle() as oracle:
        assert tasks_of(oracle, "destroy").get(moref) == ["success"], "a second Destroy_Task was sent"
    assert_serving(manager)
    assert manager.starts == 4


def test_kill_9_while_a_clone_task_outlives_the_task_timeout(chaos_env: ChaosEnv) -> None:
    """The CloneVM_Task answers at once but its task runs 15 s, longer than
    ``--vsphere-task-timeout 4``; the manager is killed while it runs. The restarted manager
    resolves the clone by the task key recorded on the object (annotation
    ``infrastructure.banlieue.io/clone-task``, written once the task has run 5 s): still running, so no second clone even once the
    timeout window has passed."""
    env = chaos_env
    vc = env.single_vcenter(task_delay={"LockHandoff": 0, "CloneVm": 15000})
    manager = env.start_banlieue("manager", "--vsphere-task-timeout", "4", leader_elect=False)
    name = "slow-clone"
    env.create_vms([name], desiredPowerState="PoweredOff")

    def clone_running() -> bool:
        with vc.oracle() as oracle:
            return any("running" in states for states in tasks_of(oracle, "cloneVm").values())

    wait_for("CloneVM task running", clone_running, 30, interval=0.1)
    wait_for("clone task key recorded", lambda: ((env.get(f"{VSMS}/{name}") or {}).get("metadata", {})
                                                 .get("annotations", {}).get(ANNOTATION_CLONE_TASK)), 10, interval=0.1)
    manager.restart()
    manager.wait_ready()
    env.wait_ready([name], 90)
    assert_exact_vms(env, [name])
    with vc.oracle() as oracle:
        clones = tasks_of(oracle, "cloneVm")
    assert sum(len(states) for states in clones.values()) == 1, f"a second CloneVM_Task was sent: {clones}"
    assert_serving(manager)


def test_kill_9_before_the_clone_task_key_is_recorded(chaos_env: ChaosEnv) -> None:
    """The manager is killed in the first seconds of a clone: CloneVM_Task accepted (its task
    runs 15 s, longer than ``--vsphere-task-timeout 4``), the task key not on the object yet. The
    restarted manager finds the clone in vCenter's event history (``VmBeingClonedEvent`` into the
    machine's name since the Cloning marker) and the clone task running on the template: it
    waits, also past the timeout window, and sends no second CloneVM_Task (ADR 0012)."""
    env = chaos_env
    vc = env.single_vcenter(task_delay={"LockHandoff": 0, "CloneVm": 15000})
    manager = env.start_banlieue("manager", "--vsphere-task-timeout", "4", leader_elect=False)
    name = "early-kill"
    env.create_vms([name], desiredPowerState="PoweredOff")

    def clone_tasks() -> dict[str, list[str]]:
        with vc.oracle() as oracle:
            return tasks_of(oracle, "cloneVm")

    wait_for("CloneVM task running", lambda: any("running" in s for s in clone_tasks().values()), 30, interval=0.05)
    manager.restart()
    annotations = (env.get(f"{VSMS}/{name}") or {}).get("metadata", {}).get("annotations") or {}
    assert ANNOTATION_CLONE_TASK not in annotations, "the task key was recorded before the kill: not the window under test"
    manager.wait_ready()
    env.wait_ready([name], 90)
    assert_exact_vms(env, [name])
    clones = clone_tasks()
    assert sum(len(states) for states in clones.values()) == 1, f"a second CloneVM_Task was sent: {clones}"
    assert_serving(manager)
