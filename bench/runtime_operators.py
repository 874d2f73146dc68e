"""Operators for the runtime benchmarks, each run as its own process against the API double.

    python bench/runtime_operators.py banlieue|raw URL NAMESPACE CONCURRENCY

Every variant does the same work: for each Widget without ``status.reconciled``, write
``status.reconciled = true`` with one merge patch on /status. ``banlieue`` is a Manager +
ControllerBuilder controller (``max_concurrent_reconciles=CONCURRENCY``); ``raw`` is the
ceiling: a bare kubernetes-asyncio list+watch loop with CONCURRENCY concurrent status patches.
The kopf variant lives in runtime_kopf_operator.py (run by ``kopf run``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from kubernetes_asyncio import client as ka_client
from kubernetes_asyncio import watch as ka_watch

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.client import Client
from banlieue.runtime.config import config_for_url
from banlieue.runtime.kinds import ResourceKind
from banlieue.runtime.manager import Manager
from banlieue.runtime.reconcile import Request, Result

WIDGET = ResourceKind("bench.banlieue.io", "v1", "Widget", "widgets")


class MarkReconciled:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr

    async def reconcile(self, request: Request) -> Result:
        obj = self.mgr.cache.get(WIDGET, request.name, request.namespace)
        if obj is None or (obj.get("status") or {}).get("reconciled"):
            return Result()
        await self.mgr.client.patch_status(WIDGET, request.name, request.namespace, {"status": {"reconciled": True}})
        return Result()


async def run_banlieue(url: str, namespace: str, concurrency: int) -> None:
    mgr = Manager(Client(config_for_url(url)), namespace=namespace, metrics_bind_address="0",
                  health_probe_bind_address="0", handle_signals=True)
    ControllerBuilder(mgr).named("bench-widget").for_(WIDGET).with_options(
        max_concurrent_reconciles=concurrency).complete(MarkReconciled(mgr))
    await mgr.start()


async def run_raw(url: str, namespace: str, concurrency: int) -> None:
    api = ka_client.ApiClient(config_for_url(url))
    objects = ka_client.CustomObjectsApi(api)
    gate = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()

    async def mark(name: str) -> None:
        async with gate:
            await objects.patch_namespaced_custom_object_status(
                WIDGET.group, WIDGET.version, namespace, WIDGET.plural, name, {"status": {"reconciled": True}},
                _content_type="application/merge-patch+json", _request_timeout=30)

    def handle(obj: dict[str, Any]) -> None:
        if not (obj.get("status") or {}).get("reconciled"):
            task = asyncio.create_task(mark(obj["metadata"]["name"]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    listed = await objects.list_namespaced_custom_object(WIDGET.group, WIDGET.version, namespace, WIDGET.plural,
                                                         _request_timeout=60)
    for obj in listed["items"]:
        handle(obj)
    rv = listed["metadata"]["resourceVersion"]
    while True:
        async with ka_watch.Watch() as w:
            async for event in w.stream(objects.list_namespaced_custom_object, WIDGET.group, WIDGET.version,
                                        namespace, WIDGET.plural, resource_version=rv, timeout_seconds=300,
                                        _request_timeout=330):
                obj = event["object"]
                rv = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    handle(obj)


def main() -> None:
    impl, url, namespace, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    runner = {"banlieue": run_banlieue, "raw": run_raw}[impl]
    try:
        asyncio.run(runner(url, namespace, concurrency))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass


if __name__ == "__main__":
    main()
