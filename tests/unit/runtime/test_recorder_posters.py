"""The event recorder posts with several loops (``recorder.POSTERS``): a burst of Events on a
slow API server is posted instead of overflowing the queue, and one object's Events keep their
order. A client whose create takes ``LATENCY`` seconds stands in for a loaded API server."""

from __future__ import annotations

import asyncio
from typing import Any

from banlieue.runtime.recorder import EventRecorder

LATENCY = 0.05


class SlowClient:
    """``create`` takes LATENCY s and records (reason, involved object name) in order."""

    def __init__(self) -> None:
        self.created: list[tuple[str, str]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def create(self, kind: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(LATENCY)
        finally:
            self.in_flight -= 1
        self.created.append((body["reason"], body["involvedObject"]["name"]))
        return body

    async def patch(self, *args: Any) -> dict[str, Any]:
        raise AssertionError("no repeats in these tests")


def machine(name: str) -> dict[str, Any]:
    return {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereMachine",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}}


async def burst(recorder: EventRecorder, objects: int, pause: float) -> None:
    """Deleting then Deleted for each of ``objects`` machines, 5 machines (10 Events) every
    ``pause`` s (in chunks: a loaded machine stretches few sleeps less than many)."""
    for i in range(objects):
        for reason in ("Deleting", "Deleted"):
            recorder.event(machine(f"m{i}"), "Normal", reason, reason.lower())
        if i % 5 == 4:
            await asyncio.sleep(pause)


async def run(posters: int) -> tuple[EventRecorder, SlowClient]:
    client = SlowClient()
    recorder = EventRecorder(client, "banlieue.io/test", instance="t", queue_size=60, posters=posters)  # type: ignore[arg-type]
    task = asyncio.create_task(recorder.start())
    try:
        # 100 Events in about 0.5 s: 200 a second. One loop posts 20 a second, eight 160.
        await burst(recorder, 50, 0.05)
        await recorder.flush(timeout=10)
    finally:
        task.cancel()
    return recorder, client


async def test_one_loop_drops_a_burst_that_several_post() -> None:
    one, _ = await run(posters=1)
    assert one.dropped > 0, "the single loop kept up: the burst proves nothing"
    several, client = await run(posters=8)
    assert (several.posted, several.dropped) == (100, 0)
    assert client.most_in_flight > 1


async def test_one_objects_events_keep_their_order() -> None:
    _, client = await run(posters=8)
    for i in range(50):
        mine = [reason for reason, name in client.created if name == f"m{i}"]
        assert mine == ["Deleting", "Deleted"], (i, mine)
