"""Manager, probes/metrics and the event recorder against the API double over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from runtime_helpers import WIDGET, api_url, eventually, new_client, widget

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.client import Client
from banlieue.runtime.config import config_for_url
from banlieue.runtime.health import HealthServer
from banlieue.runtime.informer_factory import InformerFactory
from banlieue.runtime.kinds import CONFIG_MAP, EVENT, LEASE, ResourceKind
from banlieue.runtime.manager import LeaderElectionLost, Manager
from banlieue.runtime.reconcile import Request, Result
from banlieue.runtime.recorder import EventRecorder


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.text()


async def test_health_server_checks_and_metrics() -> None:
    health = HealthServer(metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0")
    ready = False
    health.add_readyz_check("synced", lambda: ready)
    await health.start()
    try:
        probes, metrics = health.bound_ports["probes"], health.bound_ports["metrics"]
        assert await _get(f"http://127.0.0.1:{probes}/healthz") == (200, "ok")
        status, body = await _get(f"http://127.0.0.1:{probes}/readyz")
        assert status == 500 and "[-]synced failed" in body
        assert (await _get(f"http://127.0.0.1:{probes}/readyz?exclude=synced"))[0] == 200
        ready = True
        assert await _get(f"http://127.0.0.1:{probes}/readyz") == (200, "ok")
        status, body = await _get(f"http://127.0.0.1:{probes}/readyz/synced?verbose")
        assert status == 200 and "[+]synced ok" in body
        status, body = await _get(f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200 and "leader_election_master_status" in body
    finally:
        await health.stop()


class Runnable:
    def __init__(self, need_leader_election: bool) -> None:
        self.need_leader_election = need_leader_election
        self.started = asyncio.Event()
        self.drained = False

    async def start(self) -> None:
        self.started.set()
        await asyncio.Event().wait()

    async def stop(self, drain_timeout: float = 30.0) -> None:
        self.drained = True


async def test_manager_syncs_elects_runs_and_shuts_down(apiserver: Any, client: Client, namespace: str) -> None:
    await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seen", "namespace": namespace}})
    mgr = Manager(
        new_client(apiserver), namespace=namespace, leader_election=True, leader_election_id="mgr-test",
        lease_duration=2.0, renew_deadline=1.5, retry_period=0.3, metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0", graceful_shutdown_timeout=5.0, handle_signals=False,
    )
    informer = mgr.get_informer(CONFIG_MAP)
    assert mgr.get_informer(CONFIG_MAP) is informer
    controller, other = Runnable(True), Runnable(False)
    mgr.add(controller)
    mgr.add(other)
    task = asyncio.create_task(mgr.start())
    try:
        async with asyncio.timeout(10):
            await controller.started.wait()
        assert other.started.is_set() and informer.has_synced()
        assert mgr.cache.get(CONFIG_MAP, "seen", namespace) is not None
        assert [o["metadata"]["name"] for o in mgr.cache.list(CONFIG_MAP, namespace)] == ["seen"]
        port = mgr.health.bound_ports["probes"]
        assert await _get(f"http://127.0.0.1:{port}/readyz") == (200, "ok")
        lease = await client.get(LEASE, "mgr-test", namespace)
        assert lease["spec"]["holderIdentity"] == mgr.elector.identity  # type: ignore[union-attr]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert controller.drained
    lease = await client.get(LEASE, "mgr-test", namespace)
    assert lease["spec"]["holderIdentity"] == ""  # released on shutdown


async def test_event_recorder_posts_and_folds_repeats_into_a_series(client: Client, namespace: str) -> None:
    recorder = EventRecorder(client, "banlieue.io/test", instance="test-1")
    task = asyncio.create_task(recorder.start())
    regarding = await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r", "namespace": namespace}})
    try:
        for _ in range(3):
            recorder.event(regarding, "Warning", "Failed", "backend unreachable")
        recorder.event(regarding, "Normal", "Created", "created", action="Create")
        await recorder.flush()
        events = (await client.list(EVENT, namespace))["items"]
        failed = [e for e in events if e["reason"] == "Failed"]
        assert len(failed) == 1 and len(events) == 2
        assert failed[0]["series"]["count"] == 3
        assert failed[0]["regarding"]["name"] == "r" and failed[0]["reportingController"] == "banlieue.io/test"
        recorder.event({"bogus": True}, "Normal", "X", "no metadata")  # never raises
        await recorder.flush()
        await eventually(lambda: recorder.posted + recorder.dropped == 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_event_recorder_holds_events_while_the_lease_is_not_valid(client: Client, namespace: str) -> None:
    """Fencing (as for reconciles): a leader resumed after SIGSTOP must not post the Events it
    queued before the pause until it knows it still leads; found on kube-apiserver, where a
    resumed ex-leader posted 15 queued Events after the new leader took over
    (tests/chaos/test_leader_election.py)."""
    recorder = EventRecorder(client, "banlieue.io/test", instance="test-1")
    valid = False
    recorder.set_leader_check(lambda: valid, retry_after=0.05)
    assert recorder.fenced_by_lease
    task = asyncio.create_task(recorder.start())
    regarding = await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "h", "namespace": namespace}})
    try:
        recorder.event(regarding, "Normal", "Created", "created", action="Create")
        await asyncio.sleep(0.5)
        assert (await client.list(EVENT, namespace))["items"] == [] and recorder.posted == 0
        valid = True  # renewed: the held Event goes out
        await recorder.flush()
        assert [e["reason"] for e in (await client.list(EVENT, namespace))["items"]] == ["Created"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class MarkReady:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.calls = 0

    async def reconcile(self, request: Request) -> Result:
        self.calls += 1
        obj = self.mgr.cache.get(WIDGET, request.name, request.namespace)
        if obj is not None and not (obj.get("status") or {}).get("ready"):
            await self.mgr.client.patch_status(WIDGET, request.name, request.namespace, {"status": {"ready": True}})
        return Result()


async def test_builder_controller_reconciles_then_stops_when_the_lease_is_lost(
    apiserver: Any, client: Client, namespace: str, widgets: ResourceKind
) -> None:
    mgr = Manager(
        new_client(apiserver), namespace=namespace, leader_election=True, leader_election_id="ctl-test",
        lease_duration=2.0, renew_deadline=1.5, retry_period=0.3, metrics_bind_address="0",
        health_probe_bind_address="0", handle_signals=False,
    )
    reconciler = MarkReady(mgr)
    controller = ControllerBuilder(mgr).named("widget-test").for_(widgets).with_options(
        max_concurrent_reconciles=4).complete(reconciler)
    task = asyncio.create_task(mgr.start())
    try:
        for i in range(20):
            await client.create(widgets, widget(f"w-{i}", namespace))

        async def all_ready() -> bool:
            items = (await client.list(widgets, namespace))["items"]
            return len(items) == 20 and all((o.get("status") or {}).get("ready") for o in items)

        await eventually(all_ready, timeout=15)
        # another holder takes the lease: renewals conflict, leadership is lost, controllers stop
        lease = await client.get(LEASE, "ctl-test", namespace)
        lease["spec"]["holderIdentity"] = "usurper"
        lease["spec"]["leaseDurationSeconds"] = 60
        await client.update(LEASE, lease)
        with pytest.raises(LeaderElectionLost):
            async with asyncio.timeout(6):
                await task
        assert controller.queue.shutting_down
        calls = reconciler.calls
        await client.create(widgets, widget("after-loss", namespace))
        await asyncio.sleep(0.5)
        assert reconciler.calls == calls
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeaderElectionLost):
            await task


async def test_sigterm_drains_in_flight_reconciles_and_releases_the_lease(
    apiserver: Any, client: Client, namespace: str, widgets: ResourceKind
) -> None:
    script = Path(__file__).with_name("runtime_sigterm_manager.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script.parent), os.environ.get("PYTHONPATH", "")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), api_url(apiserver), namespace, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        await client.create(widgets, widget("slow", namespace))
        async with asyncio.timeout(20):
            while (await proc.stdout.readline()).strip() != b"reconciling":
                pass
        proc.send_signal(signal.SIGTERM)  # mid-reconcile
        async with asyncio.timeout(20):
            rest = await proc.stdout.read()
            code = await proc.wait()
        assert code == 0 and b"stopped" in rest
        obj = await client.get(widgets, "slow", namespace)
        assert obj["status"] == {"drained": True}  # the in-flight reconcile finished
        lease = await client.get(LEASE, "sigterm-test", namespace)
        assert lease["spec"]["holderIdentity"] == ""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class CountingClient(Client):
    """Counts LIST and WATCH requests per kind (the informers' traffic)."""

    def __init__(self, apiserver: Any) -> None:
        super().__init__(config_for_url(api_url(apiserver)))
        self.lists: dict[str, int] = {}
        self.watches: dict[str, int] = {}

    async def list(self, kind: ResourceKind, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.lists[kind.plural] = self.lists.get(kind.plural, 0) + 1
        return await super().list(kind, *args, **kwargs)

    def watch(self, kind: ResourceKind, *args: Any, **kwargs: Any) -> Any:
        self.watches[kind.plural] = self.watches.get(kind.plural, 0) + 1
        return super().watch(kind, *args, **kwargs)


class Names:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    async def reconcile(self, request: Request) -> Result:
        self.seen.add(request.name)
        return Result()


async def test_managers_sharing_an_informer_factory_list_once_and_both_get_events(
    apiserver: Any, client: Client, namespace: str
) -> None:
    await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "before", "namespace": namespace}})
    counting = CountingClient(apiserver)
    factory = InformerFactory(counting, namespace=namespace)
    managers = [Manager(new_client(apiserver), namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0",
                        handle_signals=False, informers=factory) for _ in range(2)]
    recorders = [Names(), Names()]
    for i, (mgr, names) in enumerate(zip(managers, recorders, strict=True)):
        ControllerBuilder(mgr).named(f"shared-{i}").for_(CONFIG_MAP).complete(names)
    assert managers[0].get_informer(CONFIG_MAP) is managers[1].get_informer(CONFIG_MAP)
    tasks = [asyncio.create_task(m.start()) for m in managers]
    try:
        await eventually(lambda: all(r.seen == {"before"} for r in recorders))
        await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": namespace}})
        await eventually(lambda: all(r.seen == {"before", "after"} for r in recorders))
        assert counting.lists == {"configmaps": 1} and counting.watches == {"configmaps": 1}
        for mgr in managers:
            assert {o["metadata"]["name"] for o in mgr.cache.list(CONFIG_MAP, namespace)} == {"before", "after"}
        # The first Manager stops: the informer keeps serving the second one.
        tasks[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        assert factory.running
        await client.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": namespace}})
        await eventually(lambda: "late" in recorders[1].seen)
        assert "late" not in recorders[0].seen
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await counting.close()
    assert not factory.running  # the last Manager's shutdown stopped the informers
    assert counting.lists == {"configmaps": 1}


async def test_a_shared_informer_factory_sets_the_scope(apiserver: Any) -> None:
    client = new_client(apiserver)
    try:
        factory = InformerFactory(client, namespace="a")
        with pytest.raises(ValueError):
            Manager(client, namespace="b", informers=factory, handle_signals=False)
        with pytest.raises(ValueError):
            Manager(client, namespace="a", informers=factory, informer_options={"page_size": 10}, handle_signals=False)
        assert Manager(client, namespace="a", informers=factory, handle_signals=False).informers is factory
    finally:
        await client.close()
