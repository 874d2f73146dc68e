"""Runtime benchmarks; results go to ``bench/results/runtime.json`` (a list keyed by ``name``).

    .venv/bin/python bench/runtime.py cache_memory [--objects 10000]
    .venv/bin/python bench/runtime.py trivial_reconcile|raw_ceiling [--objects 1000] [--concurrency 16]
    .venv/bin/python bench/runtime.py event_latency [--samples 300]

Entries: ``{name, value, unit, comparison, comparison_label}``; other benchmarks (the
workqueue's) write to the same file, so this script read-modify-writes it by name.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "runtime.json"


def record(name: str, value: float, unit: str, comparison: float | None, comparison_label: str, **extra: Any) -> None:
    """Insert or replace entry ``name`` in bench/results/runtime.json and print it."""
    entries: list[dict[str, Any]] = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    entry = {"name": name, "value": round(value, 4), "unit": unit,
             "comparison": None if comparison is None else round(comparison, 4), "comparison_label": comparison_label, **extra}
    entries = [e for e in entries if e.get("name") != name] + [entry]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(entries, indent=2) + "\n")
    print(json.dumps(entry))


def _child(mode: str, n: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE / "runtime_memory.py"), mode, str(n)],
                         check=True, capture_output=True, text=True, timeout=600)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def cache_memory(n: int) -> None:
    """RSS growth per cached ~2.4 KB VirtualMachine (floor <= 4 KiB) and read cost, each in a
    fresh process, against plain json.loads dicts read with deepcopy."""
    ours, plain = _child("indexer", n), _child("dicts", n)
    record("cache_memory", ours["rss_per_object_kib"], "KiB/object", plain["rss_per_object_kib"],
           f"plain json.loads dicts ({n} objects)", floor="<= 4 KiB", objects=n)
    record("cache_get", ours["get_us"], "us/get", plain["get_us"], "dict store + copy.deepcopy on read")
    record("cache_list_all", ours["list_all_plus_index_ms"], f"ms/list of {n} + by_index",
           plain["list_all_plus_index_ms"], "dict store + copy.deepcopy on read")


def _median_runs(impl: str, n: int, concurrency: int, runs: int) -> tuple[float, float]:
    """Median wall seconds and median operator CPU seconds over ``runs`` fresh runs."""
    import asyncio
    import statistics

    from runtime_reconcile import throughput

    results = [asyncio.run(throughput(impl, n, concurrency)) for _ in range(runs)]
    print(f"{impl}: wall/cpu per run {[(round(w, 3), round(c, 3)) for w, c in results]}", file=sys.stderr)
    return statistics.median(w for w, _ in results), statistics.median(c for _, c in results)


def trivial_reconcile(n: int, concurrency: int, runs: int) -> None:
    """banlieue vs kopf on the same work and server; floor: banlieue >= 3x faster.

    Wall time includes the API double (a Python process on the same cores) creating and
    patching the objects, which both operators share; operator CPU seconds isolate the runtime."""
    ours, ours_cpu = _median_runs("banlieue", n, concurrency, runs)
    kopf, kopf_cpu = _median_runs("kopf", n, concurrency, runs)
    record("trivial_reconcile", ours, f"s wall for {n} objects", kopf, "kopf (same work, same API double)",
           ratio=round(kopf / ours, 2), floor="banlieue >= 3x faster than kopf", concurrency=concurrency, runs=runs)
    record("trivial_reconcile_cpu", ours_cpu, f"operator CPU s for {n} objects", kopf_cpu,
           "kopf operator CPU s (same work)", ratio=round(kopf_cpu / ours_cpu, 2), runs=runs)


def raw_ceiling(n: int, concurrency: int, runs: int) -> None:
    """banlieue vs a bare kubernetes-asyncio watch + status-patch loop; floor: within 1.5x."""
    ours, ours_cpu = _median_runs("banlieue", n, concurrency, runs)
    raw, raw_cpu = _median_runs("raw", n, concurrency, runs)
    record("raw_ceiling", ours, f"s wall for {n} objects", raw, "bare kubernetes-asyncio loop, same concurrency",
           ratio=round(ours / raw, 2), floor="banlieue <= 1.5x the raw loop", concurrency=concurrency, runs=runs)
    record("raw_ceiling_cpu", ours_cpu, f"operator CPU s for {n} objects", raw_cpu,
           "bare kubernetes-asyncio loop CPU s", ratio=round(ours_cpu / raw_cpu, 2), runs=runs)


def event_latency(samples: int) -> None:
    """Server write -> reconcile start with an idle controller; floor p99 < 20 ms."""
    import asyncio

    from runtime_reconcile import event_latency as measure
    from runtime_reconcile import percentile

    latencies = asyncio.run(measure(samples))
    ms = [x * 1e3 for x in latencies]
    record("event_latency_p50", percentile(ms, 50), "ms", 20.0, "floor applies to p99 (< 20 ms)", samples=samples)
    record("event_latency_p99", percentile(ms, 99), "ms", 20.0, "floor: p99 < 20 ms", samples=samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", choices=["cache_memory", "trivial_reconcile", "raw_ceiling", "event_latency", "all"])
    parser.add_argument("--objects", type=int, default=None, help="cache_memory: 10000; reconcile benches: 1000")
    parser.add_argument("--concurrency", type=int, default=16, help="workers / concurrent status writes")
    parser.add_argument("--samples", type=int, default=300, help="event_latency samples")
    parser.add_argument("--runs", type=int, default=3, help="reconcile benches: runs per variant (median)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.bench in ("cache_memory", "all"):
        cache_memory(args.objects or 10_000)
    if args.bench in ("trivial_reconcile", "all"):
        trivial_reconcile(args.objects or 1000, args.concurrency, args.runs)
    if args.bench in ("raw_ceiling", "all"):
        raw_ceiling(args.objects or 1000, args.concurrency, args.runs)
    if args.bench in ("event_latency", "all"):
        event_latency(args.samples)


if __name__ == "__main__":
    main()
