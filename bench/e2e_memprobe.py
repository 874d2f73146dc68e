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

tracemalloc slows the process down: figures from a probed run are not reported as timings.
"""

from __future__ import annotations

import os
import signal
import sys
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


def _dump(signum: int, frame: FrameType | None) -> None:
    Path(os.environ.get("BENCH_MEMPROBE_OUT", "memprobe.txt")).write_text(_report())


def _watch_growth(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    last = 0
    while True:
        time.sleep(0.3)
        if tracemalloc.get_traced_memory()[0] > last * 1.15 + 20 * 2**20:
            (directory / f"grow-{time.monotonic() - STARTED:07.1f}s.txt").write_text(_report())
            last = tracemalloc.get_traced_memory()[0]


def main() -> int:
    tracemalloc.start(int(os.environ.get("BENCH_MEMPROBE_DEPTH", "1")))
    signal.signal(signal.SIGUSR1, _dump)
    grow = os.environ.get("BENCH_MEMPROBE_GROW")
    if grow:
        threading.Thread(target=_watch_growth, args=(Path(grow),), daemon=True, name="memprobe").start()
    from banlieue.cli import main as cli_main

    sys.argv = ["banlieue", *sys.argv[1:]]
    return int(cli_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
