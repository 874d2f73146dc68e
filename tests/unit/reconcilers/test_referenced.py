"""ReferencedObjects (reconcilers.referenced): direct GETs of referenced Secrets, how many."""

from __future__ import annotations

import asyncio
from typing import Any

from banlieue.reconcilers.referenced import ReferencedObjects
from banlieue.runtime.errors import NotFound
from banlieue.runtime.kinds import SECRET, ResourceKind


class SlowClient:
    """``get`` answers after ``delay`` seconds with resourceVersion = the GETs answered so far."""

    def __init__(self, delay: float = 0.05, missing: bool = False) -> None:
        self.delay, self.missing, self.calls = delay, missing, 0

    async def get(self, kind: ResourceKind, name: str, namespace: str | None) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.missing:
            raise NotFound(404, "NotFound", f"{name} not found")
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.calls)}}


async def test_concurrent_fetches_of_one_object_send_one_get() -> None:
    """Issue 22: a Cluster status change reconciles every machine of the Cluster at once; each
    fetched the same bootstrap and credentials Secrets (20 GETs for 10 workers at 15 machines,
    growing with the machines). Fetches of one object while its GET is in flight share it."""
    store, client = ReferencedObjects(), SlowClient()
    got = await asyncio.gather(*(store.fetch(client, SECRET, "creds", "ns") for _ in range(10)))  # type: ignore[arg-type]
    assert client.calls == 1 and store.gets == 1
    assert all(g is not None and g["metadata"]["resourceVersion"] == "1" for g in got)
    # Another name is its own GET; a fresh copy is served from the store; max_age 0 always reads.
    await asyncio.gather(store.fetch(client, SECRET, "creds", "ns"), store.fetch(client, SECRET, "boot", "ns"))  # type: ignore[arg-type]
    assert client.calls == 2
    await asyncio.gather(*(store.fetch(client, SECRET, "creds", "ns", max_age=0) for _ in range(2)))  # type: ignore[arg-type]
    assert client.calls == 4


async def test_a_shared_get_that_finds_nothing_answers_every_caller() -> None:
    store, client = ReferencedObjects(), SlowClient(missing=True)
    got = await asyncio.gather(*(store.fetch(client, SECRET, "gone", "ns") for _ in range(3)))  # type: ignore[arg-type]
    assert got == [None, None, None] and client.calls == 1


async def test_a_settled_object_is_served_from_the_store_and_left_out_of_the_resync() -> None:
    """Issue 22: a provisioned machine's bootstrap data Secret (one per Machine with CAPI's kubeadm
    bootstrap) was re-read by every resync (2 GETs per machine per minute, idle); fetched
    ``settled`` it is read once, then served from the store whatever its age, and the resync
    skips it until a fetch not settled asks for it again."""
    now = [0.0]
    store, client = ReferencedObjects(clock=lambda: now[0]), SlowClient(delay=0)
    await store.fetch(client, SECRET, "boot", "ns", settled=True)  # type: ignore[arg-type]
    await store.fetch(client, SECRET, "creds", "ns")  # type: ignore[arg-type]
    assert client.calls == 2
    now[0] = 100.0  # both older than MAX_AGE_SECONDS
    assert (await store.fetch(client, SECRET, "boot", "ns", settled=True)) is not None  # type: ignore[arg-type]
    assert client.calls == 2
    await store.resync(client)  # type: ignore[arg-type]
    assert client.calls == 3, "only the Secret not settled is re-read"
    await store.fetch(client, SECRET, "boot", "ns")  # type: ignore[arg-type]  # an unprovisioned machine
    await store.resync(client)  # type: ignore[arg-type]
    assert client.calls == 6


async def test_reread_soon_reads_at_once_then_once_per_spacing_after_the_last_call(monkeypatch: Any) -> None:
    """Issue 22: a refused login re-reads the credentials Secret whatever its age (so the resync
    can be minutes long); a burst of refusals (one per worker) costs one GET now and, when some
    came after it started, one more after ``REREAD_SPACING_SECONDS``; a change is published."""
    from banlieue.reconcilers import referenced as module

    monkeypatch.setattr(module, "REREAD_SPACING_SECONDS", 0.2)
    store, client = ReferencedObjects(), SlowClient(delay=0.05)
    await store.fetch(client, SECRET, "creds", "ns")  # type: ignore[arg-type]  # fresh: max_age not reached
    published: list[dict[str, Any]] = []
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    store._subscribers.append(queue)
    for _ in range(5):
        store.reread_soon(client, SECRET, "creds", "ns")  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    assert client.calls == 2, "one GET for the burst, at once, though the copy was fresh"
    store.reread_soon(client, SECRET, "creds", "ns")  # type: ignore[arg-type]  # during the spacing
    await asyncio.sleep(0.1)
    assert client.calls == 2, "the next one waits for the spacing"
    await asyncio.sleep(0.3)
    assert client.calls == 3, "then the call made meanwhile gets a GET that started after it"
    await asyncio.sleep(0.4)
    assert client.calls == 3 and not store._rereads, "nothing more was asked: no more GETs"
    while not queue.empty():
        published.append(queue.get_nowait())
    assert [p["metadata"]["resourceVersion"] for p in published] == ["2", "3"]
