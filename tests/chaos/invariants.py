"""The invariants every chaos scenario ends with (issue 10).

- every object converges (VirtualMachines Ready; or, after deletion, gone);
- no duplicate VM in vcsim: banlieue's VMs counted by the ``banlieue.uid`` extraConfig key and by
  name, exactly one per VSphereMachine;
- no VM left behind after deletion (no ``banlieue.uid`` VM in any vcsim);
- no object stuck with a finalizer (no VirtualMachine or VSphereMachine left at all);
- the banlieue processes still serve ``/healthz``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest

from .harness import LIST_POLL, VMS, VSMS, BanlieueProcess, ChaosEnv, wait_for

CONVERGED_POLL = 0.5
"""Seconds between two looks at every vcsim (one property retrieval per simulator) while waiting
for convergence; the other waits poll the API server every ``LIST_POLL`` s."""


def assert_exact_vms(env: ChaosEnv, names: Iterable[str], timeout: float = 30.0) -> None:
    """One vcsim VM per VSphereMachine of ``names`` (by UID and by name), none other, no duplicate.

    Waits up to ``timeout`` s for stragglers (a clone still landing) to settle.
    """
    wanted = set(names)

    def check() -> str | None:
        vsms = {v["metadata"]["name"]: v["metadata"]["uid"] for v in env.items(VSMS)}
        managed = []
        dups: dict[str, list[str]] = {}
        for vc_name, vc in env.vcenters.items():
            with vc.oracle() as oracle:
                managed += [(vc_name, v) for v in oracle.managed()]
                dups.update({f"{vc_name}/{k}": m for k, m in oracle.duplicates().items()})
        by_uid = {v.uid: v for _, v in managed}
        problems = []
        if dups:
            problems.append(f"duplicates {dups}")
        missing = {n for n in wanted if vsms.get(n) not in by_uid}
        if missing:
            problems.append(f"no vcsim VM for {sorted(missing)[:10]}")
        extra = [f"{vc}/{v.name}" for vc, v in managed if v.uid not in {vsms.get(n) for n in wanted}]
        if extra:
            problems.append(f"unexpected VMs {extra[:10]}")
        return "; ".join(problems) or None

    deadline = time.monotonic() + timeout
    problem = check()
    while problem and time.monotonic() < deadline:
        time.sleep(CONVERGED_POLL)
        problem = check()
    assert problem is None, problem


def delete_all_and_check_clean(env: ChaosEnv, timeout: float = 120.0) -> None:
    """Delete every VirtualMachine; wait until no VirtualMachine/VSphereMachine is left (none stuck
    with a finalizer) and no banlieue VM is left in any vcsim."""
    for name in env.vms():
        env.delete(f"{VMS}/{name}")
    wait_for_clean(env, timeout)


def wait_for_clean(env: ChaosEnv, timeout: float = 120.0) -> None:
    def leftovers() -> str | None:
        stuck = [f"VirtualMachine/{v['metadata']['name']} finalizers={v['metadata'].get('finalizers')}"
                 for v in env.items(VMS)]
        stuck += [f"VSphereMachine/{v['metadata']['name']} finalizers={v['metadata'].get('finalizers')}"
                  for v in env.items(VSMS)]
        return "; ".join(stuck[:10]) or None

    deadline = time.monotonic() + timeout
    left = leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(LIST_POLL)
        left = leftovers()
    if left:
        pytest.fail(f"objects left after {timeout:g} s (stuck finalizers): {left}")
    for name, vc in env.vcenters.items():
        with vc.oracle() as oracle:
            behind = [v.name for v in oracle.managed()]
        assert not behind, f"VMs left behind in {name}'s vcsim: {behind[:10]}"


def assert_serving(*procs: BanlieueProcess) -> None:
    """Each process is alive and answers /healthz with 200."""
    for proc in procs:
        assert proc.alive(), f"banlieue pid {proc.pid} exited with {proc.process.returncode}:\n{proc.tail()}"
        wait_for(f"/healthz of pid {proc.pid}", lambda p=proc: p.healthz() == 200, 10)  # type: ignore[misc]
