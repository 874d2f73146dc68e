"""API-server faults while many VMs are provisioned and then deleted (issue 10, first bullet).

Each scenario: one vcsim, one Provider, ``banlieue manager --leader-elect``; the fault is switched
on once the manager is ready and stays on while ``N_VMS`` VirtualMachines are created, become
Ready, and are deleted. Then: all converged, exactly one vcsim VM per VSphereMachine (by
``banlieue.uid`` and by name), nothing left behind, no object stuck with a finalizer, /healthz
still 200, and the fault really fired (the double's counters).

Faults (the double's ``/debug/faults``): watches dropped every 3 s; watches frozen 6 s out of
every 8 s (events held, then delivered); forced 410 Gone on re-watch with the history compacted
(relist) every 3 s; 5% of API requests answered 500; 5% answered 429 with Retry-After 1 s;
409 storms on status writes (every status write refused for 3 s, three storms 5 s apart: a storm
that never ends only measures the exponential backoff, 5 ms doubling to 1000 s).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pytest

from .harness import ChaosEnv, Pulse
from .invariants import assert_exact_vms, assert_serving, delete_all_and_check_clean

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(240)]

N_VMS = 60
READY_TIMEOUT = 150.0


def _errors(rule: dict[str, Any]) -> Callable[[ChaosEnv], AbstractContextManager[Any]]:
    def start(env: ChaosEnv) -> AbstractContextManager[Any]:
        env.faults(errors=[rule])
        return nullcontext()
    return start


FAULTS: dict[str, Callable[[ChaosEnv], AbstractContextManager[Any]]] = {
    "watches-dropped-every-3s": lambda env: Pulse(env, 3.0, {"dropWatches": True}),
    "watches-frozen-6s-of-8s": lambda env: Pulse(env, 8.0, {"freezeWatches": True}, off={"freezeWatches": False},
                                                 on_for=6.0),
    "forced-410-relist-every-3s": lambda env: Pulse(env, 3.0, {"expireNextWatches": 4, "compact": True,
                                                               "dropWatches": True}),
    "5pct-500": _errors({"status": 500, "rate": 0.05}),
    "5pct-429-retry-after": _errors({"status": 429, "rate": 0.05, "retryAfter": 1}),
    "409-storm-on-status-writes": lambda env: Pulse(
        env, 5.0, {"errors": [{"status": 409, "path": "/status$", "rate": 1.0}]}, off="clear", on_for=3.0,
        times=3),
}


def fired(env: ChaosEnv) -> int:
    return sum(int(r["fired"]) for r in env.get("/debug/faults")["errors"])


# A 410 every 3 s keeps each informer in client-go's relist back-off (0.8 s doubling to 30 s,
# jitter up to 2x, reset after 2 min without one): up to 60 s per relist, and the deletions pass
# through two informers in turn (VSphereMachine, then VirtualMachine), so that scenario gets
# a longer clean-up budget than the 120 s the others need (measured: 39-222 s in six runs).
CLEANUP_SECONDS = {"forced-410-relist-every-3s": 200.0}


@pytest.mark.parametrize("fault", [pytest.param(f, marks=pytest.mark.timeout(360)) if f in CLEANUP_SECONDS else f
                                   for f in FAULTS])
def test_vms_converge_under_api_faults(chaos_env: ChaosEnv, fault: str) -> None:
    env = chaos_env
    env.single_vcenter()
    manager = env.start_banlieue("manager")
    before = len(env.requests())
    with FAULTS[fault](env) as pulse:
        names = env.create_vms(f"vm-{i:03d}" for i in range(N_VMS))
        env.wait_ready(names, READY_TIMEOUT)
        assert_exact_vms(env, names)
        delete_all_and_check_clean(env, CLEANUP_SECONDS.get(fault, 120.0))
        assert_serving(manager)
        if isinstance(pulse, Pulse):
            assert pulse.count >= 1
        if fault.startswith("5pct"):
            faults = env.get("/debug/faults")
            assert fired(env) > 0, f"{fault} never fired: {faults}"
    served = env.requests()[before:]
    collection = [r for r in served if r["method"] == "GET" and r["path"].endswith("/virtualmachines")]
    if fault.startswith("409"):
        refused = [r for r in served if r["path"].endswith("/status") and r["status"] == 409]
        assert refused, "no status write was refused with 409"
    if fault.startswith("watches-dropped"):
        rewatches = [r for r in collection if "watch=true" in r["query"]]
        assert len(rewatches) >= 2, f"the VirtualMachine informer did not re-watch: {len(rewatches)} watches"
    if fault.startswith("forced-410"):
        relists = [r for r in collection if "watch=true" not in r["query"]]
        assert relists, "no relist of VirtualMachines after the forced 410s"
    env.clear_faults()
