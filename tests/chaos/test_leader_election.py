"""Leader election (issue 10, fourth bullet): two ``banlieue manager --leader-elect`` processes.

The leader is frozen (SIGSTOP) while a batch of VMs is created: the follower must take over
within the Lease timing (15 s lease + 2 s retry, the CLI has no flags to shorten them; budget
``TAKEOVER_BUDGET``) and converge the batch; the old leader is then resumed (SIGCONT) and must
not act any more. Then the new leader is killed (SIGKILL) while another batch is created, and the
old one, restarted, takes over.

"At no moment do both act" is checked on the API double's request log: every write (POST, PUT,
PATCH, DELETE) other than to a Lease carries the writer's User-Agent (``... pid/<pid>``); ordered
by arrival, the writes of each process form one contiguous run (no interleaving), and after the
follower's first write the frozen leader writes nothing.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from banlieue.reconcilers.kinds import LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE

from .harness import LEASES, ON_THE_REAL_SERVER, ChaosEnv, wait_for
from .invariants import assert_exact_vms, assert_serving, delete_all_and_check_clean

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(240)]

BATCH = 20
TAKEOVER_BUDGET = 15.0 + 2.0 + 8.0  # lease + retry + jitter, the renew loop and polling slack
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def holders(env: ChaosEnv) -> dict[str, str]:
    out = {}
    for lease in (LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE):
        body = env.get(f"{LEASES}/{lease}") or {}
        out[lease] = str((body.get("spec") or {}).get("holderIdentity") or "")
    return out


def writes(env: ChaosEnv) -> list[tuple[float, int, str, str]]:
    """(arrival time, writer pid, method, path) of every non-Lease write, in arrival order."""
    out = []
    for r in env.requests():
        match = re.search(r"\bpid/(\d+)", r.get("user_agent") or "")
        if r["method"] in WRITES and "/leases" not in r["path"] and match:
            out.append((float(r["time"]), int(match.group(1)), r["method"], r["path"]))
    return sorted(out)


def runs(ws: list[tuple[float, int, str, str]]) -> list[int]:
    """The writer pids in order, consecutive duplicates collapsed."""
    out: list[int] = []
    for _, pid, _, _ in ws:
        if not out or out[-1] != pid:
            out.append(pid)
    return out


def takeover(env: ChaosEnv, before: dict[str, str], started: float, what: str) -> float:
    """Seconds until both Leases have a holder other than ``before``'s."""
    wait_for(f"{what}: both Leases change holder", lambda: all(
        h and h != before[lease] for lease, h in holders(env).items()), TAKEOVER_BUDGET + 5, 0.25)
    return time.monotonic() - started


# Real server only by default (BANLIEUE_TEST_APISERVER=double runs it on the double): Lease
# semantics are kube-apiserver's to judge, and the double's run cost 110 s of CI (issue 22 note).
@ON_THE_REAL_SERVER
def test_leader_frozen_resumed_killed(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    env.single_vcenter()
    a = env.start_banlieue("manager")
    wait_for("A holds both Leases", lambda: all(holders(env).values()), 20)
    b = env.start_banlieue("manager")
    names = env.create_vms(f"a-{i:03d}" for i in range(BATCH))
    env.wait_ready(names, 60)
    assert set(runs(writes(env))) == {a.pid}, "the follower wrote while the leader was healthy"

    # Freeze the leader; the follower must take over and converge a new batch.
    held = holders(env)
    frozen_at = time.monotonic()
    a.kill(signal.SIGSTOP)
    names += env.create_vms(f"b-{i:03d}" for i in range(BATCH))
    took = {"frozen": takeover(env, held, frozen_at, "leader frozen")}
    env.wait_ready(names, 60)
    first_b = next(t for t, pid, _, _ in writes(env) if pid == b.pid)

    # Resume the old leader: it must notice it lost the Leases before doing anything.
    resumed = time.time()
    a.kill(signal.SIGCONT)
    wait_for("the resumed ex-leader exits (leadership lost)", lambda: not a.alive(), 30)
    late = [(round(t - resumed, 3), m, p.rsplit("/", 3)[-3:]) for t, pid, m, p in writes(env)
            if pid == a.pid and t >= first_b]
    assert not late, (f"the resumed ex-leader made {len(late)} writes after the new leader took over "
                      f"(seconds after SIGCONT, method, path): {late[:6]}")

    # Restart A as a follower, then kill the leader B: A takes over.
    first_a = a.pid
    a.restart()
    a.wait_ready()
    held = holders(env)
    killed_at = time.monotonic()
    b.kill(signal.SIGKILL)
    names += env.create_vms(f"c-{i:03d}" for i in range(BATCH))
    took["killed"] = takeover(env, held, killed_at, "leader killed")
    env.wait_ready(names, 60)
    assert_exact_vms(env, names)
    delete_all_and_check_clean(env)
    assert_serving(a)

    order = runs(writes(env))
    assert len(order) == len(set(order)), f"writers interleaved (pid order {order})"
    assert order == [first_a, b.pid, a.pid], f"writers (pid order) {order}; A {first_a} then {a.pid}, B {b.pid}"
    for what, seconds in took.items():
        assert seconds <= TAKEOVER_BUDGET, f"takeover after the leader was {what}: {seconds:.1f} s"
    print(f"takeover seconds: { {k: round(v, 1) for k, v in took.items()} }")

