"""Figures of ``bench/e2e.py`` that need vcsim: Ready throughput (+ its write ceiling), writes per
VM, steady-state cost and vCenter isolation. Each function starts its own :class:`Env` and
appends entries to ``entries`` (see :func:`record`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from e2e_bulk import queues_empty
from e2e_ceiling import replay
from e2e_env import MANAGER_ARGS, NS, VMS, VSMS, Env, cpu_seconds, metric_sum, rss_mib, vm_doc
from e2e_load import ReadyWatch, create_all, requests_by, writes

# Writes the contract needs per VM from create to Ready (SPEC §2-§4): the user's create (1);
# the controller's finalizer on the VirtualMachine (1), its status with a Ready condition from the
# first reconcile and once Ready (2), its apply of the VSphereMachine, which carries the
# provider's finalizer (1; ADR 0011); the provider's spec.providerID (CAPI contract, 1), and the
# VSphereMachine status before the clone (the Cloning record, ADR 0009) and once provisioned (2).
CONTRACT_MIN_WRITES = 8
WRITES_FLOOR = 8


def record(entries: list[dict[str, Any]], name: str, value: float, unit: str, comparison: float | None,
           comparison_label: str, **extra: Any) -> dict[str, Any]:
    """Append (replacing one of the same name) and print one result entry."""
    entry = {"name": name, "value": round(value, 4), "unit": unit,
             "comparison": None if comparison is None else round(comparison, 4),
             "comparison_label": comparison_label, **extra}
    entries[:] = [e for e in entries if e["name"] != name] + [entry]
    print(json.dumps(entry), flush=True)
    return entry


async def provision(env: Env, n: int, prefix: str, provider: str | None = None,
                    timeout: float = 600.0) -> dict[str, Any]:
    """Create ``n`` VMs at once and wait until all are Ready. Returns seconds (first create to
    last Ready), VMs/s, the writes banlieue made (from the request log), every request by verb
    and resource, watch event counts, and manager/API double CPU seconds."""
    assert env.manager is not None
    vm_watch = ReadyWatch(env.url, VMS.format(ns=NS), env.tls)
    vsm_watch = ReadyWatch(env.url, VSMS.format(ns=NS), env.tls)
    await vm_watch.start()
    await vsm_watch.start()
    names = {f"{prefix}-{i:05d}" for i in range(n)}
    since = time.time()
    pids = {"manager": env.manager.pid, **env.api_pids,
            **{f"vcsim_{p}": vc.process.pid for p, vc in env.vcsims.items()}}
    cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
    soap0 = env.soap_by_labels()
    t0 = time.monotonic()
    await create_all(env.url, VMS.format(ns=NS), (vm_doc(name, provider) for name in sorted(names)), tls=env.tls)
    created = time.monotonic() - t0
    if not await vm_watch.wait_ready(names, timeout):
        missing = sorted(names - vm_watch.ready_at.keys())
        raise RuntimeError(f"{len(missing)} VMs not Ready within {timeout} s (e.g. {missing[:3]}): {env.log_tail()}")
    last = max(vm_watch.ready_at[name] for name in names)
    seconds = last - t0
    cpu = {k: round(cpu_seconds(pid) - cpu0[k], 2) for k, pid in pids.items()}
    soap: Counter[str] = Counter()
    for labels, value in env.soap_by_labels().items():
        method = re.search(r'method="([^"]*)"', labels)
        soap[method.group(1) if method else labels] += value - soap0.get(labels, 0.0)
    text = env.metrics()
    controllers = ("virtualmachine", "vspheremachine", "provider", "vmimage")
    counters = {c: {"reconciles": metric_sum(text, "controller_runtime_reconcile_total", controller=c),
                    "errors": metric_sum(text, "controller_runtime_reconcile_errors_total", controller=c),
                    "retries": metric_sum(text, "workqueue_retries_total", name=c)} for c in controllers}
    vsm_ready = sorted(t - t0 for name, t in vsm_watch.ready_at.items() if name in names)
    await asyncio.sleep(3.0)  # trailing writes after Ready (none expected) still count
    log = env.request_log(since)
    await vm_watch.stop()
    await vsm_watch.stop()
    ready_times = sorted(vm_watch.ready_at[name] - t0 for name in names)
    return {
        "n": n, "seconds": seconds, "vms_per_s": n / seconds, "create_seconds": created,
        "first_ready_s": ready_times[0], "p50_ready_s": ready_times[len(ready_times) // 2],
        "writes": writes(log), "requests": requests_by(log),
        "events": {"virtualmachines": dict(vm_watch.events), "vspheremachines": dict(vsm_watch.events)},
        "controllers": counters,
        "vsm_ready_p50_s": vsm_ready[len(vsm_ready) // 2] if vsm_ready else None,
        "vsm_ready_last_s": vsm_ready[-1] if vsm_ready else None,
        "cpu_seconds": cpu, "manager_rss_mib": round(rss_mib(env.manager.pid), 1),
        "soap_per_vm": {k: round(v / n, 2) for k, v in sorted(soap.items()) if v > 0},
    }


CEILING_LABEL = {
    "double": "write ceiling: the same writes replayed by a bare concurrent aiohttp client on the same double",
    "real": "write ceiling: the same writes replayed by a bare concurrent aiohttp client (a ServiceAccount token, "
            "as the manager's) on the same kube-apiserver, same run",
}
"""``vm_ready_throughput``'s comparison label by ``Env.apiserver``."""


def figure_suffix(env: Env, n: int) -> str:
    """Name suffix of the throughput figures: on the double ``""`` for 1,000 VMs, else ``_<n>``
    (the scaling curve keeps other sizes beside the 1,000-VM figure); on the real API server
    ``_real_<n>`` always (the steady-state figures too), so both servers' figures stand side by
    side in one results file."""
    if env.real:
        return f"_real_{n}"
    return "" if n == 1000 else f"_{n}"


def _per_kind(counter: Counter[str], resource: str) -> int:
    return sum(v for k, v in counter.items() if k.split(" ")[1].split("/")[0] == resource)


PROFILE_GIL = False
"""py-spy ``--gil`` (``bench/e2e.py --profile-gil``): only samples of the thread holding the GIL,
i.e. where the CPU goes. Without it, threads blocked on a socket or waiting for the GIL are
sampled too (wall time: with 16 vCenter worker threads the event loop waits for the GIL after
every call that releases it, and that wait shows up as the call's own time)."""


@contextlib.contextmanager
def profiled(pids: dict[str, int], out: Path | None) -> Iterator[None]:
    """``py-spy record --format raw`` (collapsed stacks, 100 Hz, --nonblocking, ``--gil`` when
    ``PROFILE_GIL``) of each pid while the block runs; files ``<out>/<name>.txt``. Nothing when
    ``out`` is None."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).parent / "py-spy")
    procs = [subprocess.Popen([spy, "record", "-p", str(pid), "-o", str(out / f"{name}.txt"), "--format", "raw",
                               "-r", "100", "--nonblocking", *(["--gil"] if PROFILE_GIL else [])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for name, pid in pids.items()]
    try:
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def throughput_and_steady(work: Path, n: int, entries: list[dict[str, Any]], steady_seconds: float,
                          steady: bool = True, profile: Path | None = None) -> dict[str, Any]:
    """Figures 1-3: ``vm_ready_throughput``, ``writes_per_vm``, ``steady_state_*``; with
    ``profile``, py-spy samples the manager and the API double during the provisioning run."""
    with Env(work / f"throughput-{n}", vcsim_opts={"vcenter-a": {}, "vcenter-b": {}}, manager_args=MANAGER_ARGS) as env:
        env.install_fixtures()
        env.start_manager()
        env.wait_ready()
        # Providers Ready (inventory read) before the clock starts: the figure is VM throughput.
        _wait_providers(env)
        assert env.manager is not None
        load0 = os.getloadavg()[0]
        with profiled({"manager": env.manager.pid, **env.api_pids}, profile):
            run = asyncio.run(provision(env, n, "vm", timeout=max(600.0, n / 5.0)))
        w: Counter[str] = run["writes"]
        w["POST virtualmachines"] += n  # the user's creates (this script's), part of create -> Ready
        vm_writes = {k: v for k, v in w.items() if _per_kind(Counter({k: v}), "virtualmachines")
                     or _per_kind(Counter({k: v}), "vspheremachines")}
        per_vm = sum(vm_writes.values()) / n
        # Every write that changes a stored object bumps its resourceVersion and yields one watch
        # event; a write that changes nothing yields none.
        changes = sum(run["events"][r].get(t, 0) for r in ("virtualmachines", "vspheremachines")
                      for t in ("ADDED", "MODIFIED", "DELETED"))
        noop = sum(vm_writes.values()) - changes
        if steady:
            steady_state(env, n, steady_seconds, entries, figure_suffix(env, n) if env.real else "")
        # The manager stops first: the replayed objects are real VirtualMachines it would
        # otherwise reconcile (and slow the replay down). The ceiling is a maximum: best of
        # two replays (this machine is shared, so runs vary).
        env.stop_manager()
        ceiling = max((asyncio.run(replay(env, w, n, f"ceiling-{k}")) for k in range(2)), key=lambda c: c["vms_per_s"])
        suffix = figure_suffix(env, n)
        record(entries, f"vm_ready_throughput{suffix}", run["vms_per_s"], "VMs Ready/s", ceiling["vms_per_s"],
               CEILING_LABEL[env.apiserver],
               vms=n, seconds=round(run["seconds"], 2), ratio_to_ceiling=round(run["vms_per_s"] / ceiling["vms_per_s"], 3),
               floor="50% of ceiling (goal 80%)", first_ready_s=round(run["first_ready_s"], 2),
               p50_ready_s=round(run["p50_ready_s"], 2), create_seconds=round(run["create_seconds"], 2),
               cpu_seconds=run["cpu_seconds"], ceiling_seconds=round(ceiling["seconds"], 2),
               ceiling_writes=ceiling["writes"], manager_rss_mib=run["manager_rss_mib"],
               load_average_1m=round(load0, 2), controllers=run["controllers"],
               vsm_ready_p50_s=run["vsm_ready_p50_s"], vsm_ready_last_s=run["vsm_ready_last_s"],
               soap_per_vm=run["soap_per_vm"],
               cpu_ms_per_vm={k: round(1000 * v / n, 2) for k, v in run["cpu_seconds"].items()},
               ceiling_api_cpu_ms_per_vm=ceiling["api_cpu_ms_per_vm"], ceiling_load_average_1m=ceiling["load_average_1m"],
               requests=dict(sorted(run["requests"].items())),
               apiserver=env.apiserver)
        record(entries, f"writes_per_vm{suffix}", per_vm, "API writes/VM (create to Ready)", CONTRACT_MIN_WRITES,
               "the contract's minimum: create, VM finalizer, VSphereMachine apply (carrying the provider's "
               "finalizer), providerID apply, 2 VirtualMachine and 2 VSphereMachine status writes (a Ready "
               "condition from the first status write on; ADR 0011)", floor=f"<= {WRITES_FLOOR}",
               by_verb_resource=dict(sorted(vm_writes.items())), noop_writes=noop,
               other_writes=dict(sorted((k, v) for k, v in w.items() if k not in vm_writes)), vms=n,
               apiserver=env.apiserver)
        return run


def _wait_providers(env: Env, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, body = env.http("GET", f"/apis/banlieue.io/v1alpha1/namespaces/{NS}/providers")
        items = (body or {}).get("items") or []
        if items and all(any(c["type"] == "Ready" and c["status"] == "True"
                             for c in (p.get("status") or {}).get("conditions") or []) for p in items):
            return
        time.sleep(0.2)
    raise RuntimeError(f"Providers not Ready within {timeout} s: {env.log_tail()}")


def _event_reasons(env: Env, since: float) -> dict[str, int]:
    """Events (read as events.k8s.io/v1) last seen at or after ``since`` (epoch s), counted by
    ``kind reason`` of the object they regard (their series count included)."""
    from datetime import datetime

    _, body = env.http("GET", f"/apis/events.k8s.io/v1/namespaces/{NS}/events", timeout=120)
    out: Counter[str] = Counter()
    for ev in (body or {}).get("items") or []:
        last = (ev.get("deprecatedLastTimestamp") or (ev.get("series") or {}).get("lastObservedTime")
                or ev.get("eventTime") or "")
        try:
            at = datetime.fromisoformat(str(last).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if at >= since:
            out[f"{(ev.get('regarding') or {}).get('kind')} {ev.get('reason')}"] += 1
    return dict(out.most_common(20))


def steady_state(env: Env, n: int, seconds: float, entries: list[dict[str, Any]], suffix: str = "") -> None:
    """Figure 3: API and SOAP requests per minute with ``n`` Ready VMs and nothing changing
    (figure names end with ``suffix``)."""
    # Nothing changing: every work queue empty and no worker busy (twice, 1 s apart), then 5 s
    # for the event recorder's backlog; at most 300 s.
    deadline, calm = time.monotonic() + 300, 0
    while calm < 2 and time.monotonic() < deadline:
        calm = calm + 1 if queues_empty(env) else 0
        time.sleep(1.0)
    time.sleep(5.0)
    assert env.manager is not None
    soap0, since, cpu0 = env.soap_by_labels(), time.time(), cpu_seconds(env.manager.pid)
    time.sleep(seconds)
    soap1, cpu1 = env.soap_by_labels(), cpu_seconds(env.manager.pid)
    soap_delta = {k: v - soap0.get(k, 0.0) for k, v in soap1.items() if v - soap0.get(k, 0.0) > 0}
    log = env.request_log(since)
    reqs = requests_by(log)
    reasons = _event_reasons(env, since)
    keepalive = {k: v for k, v in reqs.items() if "leases" in k or "(watch)" in k}
    other = {k: v for k, v in reqs.items() if k not in keepalive}
    per_min = 60.0 / seconds
    load = round(os.getloadavg()[0], 2)
    record(entries, f"steady_state_api_requests{suffix}", sum(other.values()) * per_min, "API requests/min beyond leases and watches",
           sum(reqs.values()) * per_min, "all API requests/min, including Lease renewals and watch re-opens",
           vms=n, seconds=seconds, by_verb_resource=dict(sorted(reqs.items())), goal=0,
           event_reasons=reasons,
           manager_cpu_percent=round(100 * (cpu1 - cpu0) / seconds, 1), apiserver=env.apiserver, load_average_1m=load)
    record(entries, f"steady_state_soap_requests{suffix}", sum(soap_delta.values()) * per_min, "SOAP requests/min",
           n * 2.0,
           "a controller re-reading every VM once per 30 s", vms=n, seconds=seconds, goal=0,
           by_labels={k: round(v * per_min, 1) for k, v in sorted(soap_delta.items())}, apiserver=env.apiserver)


SLOW_METHODS = {"CloneVM_Task": 5000, "ReconfigVM_Task": 5000, "PowerOnVM_Task": 5000}
"""vcsim ``--method-delay`` (ms) of the slow vCenter in ``vcenter_isolation``."""


async def _isolation_run(env: Env, m: int, tag: str) -> tuple[float, int]:
    """m VMs on vcenter-b (created first) then m on vcenter-a, at once; returns (seconds until
    every vcenter-a VM is Ready, vcenter-b VMs Ready by then)."""
    watch = ReadyWatch(env.url, VMS.format(ns=NS), env.tls)
    await watch.start()
    a = {f"iso-{tag}-a-{i:04d}" for i in range(m)}
    b = {f"iso-{tag}-b-{i:04d}" for i in range(m)}
    t0 = time.monotonic()
    await create_all(env.url, VMS.format(ns=NS), [vm_doc(x, "vcenter-b") for x in sorted(b)], tls=env.tls)
    await create_all(env.url, VMS.format(ns=NS), [vm_doc(x, "vcenter-a") for x in sorted(a)], tls=env.tls)
    if not await watch.wait_ready(a, 600):
        raise RuntimeError(f"vcenter-a VMs not Ready: {env.log_tail()}")
    seconds = max(watch.ready_at[x] for x in a) - t0
    b_ready = len(b & watch.ready_at.keys())
    await watch.stop()
    return seconds, b_ready


def vcenter_isolation(work: Path, m: int, entries: list[dict[str, Any]]) -> None:
    """Figure 7: time for m VMs on a healthy vCenter to be Ready while m VMs go to a second
    vCenter, healthy (baseline) vs slow (vcsim --method-delay 5 s on clone, reconfigure, power on)."""
    results, real, load = {}, False, os.getloadavg()[0]
    for label, slow in (("healthy", {}), ("slow", {"method_delay": SLOW_METHODS})):
        with Env(work / f"isolation-{label}", vcsim_opts={"vcenter-a": {}, "vcenter-b": slow}, manager_args=MANAGER_ARGS) as env:
            env.install_fixtures()
            env.start_manager()
            env.wait_ready()
            _wait_providers(env)
            results[label] = asyncio.run(_isolation_run(env, m, label))
            real = env.real
    healthy, slow_run = results["healthy"][0], results["slow"][0]
    record(entries, "vcenter_isolation_real" if real else "vcenter_isolation", slow_run / healthy, "x time to Ready on the healthy vCenter", 1.2,
           "goal: at most 1.2x with the other vCenter slow", vms_per_vcenter=m,
           healthy_peer_seconds=round(healthy, 2), slow_peer_seconds=round(slow_run, 2),
           slow_vcenter_ready_by_then=results["slow"][1], slow_method_delay_ms=SLOW_METHODS,
           load_average_1m=round(load, 2))
