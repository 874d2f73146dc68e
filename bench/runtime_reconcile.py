"""Drivers for the reconcile benchmarks of bench/runtime.py (the API double runs in its own
process; each operator variant too, so the driver's own work is the same for all of them).

- ``throughput(impl, n, concurrency)``: create ``n`` Widgets at once with the operator idle and
  synced; seconds until every one shows ``status.reconciled`` (seen through a watch).
- ``event_latency(samples)``: an idle in-process banlieue controller; per sample, the time from
  sending a spec patch to the reconcile of that change starting.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from runtime_operators import WIDGET

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.client import Client
from banlieue.runtime.config import config_for_url
from banlieue.runtime.errors import AlreadyExists, NotFound
from banlieue.runtime.kinds import CRD, NAMESPACE
from banlieue.runtime.manager import Manager
from banlieue.runtime.reconcile import Request, Result
from banlieue.testing.apiserver.fixture import start_subprocess

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
CRD_BODY = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{WIDGET.plural}.{WIDGET.group}"},
    "spec": {"group": WIDGET.group, "scope": "Namespaced",
             "names": {"plural": WIDGET.plural, "singular": "widget", "kind": WIDGET.kind, "listKind": "WidgetList"},
             "versions": [{"name": WIDGET.version, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}


def widget(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": WIDGET.api_version, "kind": WIDGET.kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"size": 1}}


async def prepare(client: Client) -> str:
    try:
        await client.create(CRD, CRD_BODY)
    except AlreadyExists:
        pass
    for _ in range(200):
        try:
            await client.list(WIDGET, limit=1)
            break
        except NotFound:
            await asyncio.sleep(0.05)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return ns


async def _wait_reconciled(client: Client, name: str, ns: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ((await client.get(WIDGET, name, ns)).get("status") or {}).get("reconciled"):
                return
        except NotFound:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{name} not reconciled within {timeout} s")


def _operator(impl: str, url: str, kubeconfig: Path, ns: str, concurrency: int) -> subprocess.Popen[bytes]:
    if impl == "kopf":
        cmd = [str(VENV_BIN / "kopf"), "run", "--standalone", "--namespace", ns, "-q",
               str(HERE / "runtime_kopf_operator.py")]
    else:
        cmd = [sys.executable, str(HERE / "runtime_operators.py"), impl, url, ns, str(concurrency)]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(HERE.parent)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE.parent)


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds used so far by process ``pid`` (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(impl: str, n: int, concurrency: int) -> tuple[float, float]:
    """(wall seconds from the first create to the last object seen reconciled, operator CPU
    seconds over the same span), on a fresh API double."""
    with start_subprocess() as api:
        client = Client(config_for_url(api.url))
        try:
            ns = await prepare(client)
            proc = _operator(impl, api.url, api.kubeconfig_path, ns, concurrency)
            try:
                await client.create(WIDGET, widget("warmup", ns))
                await _wait_reconciled(client, "warmup", ns)
                rv = (await client.list(WIDGET, ns))["metadata"]["resourceVersion"]
                done: set[str] = set()
                finished = asyncio.Event()

                async def watch() -> None:
                    async for event in client.watch(WIDGET, ns, resource_version=rv, timeout_seconds=600):
                        obj = event.get("object") or {}
                        if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("status") or {}).get("reconciled"):
                            done.add(obj["metadata"]["name"])
                            if len(done) >= n + 1:
                                finished.set()
                                return

                watcher = asyncio.create_task(watch())
                gate = asyncio.Semaphore(64)

                async def create(i: int) -> None:
                    async with gate:
                        await client.create(WIDGET, widget(f"w-{i:05d}", ns))

                done.add("warmup")
                cpu0 = cpu_seconds(proc.pid)
                t0 = time.perf_counter()
                await asyncio.gather(*(create(i) for i in range(n)))
                await asyncio.wait_for(finished.wait(), timeout=600)
                elapsed = time.perf_counter() - t0
                await asyncio.sleep(0.2)  # let the operator finish handling its own last echo
                cpu = cpu_seconds(proc.pid) - cpu0
                watcher.cancel()
                return elapsed, cpu
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            await client.close()


class _Stamp:
    """Reconciler that stamps when it first sees each ``spec.seq``."""

    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.seen: dict[int, float] = {}
        self.event = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        now = time.perf_counter()
        obj = self.mgr.cache.get(WIDGET, request.name, request.namespace)
        if obj is not None:
            seq = int(obj["spec"].get("seq", -1))
            self.seen.setdefault(seq, now)
            self.event.set()
        return Result()


async def event_latency(samples: int) -> list[float]:
    """Seconds from sending a spec patch to the start of the reconcile that sees it."""
    with start_subprocess() as api:
        writer = Client(config_for_url(api.url))
        ns = await prepare(writer)
        await writer.create(WIDGET, widget("probe", ns))
        mgr = Manager(Client(config_for_url(api.url)), namespace=ns, metrics_bind_address="0",
                      health_probe_bind_address="0", handle_signals=False)
        stamp = _Stamp(mgr)
        ControllerBuilder(mgr).named("bench-latency").for_(WIDGET).complete(stamp)
        task = asyncio.create_task(mgr.start())
        latencies: list[float] = []
        try:
            async with asyncio.timeout(60):
                while -1 not in stamp.seen:
                    await asyncio.sleep(0.01)
            for seq in range(samples):
                await asyncio.sleep(0.02)  # idle controller between samples
                stamp.event.clear()
                t0 = time.perf_counter()
                await writer.patch(WIDGET, "probe", ns, {"spec": {"seq": seq}})
                async with asyncio.timeout(10):
                    while seq not in stamp.seen:
                        await stamp.event.wait()
                        stamp.event.clear()
                latencies.append(stamp.seen[seq] - t0)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await writer.close()
        return latencies


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100]."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]

