"""Child process of ``bench/runtime.py cache_memory``: RSS growth per cached object and read cost.

``python bench/runtime_memory.py indexer|dicts N`` prints one JSON line. ``indexer`` is
banlieue's Indexer (compact JSON bytes, decode on read); ``dicts`` keeps plain ``json.loads``
dicts (what a naive cache or kopf-style memo would hold) and reads with ``copy.deepcopy``
(controller-runtime's read semantics), for comparison.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_objects import virtual_machine

from banlieue.runtime.cache import OWNER_UID_INDEX, Indexer, meta_namespace_key, strip_managed_fields


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def wire(i: int) -> bytes:
    # What arrives from the API server: JSON text, decoded per object as the informer does.
    return json.dumps(virtual_machine(i)).encode()


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    gc.collect()
    before = rss_bytes()
    if mode == "indexer":
        store: Any = Indexer()
        for i in range(n):
            store.put(strip_managed_fields(json.loads(wire(i))))
    else:
        store = {}
        for i in range(n):
            obj = strip_managed_fields(json.loads(wire(i)))
            store[meta_namespace_key(obj)] = obj
    gc.collect()
    after = rss_bytes()
    keys = [f"team-a/vm-{i:05d}" for i in range(0, n, max(1, n // 2000))]
    t0 = time.perf_counter()
    reps = 5
    for _ in range(reps):
        for k in keys:
            obj = store.get(k) if mode == "indexer" else copy.deepcopy(store[k])
            assert obj["metadata"]["name"]
    get_us = (time.perf_counter() - t0) / (reps * len(keys)) * 1e6
    t0 = time.perf_counter()
    if mode == "indexer":
        listed = store.list()
        by_owner = store.by_index(OWNER_UID_INDEX, listed[0]["metadata"]["ownerReferences"][0]["uid"])
    else:
        listed = [copy.deepcopy(o) for o in store.values()]
        uid = listed[0]["metadata"]["ownerReferences"][0]["uid"]
        by_owner = [copy.deepcopy(o) for o in store.values() if o["metadata"]["ownerReferences"][0]["uid"] == uid]
    list_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({
        "mode": mode, "objects": n, "rss_per_object_kib": (after - before) / n / 1024, "get_us": get_us,
        "list_all_plus_index_ms": list_ms, "by_index_hits": len(by_owner),
    }))


if __name__ == "__main__":
    main()
