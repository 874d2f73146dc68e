"""``python bench/e2e_memprobe.py manager ARGS...``: ``banlieue manager`` with tracemalloc on, for
``bench/e2e.py --memprobe``. On SIGUSR1 it writes the allocations alive now, grouped by source
line (top 40) and by file (top 25), with sizes in KiB, to ``$BENCH_MEMPROBE_OUT``.

tracemalloc slows the process down: figures from a probed run are not reported as timings.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _dump(signum: int, frame: FrameType | None) -> None:
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    lines = [f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB", "-- by line"]
    lines += [f"{s.size / 1024:10.0f} KiB {s.count:8d} {s.traceback}" for s in snap.statistics("lineno")[:40]]
    lines.append("-- by file")
    lines += [f"{s.size / 1024:10.0f} KiB {s.count:8d} {s.traceback}" for s in snap.statistics("filename")[:25]]
    Path(os.environ.get("BENCH_MEMPROBE_OUT", "memprobe.txt")).write_text("\n".join(lines) + "\n")


def main() -> int:
    tracemalloc.start(1)
    signal.signal(signal.SIGUSR1, _dump)
    from banlieue.cli import main as cli_main

    sys.argv = ["banlieue", *sys.argv[1:]]
    return int(cli_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
