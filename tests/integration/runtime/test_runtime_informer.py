"""Informer against the API double: delivery and per-key order, relist with tombstones after a
forced 410, dropped and frozen watches, 409/429/500 faults. Every scenario ends with the cache
equal to the server state."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from runtime_helpers import Faults, api_url, eventually

from banlieue.runtime.client import Client, retry_on_conflict
from banlieue.runtime.config import config_for_url
from banlieue.runtime.event import DeletedFinalStateUnknown, Object
from banlieue.runtime.informer import Backoff, Informer
from banlieue.runtime.kinds import CONFIG_MAP


class Recorder:
    """A ResourceEventHandler that records (type, key, resourceVersion) per key."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.by_key: dict[str, list[str]] = defaultdict(list)
        self.tombstones: list[DeletedFinalStateUnknown] = []
        self.initial = 0

    @staticmethod
    def _key(obj: Object) -> str:
        return f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"

    def on_add(self, obj: Object, is_in_initial_list: bool) -> None:
        self.initial += is_in_initial_list
        self._note("add", obj)

    def on_update(self, old: Object, new: Object) -> None:
        assert int(new["metadata"]["resourceVersion"]) >= int(old["metadata"]["resourceVersion"])
        self._note("update", new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self.tombstones.append(obj)
            obj = obj.obj
        self._note("delete", obj)

    def _note(self, type_: str, obj: Object) -> None:
        key = self._key(obj)
        self.events.append((type_, key, obj["metadata"].get("resourceVersion", "")))
        self.by_key[key].append(type_)


def cm(name: str, namespace: str, value: str = "0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"v": value}}


async def server_state(client: Client, namespace: str) -> dict[str, str]:
    items = (await client.list(CONFIG_MAP, namespace))["items"]
    return {f"{namespace}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}


def cache_state(informer: Informer) -> dict[str, str]:
    return {k: informer.store.resource_version(k) or "" for k in informer.store.list_keys()}


async def converged(informer: Informer, client: Client, namespace: str, timeout: float = 15.0) -> None:
    async def same() -> bool:
        return cache_state(informer) == await server_state(client, namespace)

    await eventually(same, timeout=timeout, interval=0.1)


@contextlib.asynccontextmanager
async def start_informer(client: Client, namespace: str, silence: float) -> AsyncIterator[tuple[Informer, Recorder]]:
    informer = Informer(client, CONFIG_MAP, namespace=namespace, watch_silence_timeout=silence,
                        backoff=Backoff(initial=0.05, cap=0.5))
    recorder = Recorder()
    informer.add_event_handler(recorder)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(10)
        yield informer, recorder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def running(client: Client, namespace: str) -> AsyncIterator[tuple[Informer, Recorder]]:
    """A synced informer whose watch counts as dead after 2 s of silence (bookmarks come every 1 s)."""
    async with start_informer(client, namespace, silence=2.0) as pair:
        yield pair


async def freeze(faults: Faults) -> None:
    # The double checks the freeze flag between waits of up to one bookmark interval (1 s):
    # wait that long so that no event slips out after the freeze.
    await faults.set(freezeWatches=True)
    await asyncio.sleep(1.1)


async def test_initial_list_then_events_in_order_per_key(client: Client, namespace: str) -> None:
    for i in range(3):
        await client.create(CONFIG_MAP, cm(f"pre-{i}", namespace))
    informer = Informer(client, CONFIG_MAP, namespace=namespace, page_size=2)  # 2 pages
    recorder = Recorder()
    informer.add_event_handler(recorder)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(10)
        assert recorder.initial == 3
        for i in range(10):
            await client.create(CONFIG_MAP, cm(f"o-{i}", namespace))
        for round_ in range(3):
            for i in range(10):
                await client.patch(CONFIG_MAP, f"o-{i}", namespace, {"data": {"v": str(round_ + 1)}})
        for i in range(4):
            await client.delete(CONFIG_MAP, f"o-{i}", namespace)
        await converged(informer, client, namespace)
        await eventually(lambda: len(recorder.by_key[f"{namespace}/o-0"]) == 5)
        for i in range(10):
            expected = ["add", "update", "update", "update"] + (["delete"] if i < 4 else [])
            assert recorder.by_key[f"{namespace}/o-{i}"] == expected
        late = Recorder()
        informer.add_event_handler(late)  # a late handler gets the cached objects as adds
        assert sorted(k for t, k, _ in late.events if t == "add") == sorted(informer.store.list_keys())
        got = informer.store.get(f"{namespace}/o-9")
        assert got is not None and got["data"] == {"v": "3"} and "managedFields" not in got["metadata"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_relist_after_410_emits_tombstones_for_missed_deletes(
    client: Client, other_client: Client, namespace: str, faults: Faults
) -> None:
    async with start_informer(client, namespace, silence=30.0) as (informer, recorder):
        for i in range(6):
            await client.create(CONFIG_MAP, cm(f"o-{i}", namespace))
        await converged(informer, client, namespace)
        relists = informer.relists
        await freeze(faults)
        for i in range(3):  # deletes the informer does not see
            await other_client.delete(CONFIG_MAP, f"o-{i}", namespace)
        await other_client.patch(CONFIG_MAP, "o-5", namespace, {"data": {"v": "changed"}})
        await other_client.create(CONFIG_MAP, cm("new", namespace))
        await faults.set(freezeWatches=False, compact=True, dropWatches=True)  # history gone: 410 on re-watch
        await converged(informer, client, namespace)
        assert informer.relists > relists
        assert sorted(t.key for t in recorder.tombstones) == [f"{namespace}/o-{i}" for i in range(3)]
        assert all(t.obj["metadata"]["name"] for t in recorder.tombstones)
        assert recorder.by_key[f"{namespace}/o-5"][-1] == "update"
        assert recorder.by_key[f"{namespace}/new"] == ["add"]


async def test_forced_expired_watch_relists(
    running: tuple[Informer, Recorder], client: Client, namespace: str, faults: Faults
) -> None:
    informer, _ = running
    relists = informer.relists
    await faults.set(expireNextWatches=1, dropWatches=True)
    await client.create(CONFIG_MAP, cm("after", namespace))
    await converged(informer, client, namespace)
    await eventually(lambda: informer.relists > relists)


async def test_dropped_watch_rewatches_without_relist(
    running: tuple[Informer, Recorder], client: Client, namespace: str, faults: Faults
) -> None:
    informer, recorder = running
    await client.create(CONFIG_MAP, cm("a", namespace))
    await converged(informer, client, namespace)
    relists, watches = informer.relists, informer.watches
    await faults.set(dropWatches=True)
    await client.create(CONFIG_MAP, cm("b", namespace))
    await converged(informer, client, namespace)
    await eventually(lambda: informer.watches > watches)
    assert informer.relists == relists
    assert recorder.by_key[f"{namespace}/b"] == ["add"]


async def test_frozen_watch_is_detected_and_restarted(
    running: tuple[Informer, Recorder], client: Client, other_client: Client, namespace: str, faults: Faults
) -> None:
    informer, _ = running
    watches = informer.watches
    await freeze(faults)
    await other_client.create(CONFIG_MAP, cm("during-freeze", namespace))
    await eventually(lambda: informer.watches > watches, timeout=6)  # silence threshold is 2 s
    await faults.set(freezeWatches=False)
    await converged(informer, client, namespace)


async def test_409_storm_cache_converges(
    running: tuple[Informer, Recorder], client: Client, namespace: str, faults: Faults
) -> None:
    informer, _ = running
    for i in range(5):
        await client.create(CONFIG_MAP, cm(f"o-{i}", namespace))
    await faults.set(errors=[{"status": 409, "method": "PUT", "rate": 0.5}])

    async def bump(name: str) -> None:
        async def once() -> dict[str, Any]:
            cur = await client.get(CONFIG_MAP, name, namespace)
            cur["data"] = {"v": str(int(cur["data"]["v"]) + 1)}
            return await client.update(CONFIG_MAP, cur)

        for _ in range(3):
            await retry_on_conflict(once, steps=30)

    await asyncio.gather(*(bump(f"o-{i}") for i in range(5)))
    await faults.clear()
    await converged(informer, client, namespace)
    assert all(o["data"]["v"] == "3" for o in informer.store.list())


async def test_429_on_rewatch_backs_off_without_relist(
    running: tuple[Informer, Recorder], client: Client, namespace: str, faults: Faults
) -> None:
    informer, _ = running
    await asyncio.sleep(1.1)  # a watch closed within 1 s with no events would mean a relist
    relists, watches = informer.relists, informer.watches
    await faults.set(errors=[{"status": 429, "method": "GET", "path": "/configmaps$", "times": 2, "retryAfter": 1}],
                     dropWatches=True)
    await client.create(CONFIG_MAP, cm("throttled", namespace))
    await converged(informer, client, namespace)
    assert informer.relists == relists
    # at least one throttled re-watch, then one that worked (the test's own LISTs may take the other 429)
    assert informer.watches >= watches + 2


async def test_500s_on_list_and_watch_recover(
    running: tuple[Informer, Recorder], client: Client, namespace: str, faults: Faults
) -> None:
    informer, _ = running
    await faults.set(errors=[{"status": 500, "method": "GET", "path": "/configmaps$", "times": 6}],
                     expireNextWatches=1, dropWatches=True)
    for i in range(3):
        await client.create(CONFIG_MAP, cm(f"x-{i}", namespace))
    await converged(informer, client, namespace, timeout=20)


async def test_resync_redelivers_cached_objects_without_the_server(client: Client, namespace: str) -> None:
    await client.create(CONFIG_MAP, cm("r", namespace))
    informer = Informer(client, CONFIG_MAP, namespace=namespace, resync_period=0.3)
    recorder = Recorder()
    informer.add_event_handler(recorder)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(10)
        await eventually(lambda: recorder.by_key[f"{namespace}/r"].count("update") >= 2, timeout=5)
        rvs = {rv for t, k, rv in recorder.events if k == f"{namespace}/r"}
        assert len(rvs) == 1  # resync updates carry the same resourceVersion
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class CompactingClient(Client):
    """Writes one object and compacts the server's history right after the first LIST page, so
    the continue token of page 2 has expired (410)."""

    def __init__(self, apiserver: Any, writer: Client, namespace: str) -> None:
        super().__init__(config_for_url(api_url(apiserver)))
        self.apiserver, self.writer, self.namespace = apiserver, writer, namespace
        self.pages: list[tuple[int | None, bool]] = []

    async def list(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.pages.append((kwargs.get("limit"), bool(kwargs.get("continue_"))))
        page = await super().list(*args, **kwargs)
        if len(self.pages) == 1:
            await self.writer.create(CONFIG_MAP, cm("written-between-pages", self.namespace))
            self.apiserver.server.compact()
        return page


async def test_expired_continue_token_falls_back_to_a_full_list(apiserver: Any, client: Client, namespace: str) -> None:
    for i in range(5):
        await client.create(CONFIG_MAP, cm(f"p-{i}", namespace))
    paging = CompactingClient(apiserver, client, namespace)
    informer = Informer(paging, CONFIG_MAP, namespace=namespace, page_size=2)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(10)
        assert paging.pages[:3] == [(2, False), (2, True), (None, False)]  # page 1, expired page 2, full list
        assert cache_state(informer) == await server_state(client, namespace)
        assert len(informer.store) == 6
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await paging.close()


class PageWatchingClient(Client):
    """Records, before each LIST page request, how many objects the informer's store already
    holds and how many list items have come back so far."""

    def __init__(self, apiserver: Any) -> None:
        super().__init__(config_for_url(api_url(apiserver)))
        self.informer: Informer | None = None
        self.returned = 0
        self.before_each_page: list[tuple[int, int]] = []  # (store size, items returned so far)

    async def list(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        assert self.informer is not None
        self.before_each_page.append((len(self.informer.store), self.returned))
        page = await super().list(*args, **kwargs)
        self.returned += len(page.get("items") or [])
        return page


async def test_list_pages_are_stored_as_they_arrive_in_list_order(apiserver: Any, client: Client, namespace: str) -> None:
    names = [f"p-{i}" for i in range(7)]
    for name in names:
        await client.create(CONFIG_MAP, cm(name, namespace))
    paging = PageWatchingClient(apiserver)
    informer = Informer(paging, CONFIG_MAP, namespace=namespace, page_size=3)
    paging.informer = informer
    recorder = Recorder()
    informer.add_event_handler(recorder)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(10)
        # Each page was in the store (and its events delivered) before the next was asked for:
        # the informer never holds the whole list decoded.
        assert paging.before_each_page == [(0, 0), (3, 3), (6, 6)]
        assert [k for t, k, _ in recorder.events] == [f"{namespace}/{n}" for n in names]  # list order
        assert recorder.initial == 7
        assert cache_state(informer) == await server_state(client, namespace)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await paging.close()
