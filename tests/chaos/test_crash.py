"""Crash safety (issue 10, third bullet): ``kill -9`` of the manager at random moments while VMs
are provisioning and while they are deleting, restarted each time; exact counts at the end.

The VMs are created (and deleted) in batches, one kill per batch at a random moment 0.2-1.5 s
after the batch went in; vcsim delays ``CloneVM_Task`` (800 ms) and ``Destroy_Task`` (500 ms)
so that the kills land while tasks are in flight; vcsim finishes a task whose client died, which is what a real vCenter
does. ``--vsphere-task-timeout 10``: a clone recorded as started (``Cloning ... since``) whose VM
never appears is retried after this long (default 600 s, too long for CI); a crash between the
status write and the clone request is exactly that case.

The seed of the random kill times is printed in failure messages (``CHAOS_SEED`` replays it).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from .harness import ON_THE_REAL_SERVER, VMS, ChaosEnv
from .invariants import assert_exact_vms, assert_serving, wait_for_clean

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(240)]

N_VMS = 40
KILLS_PROVISIONING = 4
KILLS_DELETING = 3


# kill -9 of banlieue's processes: the recovery is banlieue's; once, on kube-apiserver, in plain
# make test (it also ran on the double: 73 s more on the dev machine).
@ON_THE_REAL_SERVER
def test_kill_9_while_provisioning_and_deleting(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    seed = int(os.environ.get("CHAOS_SEED") or time.time())
    rng = random.Random(seed)
    vc = env.single_vcenter(method_delay={"CloneVM_Task": 800, "Destroy_Task": 500})
    # Without --leader-elect: a replacement would first wait out the dead process's Lease (15 s),
    # and the kills must land while work is in flight (leader election: test_leader_election).
    manager = env.start_banlieue("manager", "--vsphere-task-timeout", "10", leader_elect=False)
    names: list[str] = []
    kills = []
    batch = N_VMS // KILLS_PROVISIONING
    for round_ in range(KILLS_PROVISIONING):
        # Each kill lands while a fresh batch is being cloned: at a random moment 0.3-1.5 s in.
        names += env.create_vms(f"vm-{round_ * batch + i:03d}" for i in range(batch))
        time.sleep(rng.uniform(0.3, 1.5))
        with vc.oracle() as oracle:
            in_vcsim = len(oracle.managed())
        ready = len(names) - len(env.not_ready(names))
        kills.append(f"provisioning: {ready}/{len(names)} Ready, {in_vcsim} in vcsim")
        manager.restart()  # SIGKILL, then start again with the same flags
        manager.wait_ready()
    env.wait_ready(names, 120)
    assert_exact_vms(env, names)
    batch = N_VMS // KILLS_DELETING + 1
    for round_ in range(KILLS_DELETING):
        for name in names[round_ * batch:(round_ + 1) * batch]:
            assert env.delete(f"{VMS}/{name}") == 200
        time.sleep(rng.uniform(0.2, 1.0))
        with vc.oracle() as oracle:
            kills.append(f"deleting: {len(env.items(VMS))} objects, {len(oracle.managed())} in vcsim")
        manager.restart()
        manager.wait_ready()
    try:
        wait_for_clean(env, 120)
        assert_serving(manager)
    except (AssertionError, pytest.fail.Exception) as err:
        raise AssertionError(f"seed {seed}, kills {kills}: {err}") from err
    assert manager.starts == 1 + KILLS_PROVISIONING + KILLS_DELETING
    print(f"seed {seed}: {kills}")
