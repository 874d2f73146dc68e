"""``python bench/e2e_memprobe.py manager ARGS...``: ``banlieue manager`` with tracemalloc on, for
``bench/e2e.py --memprobe``. On SIGUSR1 it writes the allocations alive now, grouped by source
line (top 40), by file (top 25) and by call stack (top 25), with sizes in KiB, to
``$BENCH_MEMPROBE_OUT``.

``$BENCH_MEMPROBE_DEPTH`` (default 1): frames kept per allocation (more frames show who called
the allocating line; tracemalloc gets slower). ``$BENCH_MEMPROBE_GROW`` (a directory): also
write such a dump whenever the traced size grew by at least 15% + 20 MiB since the last one
(checked every 0.3 s), to catch the high-water mark during start-up, which the SIGUSR1 dump
after settling no longer shows. Each dump's first line gives seconds since start, RSS and the
traced size (current and peak, MiB).

``$BENCH_MEMPROBE_MODE=heap``: no tracemalloc (the process runs at full speed); SIGUSR1 writes
glibc's heap counters (``mallinfo2``: bytes in use and free in the main heap, bytes in mmap'd
blocks), CPython's object allocator statistics (``sys._debugmallocstats``: arenas allocated vs
bytes in live blocks, i.e. how much of the RSS is fragmentation), the garbage collector's counters
and the live objects it tracks by type (count, shallow KiB), top 40; with
``$BENCH_MEMPROBE_COLLECT`` set, then a full ``gc.collect()`` and the same figures after it (how
much was garbage held only by reference cycles); with ``$BENCH_MEMPROBE_SAVEALL`` set, the
collector keeps everything it finds in cycles from the start (memory grows: diagnosis only) and
the report lists it by type and, for frames and coroutines, by function;
``$BENCH_MEMPROBE_REFERRERS=<type name>``: the chain of referrers keeping one such object alive.
``$BENCH_MEMPROBE_TIMELINE`` (heap mode): every 0.25 s, RSS and ``sys.getallocatedblocks()`` (live
pymalloc blocks, cheap); at each new high-water mark of blocks (+5%) the innermost frames of every
thread, so the report says *when* and *doing what* the object allocator reached its peak (pymalloc
never returns an arena that still holds one live block, so the RSS keeps that peak's footprint).

tracemalloc slows the process down: figures from a probed run are not reported as timings.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STARTED = time.monotonic()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _report() -> str:
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"t={time.monotonic() - STARTED:.1f} s rss={_rss_mib():.1f} MiB traced {current / 2**20:.1f} MiB "
             f"(peak {peak / 2**20:.1f} MiB)", "-- by line"]
    lines += [f"{s.size / 1024:10.0f} KiB {s.count:8d} {s.traceback}" for s in snap.statistics("lineno")[:40]]
    lines.append("-- by file")
    lines += [f"{s.size / 1024:10.0f} KiB {s.count:8d} {s.traceback}" for s in snap.statistics("filename")[:25]]
    if tracemalloc.get_traceback_limit() > 1:
        lines.append("-- by call stack (innermost last)")
        for s in snap.statistics("traceback")[:25]:
            lines.append(f"{s.size / 1024:10.0f} KiB {s.count:8d}")
            lines += [f"        {line}" for line in s.traceback.format()]
    return "\n".join(lines) + "\n"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _pymalloc_stats() -> list[str]:
    with tempfile.TemporaryFile() as tmp:  # _debugmallocstats writes to the C-level stderr
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode(errors="replace").splitlines()


def _garbage_report() -> list[str]:
    """Types (and, for frames and coroutines, code names) of what the collector found in
    reference cycles since start (``$BENCH_MEMPROBE_SAVEALL``: gc.DEBUG_SAVEALL keeps it)."""
    gc.collect()
    kinds: dict[str, int] = {}
    for obj in gc.garbage:
        name = type(obj).__qualname__
        code = getattr(obj, "f_code", None) or getattr(obj, "cr_code", None)
        if code is not None:
            name += f" {code.co_qualname} ({Path(code.co_filename).name}:{code.co_firstlineno})"
        kinds[name] = kinds.get(name, 0) + 1
    lines = [f"-- in reference cycles since start: {len(gc.garbage)} objects (top 40 by count)"]
    lines += [f"{count:10d} {name}" for name, count in sorted(kinds.items(), key=lambda kv: -kv[1])[:40]]
    return lines


def _referrer_chain(type_name: str, depth: int = 6) -> list[str]:
    """What keeps one live object of type ``type_name`` alive: its referrers, their referrers...
    (first referrer that is not a frame or this probe's own list at each step)."""
    target = next((o for o in gc.get_objects() if type(o).__qualname__ == type_name), None)
    lines = [f"-- referrer chain of one {type_name}" + ("" if target is not None else ": none alive")]
    seen = {id(lines)}
    while target is not None and depth > 0:
        depth -= 1
        seen.add(id(target))
        referrers = [r for r in gc.get_referrers(target) if id(r) not in seen and type(r).__name__ != "frame"]
        for r in referrers[:4]:
            lines.append(f"    {'  ' * (6 - depth)}<- {type(r).__qualname__} {repr(r)[:160]}")
        target = referrers[0] if referrers else None
    return lines


def _heap_report() -> str:
    lines = [f"t={time.monotonic() - STARTED:.1f} s rss={_rss_mib():.1f} MiB"]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    mi = libc.mallinfo2()
    lines.append(f"glibc: main heap {mi.arena / 2**20:.1f} MiB (in use {mi.uordblks / 2**20:.1f}, free "
                 f"{mi.fordblks / 2**20:.1f}), mmap'd blocks {mi.hblkhd / 2**20:.1f} MiB in {mi.hblks}")
    stats = _pymalloc_stats()
    lines.append("-- pymalloc (sys._debugmallocstats, summary)")
    lines += [line for line in stats if line.startswith(("#", "Total")) or " bytes in " in line][-16:]
    lines.append(f"gc: counts {gc.get_count()}, per generation {gc.get_stats()}")
    sizes: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        entry = sizes.setdefault(type(obj).__qualname__, [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj)
    lines.append("-- gc-tracked objects by type (count, shallow KiB)")
    for name, (count, size) in sorted(sizes.items(), key=lambda kv: -kv[1][1])[:40]:
        lines.append(f"{size / 1024:10.0f} KiB {count:8d} {name}")
    del sizes
    wanted = os.environ.get("BENCH_MEMPROBE_REFERRERS")
    if wanted:
        lines += _referrer_chain(wanted)
    if gc.garbage:
        lines += _garbage_report()
    if os.environ.get("BENCH_MEMPROBE_COLLECT"):
        # Garbage held only by reference cycles waits for a full collection: how much was there?
        found = gc.collect()
        lines.append(f"-- after gc.collect() ({found} unreachable objects freed): rss={_rss_mib():.1f} MiB")
        lines += [line for line in _pymalloc_stats() if "allocated blocks" in line or "arenas allocated current" in line]
    return "\n".join(lines) + "\n"


_TIMELINE: list[str] = []


def _stacks(depth: int = 6) -> str:
    out = []
    for ident, frame in sys._current_frames().items():
        names = []
        f: FrameType | None = frame
        while f is not None and len(names) < depth:
            names.append(f"{Path(f.f_code.co_filename).name}:{f.f_code.co_name}:{f.f_lineno}")
            f = f.f_back
        thread = next((t.name for t in threading.enumerate() if t.ident == ident), str(ident))
        out.append(f"      [{thread}] " + " <- ".join(names))
    return "\n".join(out)


def _timeline() -> None:
    high = 0
    last_line = 0.0
    while True:
        time.sleep(0.25)
        blocks = sys.getallocatedblocks()
        now = time.monotonic() - STARTED
        if blocks > high * 1.05:
            high = blocks
            _TIMELINE.append(f"{now:7.1f} s rss {_rss_mib():6.1f} MiB blocks {blocks:9d} (new high)\n{_stacks()}")
        elif now - last_line >= 2.0:
            _TIMELINE.append(f"{now:7.1f} s rss {_rss_mib():6.1f} MiB blocks {blocks:9d}")
        else:
            continue
        last_line = now


def _dump(signum: int, frame: FrameType | None) -> None:
    heap = os.environ.get("BENCH_MEMPROBE_MODE") == "heap"
    report = _heap_report() if heap else _report()
    if _TIMELINE:
        report += "-- timeline (pymalloc blocks; stacks at each new high)\n" + "\n".join(_TIMELINE) + "\n"
    Path(os.environ.get("BENCH_MEMPROBE_OUT", "memprobe.txt")).write_text(report)


def _watch_growth(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    last = 0
    while True:
        time.sleep(0.3)
        if tracemalloc.get_traced_memory()[0] > last * 1.15 + 20 * 2**20:
            (directory / f"grow-{time.monotonic() - STARTED:07.1f}s.txt").write_text(_report())
            last = tracemalloc.get_traced_memory()[0]


def main() -> int:
    signal.signal(signal.SIGUSR1, _dump)
    if os.environ.get("BENCH_MEMPROBE_SAVEALL"):
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what cycles the collector finds, for _garbage_report
    if os.environ.get("BENCH_MEMPROBE_MODE") != "heap":
        tracemalloc.start(int(os.environ.get("BENCH_MEMPROBE_DEPTH", "1")))
    elif os.environ.get("BENCH_MEMPROBE_TIMELINE"):
        threading.Thread(target=_timeline, daemon=True, name="memprobe-timeline").start()
    grow = os.environ.get("BENCH_MEMPROBE_GROW") if tracemalloc.is_tracing() else None
    if grow:
        threading.Thread(target=_watch_growth, args=(Path(grow),), daemon=True, name="memprobe").start()
    from banlieue.cli import main as cli_main

    sys.argv = ["banlieue", *sys.argv[1:]]
    return int(cli_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
