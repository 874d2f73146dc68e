"""The write ceiling of ``vm_ready_throughput``: the writes banlieue issued in a run (counted by
verb, resource, subresource and patch type from the API double's request log) replayed against
the same double by a bare concurrent aiohttp client, in namespace ``ceiling``, on N fresh
VirtualMachines and VSphereMachines shaped like the run's (bodies copied from a Ready VM and its
VSphereMachine). Every replayed write changes its object (a varying condition message or
annotation), so none is cheaper than banlieue's. No reads, no watches, no decisions: the rate the
double can absorb these writes at is the ceiling for any controller issuing them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from collections import Counter
from typing import Any

import aiohttp
from e2e_env import NS, VMS, VSMS, Env, cpu_seconds
from e2e_load import connector

CONCURRENCY = 32
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def _template(env: Env) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """A Ready VM, its VSphereMachine, and one Event (or None) from the run, as body templates."""
    _, vms = env.http("GET", VMS.format(ns=NS) + "?limit=1")
    vm = vms["items"][0]
    _, vsm = env.http("GET", VSMS.format(ns=NS) + "/" + vm["metadata"]["name"])
    # core/v1, as banlieue writes them (banlieue/runtime/recorder.py): kube-apiserver refuses an
    # events.k8s.io/v1 create carrying the deprecated fields a core/v1 Event read that way has.
    _, events = env.http("GET", f"/api/v1/namespaces/{NS}/events?limit=1")
    ev = (events or {}).get("items") or [None]
    return vm, vsm, ev[0]


def _strip(obj: dict[str, Any], name: str, ns: str, keep_status: bool = False) -> dict[str, Any]:
    out = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
           "metadata": {"name": name, "namespace": ns,
                        **({"labels": obj["metadata"]["labels"]} if obj["metadata"].get("labels") else {})},
           "spec": copy.deepcopy(obj.get("spec") or {})}
    if keep_status:
        out["status"] = copy.deepcopy(obj.get("status") or {})
    return out


def _status_body(obj: dict[str, Any], name: str, ns: str, step: int) -> dict[str, Any]:
    status = copy.deepcopy(obj.get("status") or {})
    for c in status.get("conditions") or []:
        c["message"] = f"{c.get('message', '')} (step {step})"
        break
    else:
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": "Step", "message": f"step {step}",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "metadata": {"name": name, "namespace": ns}, "status": status}


def _split(total: int, n: int, i: int) -> int:
    """How many of ``total`` operations object ``i`` of ``n`` does (spread evenly)."""
    return total // n + (1 if i < total % n else 0)


async def replay(env: Env, counts: Counter[str], n: int, ns: str = "ceiling") -> dict[str, Any]:
    """Replay ``counts`` (keys from ``e2e_load.classify``) over ``n`` objects with CONCURRENCY
    requests in flight, as the bare client of ``Env.ceiling_client`` (on the real API server: a
    ServiceAccount token, like the manager's). Returns {seconds, vms_per_s, writes (replayed, by
    key), api_cpu_ms_per_vm (by ``Env.api_pids`` label), load_average_1m (at its start)}. Raises
    RuntimeError when a replayed write fails (other than conflicts on Leases)."""
    vm_t, vsm_t, ev_t = _template(env)
    env.http("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    tls, headers = env.ceiling_client()
    done: Counter[str] = Counter()
    base = env.url
    vm_path = VMS.format(ns=ns)
    vsm_path = VSMS.format(ns=ns)
    ev_path = f"/api/v1/namespaces/{ns}/events"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    known = {"POST virtualmachines", "POST events", "PATCH virtualmachines (merge)",
             "PATCH virtualmachines/status (apply)", "PATCH virtualmachines/status (merge)",
             "PATCH vspheremachines (apply)", "PATCH vspheremachines (merge)",
             "PATCH vspheremachines/status (apply)", "PATCH vspheremachines/status (merge)",
             "PATCH virtualmachines (apply)", "PUT leases", "POST leases"}
    unknown = set(counts) - known
    if unknown:
        print(f"ceiling: not replayed (no recipe): {sorted(unknown)}", flush=True)

    async with aiohttp.ClientSession(connector=connector(CONCURRENCY, tls), headers=headers) as s:
        async def send(method: str, path: str, body: Any, ctype: str, key: str, query: str = "") -> dict[str, Any]:
            async with s.request(method, base + path + query, data=json.dumps(body),
                                 headers={"Content-Type": ctype}) as resp:
                text = await resp.text()
                if resp.status >= 300:
                    raise RuntimeError(f"ceiling {key}: {resp.status} {text[:300]}")
                done[key] += 1
                result: dict[str, Any] = json.loads(text)
                return result

        async def chain(i: int) -> None:
            name = f"c-{i:05d}"
            k = "POST virtualmachines"
            if _split(counts[k], n, i) or True:  # every object needs its VM
                await send("POST", vm_path, _strip(vm_t, name, ns), "application/json", k)
            for _ in range(_split(counts["PATCH virtualmachines (merge)"], n, i)):
                await send("PATCH", f"{vm_path}/{name}", {"metadata": {"finalizers": ["banlieue.io/virtualmachine"],
                           "annotations": {"step": str(time.monotonic())}}}, MERGE, "PATCH virtualmachines (merge)")
            for _ in range(_split(counts["PATCH virtualmachines (apply)"], n, i)):
                await send("PATCH", f"{vm_path}/{name}", {**_strip(vm_t, name, ns), "metadata": {
                    "name": name, "namespace": ns, "annotations": {"step": str(time.monotonic())}}},
                    APPLY, "PATCH virtualmachines (apply)", "?fieldManager=ceiling&force=true")
            for key, sub, ctype, q in (("PATCH vspheremachines (apply)", "", APPLY, "?fieldManager=ceiling&force=true"),):
                for j in range(_split(counts[key], n, i)):
                    body = _strip(vsm_t, name, ns)
                    body["metadata"]["annotations"] = {"step": str(j)}
                    await send("PATCH", f"{vsm_path}/{name}{sub}", body, ctype, key, q)
            for _ in range(_split(counts["PATCH vspheremachines (merge)"], n, i)):
                await send("PATCH", f"{vsm_path}/{name}", {"metadata": {
                    "finalizers": ["infrastructure.banlieue.io/vspheremachine"],
                    "annotations": {"step": str(time.monotonic())}}}, MERGE, "PATCH vspheremachines (merge)")
            for res, path, tmpl in (("vspheremachines", vsm_path, vsm_t), ("virtualmachines", vm_path, vm_t)):
                for kind, ctype, q in (("apply", APPLY, "?fieldManager=ceiling&force=true"), ("merge", MERGE, "")):
                    key = f"PATCH {res}/status ({kind})"
                    for j in range(_split(counts[key], n, i)):
                        body = _status_body(tmpl, name, ns, j)
                        await send("PATCH", f"{path}/{name}/status", body if kind == "apply" else {"status": body["status"]},
                                   ctype, key, q)
            if ev_t is not None:
                for j in range(_split(counts["POST events"], n, i)):
                    ev = copy.deepcopy(ev_t)
                    ev["metadata"] = {"name": f"{name}.{j}", "namespace": ns}
                    ev.get("involvedObject", {}).update({"name": name, "namespace": ns})
                    await send("POST", ev_path, ev, "application/json", "POST events")

        async def leases() -> None:
            total = counts["PUT leases"] + counts["POST leases"]
            if not total:
                return
            lease = await send("POST", lease_path, {"metadata": {"name": "ceiling"}, "spec": {
                "holderIdentity": "ceiling", "leaseDurationSeconds": 15}}, "application/json", "POST leases")
            for j in range(total - 1):
                lease["spec"]["renewTime"] = f"2026-01-01T00:00:{j % 60:02d}.000000Z"
                lease["spec"]["leaseTransitions"] = j
                lease = await send("PUT", f"{lease_path}/ceiling", lease, "application/json", "PUT leases")

        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                await chain(queue.get_nowait())

        pids = env.api_pids
        load = os.getloadavg()[0]
        t0, cpu0 = time.monotonic(), {k: cpu_seconds(pid) for k, pid in pids.items()}
        await asyncio.gather(leases(), *(worker() for _ in range(CONCURRENCY)))
        seconds = time.monotonic() - t0
        api_cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
    return {"seconds": seconds, "vms_per_s": n / seconds, "writes": dict(sorted(done.items())),
            "api_cpu_ms_per_vm": {k: round(1000 * v / n, 2) for k, v in api_cpu.items()},
            "load_average_1m": round(load, 2)}
