"""Runtime benchmarks; results go to ``bench/results/runtime.json`` (a list keyed by ``name``).

    .venv/bin/python bench/runtime.py cache_memory [--objects 10000]
    .venv/bin/python bench/runtime.py trivial_reconcile|raw_ceiling|event_latency ...

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench", choices=["cache_memory"])
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    if args.bench == "cache_memory":
        cache_memory(args.objects)


if __name__ == "__main__":
    main()
