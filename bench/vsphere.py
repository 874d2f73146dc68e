"""vSphere adapter benchmarks against vcsim; results go to ``bench/results/vsphere.json``.

    .venv/bin/python bench/vsphere.py [--vms 100] [--concurrency 16] [--workers 8]
                                      [--latency-ms 0] [--idle-seconds 30]

Figures (entries ``{name, value, unit, comparison, comparison_label}``):

- ``vsphere_provision_throughput``: VMs/s to clone + reconfigure (CPU, memory, OS disk grow,
  one extra disk, a NIC on a DVPG) + write guestinfo + power on ``--vms`` VMs at
  ``--concurrency``; comparison: the same work one VM at a time.
- ``vsphere_soap_per_vm``: SOAP round trips per provisioned VM in steady state (warm session and
  name cache, change watch running, its long polls counted); comparison: the first VM on a cold
  backend (login + inventory index included).
- ``vsphere_idle_soap_per_vm_hour``: SOAP requests per managed VM per hour while idle with the
  change watcher running (measured over ``--idle-seconds`` and extrapolated; goal 0);
  comparison: a controller that re-reads every VM once per 30 s (120 per VM-hour).
  ``long_poll_renewal_bound`` is the ceiling from renewing the long poll every 600 s.

``--latency-ms`` adds that delay to every SOAP method in vcsim (a distant vCenter); the
throughput entry names carry the latency when it is not 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from banlieue.backends.base import Connection, DiskSpec, NicSpec, VMSpec  # noqa: E402
from banlieue.backends.vsphere.backend import VSphereBackend  # noqa: E402
from banlieue.testing.vcsim import VcsimProcess, start_vcsim  # noqa: E402

RESULTS = HERE / "results" / "vsphere.json"
WATCH_MAX_WAIT = 600.0


def record(entries: list[dict[str, Any]], name: str, value: float, unit: str, comparison: float | None,
           comparison_label: str, **extra: Any) -> None:
    entry = {"name": name, "value": round(value, 4), "unit": unit,
             "comparison": None if comparison is None else round(comparison, 4),
             "comparison_label": comparison_label, **extra}
    entries.append(entry)
    print(json.dumps(entry), flush=True)


def connection(vc: VcsimProcess) -> Connection:
    return Connection(provider="bench/vc", endpoint=vc.endpoint, username=vc.username,
                      password=vc.password, ca_bundle=vc.ca_pem)


def vm_spec(i: int) -> VMSpec:
    uid = str(uuid.uuid4())
    dc = f"DC{i % 2}"
    return VMSpec(
        uid=uid, name=f"bench-{i:04d}", datacenter=dc, cluster=f"{dc}_C{i % 3}", template="ubuntu-22.04",
        num_cpus=2, memory_mib=2048, disks=(DiskSpec("os", 20), DiskSpec("data", 10)),
        nics=(NicSpec("eth0", f"{dc}_DVPG0", addresses=(f"10.1.{i // 250}.{i % 250 + 2}/16",), dhcp4=False,
                      gateway4="10.1.0.1"),),
        user_data=b"#cloud-config\n",
    )


async def provision(backend: VSphereBackend, conn: Connection, spec: VMSpec) -> None:
    await backend.create_vm(conn, spec)
    await backend.set_power_state(conn, spec.uid, "PoweredOn")


async def provision_many(backend: VSphereBackend, conn: Connection, specs: list[VMSpec], concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one(spec: VMSpec) -> None:
        async with sem:
            await provision(backend, conn, spec)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for spec in specs:
            tg.create_task(one(spec))
    return time.perf_counter() - start


async def phase(args: argparse.Namespace, opts: dict[str, Any], concurrency: int, idle: bool) -> dict[str, Any]:
    """Provision ``args.vms`` VMs on a fresh vcsim with the change watch running (as in the
    controller); return timings and request counts (and the idle cost when ``idle``)."""
    out: dict[str, Any] = {}
    with start_vcsim(**opts) as vc:
        backend = VSphereBackend(max_workers=args.workers, watch_max_wait=WATCH_MAX_WAIT)
        conn = connection(vc)
        changes = 0

        async def pump() -> None:
            nonlocal changes
            async for _ in backend.watch(conn):
                changes += 1

        try:
            await provision(backend, conn, vm_spec(0))  # cold: login, name cache, template lookup
            out["cold"] = backend.soap_requests(conn)
            watcher = asyncio.create_task(pump())
            async with asyncio.timeout(60):
                while changes < 1:  # the initial batch makes the UID index authoritative
                    await asyncio.sleep(0.05)
            before = backend.soap_requests(conn)
            specs = [vm_spec(i) for i in range(1, args.vms + 1)]
            out["seconds"] = await provision_many(backend, conn, specs, concurrency)
            out["soap"] = backend.soap_requests(conn) - before
            out["by_method"] = dict(sorted(backend.sessions.endpoint_for(conn).soap_by_method.items()))
            if idle:
                await asyncio.sleep(5.0)  # let the provisioning's changes arrive first
                idle_before = backend.soap_requests(conn)
                await asyncio.sleep(args.idle_seconds)
                out["idle_requests"] = backend.soap_requests(conn) - idle_before
            out["changes"] = changes
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        finally:
            await backend.close()
    return out


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    suffix = f"_latency{args.latency_ms}ms" if args.latency_ms else ""
    opts: dict[str, Any] = {"vm": 1, "delay": args.latency_ms} if args.latency_ms else {"vm": 1}
    seq = await phase(args, opts, 1, idle=False)
    par = await phase(args, opts, args.concurrency, idle=not args.latency_ms)
    record(entries, f"vsphere_provision_throughput{suffix}", args.vms / par["seconds"], "VMs/s",
           args.vms / seq["seconds"],
           f"same work one VM at a time; here concurrency {args.concurrency}, {args.workers} threads per vCenter",
           vms=args.vms, seconds=round(par["seconds"], 3))
    record(entries, f"vsphere_soap_per_vm{suffix}", par["soap"] / args.vms, "SOAP requests/VM", par["cold"],
           "first VM on a cold backend (login, inventory index, template lookup included); "
           "value includes the change watch's long polls", by_method=par["by_method"])
    if "idle_requests" in par:
        managed = args.vms + 1
        record(entries, "vsphere_idle_soap_per_vm_hour", par["idle_requests"] / managed * 3600 / args.idle_seconds,
               "SOAP requests/VM/hour", 120.0, "a controller re-reading every VM once per 30 s",
               idle_seconds=args.idle_seconds, requests_while_idle=par["idle_requests"], managed_vms=managed,
               changes_seen=par["changes"], long_poll_renewal_bound=round(3600 / WATCH_MAX_WAIT / managed, 4))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    entries = asyncio.run(run(args))
    existing: list[dict[str, Any]] = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    names = {e["name"] for e in entries}
    merged = [e for e in existing if e.get("name") not in names] + entries
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(merged, indent=2) + "\n")


if __name__ == "__main__":
    main()
