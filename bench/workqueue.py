"""Benchmark: WorkQueue add/get/done cycles per second on one core (floor 200,000/s).

One cycle = ``add(key)`` + ``await get()`` + ``done(key)`` of a ``Request`` key, the controller's
hot path without the reconcile. Keys go through the queue in batches of 1,000 distinct keys, so
the queue has depth (as under a resync) and every add is a real insert, not a collapsed duplicate.
The figure is the best of several rounds (least disturbed by other processes).

Also printed, not recorded: the same cycle on a named queue (metrics on) and on the controller's
RateLimitingQueue, for comparison.

Writes ``{"name": "workqueue_ops", ...}`` into ``bench/results/runtime.json`` (a list of entries
keyed by name, shared with other runtime benchmarks: read-modify-write). Run:
``.venv/bin/python bench/workqueue.py [--cycles N] [--rounds R] [--no-write]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from banlieue.runtime.queue import WorkQueue
from banlieue.runtime.rate_limiters import default_controller_rate_limiter
from banlieue.runtime.rate_limiting_queue import RateLimitingQueue
from banlieue.runtime.reconcile import Request

FLOOR = 200_000
BATCH = 1_000
RESULTS = Path(__file__).resolve().parent / "results" / "runtime.json"


async def cycles_per_second(queue: WorkQueue[Request], cycles: int) -> float:
    keys = [Request("default", f"vm-{i:05d}") for i in range(BATCH)]
    add, get, done = queue.add, queue.get, queue.done
    rounds = max(1, cycles // BATCH)
    start = time.perf_counter()
    for _ in range(rounds):
        for key in keys:
            add(key)
        for _ in range(BATCH):
            done(await get())
    elapsed = time.perf_counter() - start
    return rounds * BATCH / elapsed


async def best_of(make: Any, cycles: int, rounds: int) -> float:
    best = 0.0
    for _ in range(rounds):
        queue = make()
        best = max(best, await cycles_per_second(queue, cycles))
        await queue.aclose()
    return best


def merge_result(entry: dict[str, Any], path: Path = RESULTS) -> None:
    """Replace (or append) the entry with the same ``name`` in the JSON list at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    if path.exists():
        loaded = json.loads(path.read_text() or "[]")
        entries = loaded if isinstance(loaded, list) else []
    entries = [e for e in entries if e.get("name") != entry["name"]]
    entries.append(entry)
    entries.sort(key=lambda e: str(e.get("name")))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n")
    os.replace(tmp, path)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300_000, help="cycles per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):  # one core, as the floor is stated
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    plain = await best_of(WorkQueue, args.cycles, args.rounds)
    named = await best_of(lambda: WorkQueue("bench-named"), args.cycles // 3, args.rounds)
    limited = await best_of(
        lambda: RateLimitingQueue(default_controller_rate_limiter()), args.cycles, args.rounds
    )
    verdict = "meets" if plain >= FLOOR else "BELOW"
    print(f"workqueue_ops: {plain:,.0f} add/get/done cycles/s (floor {FLOOR:,}: {verdict})")
    print(f"  named queue (metrics on): {named:,.0f} cycles/s")
    print(f"  RateLimitingQueue (unnamed): {limited:,.0f} cycles/s")
    if not args.no_write:
        merge_result(
            {
                "name": "workqueue_ops",
                "value": round(plain),
                "unit": "ops/s",
                "comparison": FLOOR,
                "comparison_label": "floor",
            }
        )
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())
