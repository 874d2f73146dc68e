"""End-to-end performance and scale of ``banlieue manager`` on this machine; results go to
``bench/results/e2e.json`` and a table in ``docs/performance.md``.

    .venv/bin/python bench/e2e.py [--quick] [--only NAME,...] [--vms 1000] [--steady-seconds 60]

Every process is real and separate: the API-server double (``python -m
banlieue.testing.apiserver``), one vcsim per Provider (``bin/vcsim``), ``banlieue manager
--leader-elect --log-level warning`` with a kubeconfig, and this script as the client (aiohttp).
Figures (entries ``{name, value, unit, comparison, comparison_label, ...}``):

- ``vm_ready_throughput``: N VirtualMachines created at once; VMs Ready per second (first create
  to last Ready); comparison: the write ceiling, i.e. the same number and kind of writes banlieue
  issued in that run (from the double's request log) replayed against the same double by a bare
  concurrent aiohttp client (``bench/e2e_ceiling.py``), expressed as VMs/s.
- ``writes_per_vm``: API writes per VM from create to Ready, by resource and verb; comparison:
  the contract's minimum; ``noop_writes`` = writes that changed nothing (writes minus watch
  events on VirtualMachines and VSphereMachines: every real change yields one event).
- ``steady_state_api_requests`` / ``steady_state_soap_requests``: per minute with N Ready VMs.
- ``manager_memory_<n>`` / ``cold_start_<n>``: RSS and start-to-/readyz with n VirtualMachines
  and their VSphereMachines created directly in the double (``bench/e2e_bulk.py``).
- ``vcenter_isolation``: Ready throughput on a healthy vCenter with and without a slow one.

``--quick``: 100 VMs, scaling at 100 and 1,000 objects, 20 s steady state.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


import e2e_run  # noqa: E402

RESULTS = HERE / "results" / "e2e.json"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100 VMs, scaling up to 1,000 objects, short steady state")
    p.add_argument("--vms", type=int, default=None)
    p.add_argument("--only", default="", help="comma list of figure groups: throughput,steady,memory,isolation")
    p.add_argument("--steady-seconds", type=float, default=None)
    p.add_argument("--scales", type=lambda v: [int(x) for x in v.split(",")], default=None,
                   help="comma list of object counts for memory/cold start (default 100,1000,10000)")
    p.add_argument("--profile", type=Path, default=None,
                   help="directory for py-spy collapsed stacks of the manager and the API double (throughput run)")
    p.add_argument("--profile-gil", action="store_true",
                   help="with --profile: sample only the thread holding the GIL (CPU, not wall time)")
    p.add_argument("--manager-arg", action="append", default=[],
                   help="extra banlieue manager flag (repeatable), e.g. --manager-arg=--max-concurrent-reconciles=32")
    p.add_argument("--memprobe", action="store_true",
                   help="memory figures: run the manager under tracemalloc and dump its top allocations (slower)")
    p.add_argument("--guests", choices=("vcsim", "event", "poll"), default="vcsim",
                   help="guest IP stand-in: vcsim --guest-ip (default), a PropertyCollector client (event) or make dev's 0.5 s polling GuestNetwork (poll)")
    p.add_argument("--stock-collector", action="store_true",
                   help="run vcsim's own PropertyCollector (one full collection per changed object) instead of --batch-collector")
    p.add_argument("--vcsim-hosts", type=int, default=None,
                   help="hosts per cluster in each vcsim (default 4: 96 GiB per vCenter, enough for 1,000 bench VMs; "
                        "10,000 VMs of 16 MiB need 8)")
    p.add_argument("--isolation-vms", type=int, default=None, help="VMs per vCenter in vcenter_isolation")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    # SIGTERM (timeout, pkill) unwinds like Ctrl-C, so every process the run started (API double,
    # vcsims, manager) is stopped by its context manager instead of outliving the script.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import e2e_env
    e2e_env.MANAGER_ARGS.extend(args.manager_arg)
    e2e_run.PROFILE_GIL = args.profile_gil
    e2e_env.MEMPROBE = args.memprobe
    e2e_env.GUESTS = args.guests
    if args.vcsim_hosts:
        e2e_env.VCSIM_OPTS["host"] = args.vcsim_hosts
    if args.stock_collector:
        e2e_env.VCSIM_OPTS["batch_collector"] = False
    n = args.vms or (100 if args.quick else 1000)
    e2e_env.REQUEST_LOG_SIZE = max(e2e_env.REQUEST_LOG_SIZE, 40 * n)  # ~11 requests per VM, with room
    only = set(filter(None, args.only.split(",")))
    entries: list[dict[str, Any]] = json.loads(args.out.read_text()) if args.out.exists() else []
    work = Path(tempfile.mkdtemp(prefix="banlieue-e2e-"))
    print(f"work dir {work}", file=sys.stderr)
    try:
        run_groups(args, only, n, work, entries)
    finally:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(entries, indent=2) + "\n")
        if args.out == RESULTS:
            write_table(entries)
    return 0


def run_groups(args: argparse.Namespace, only: set[str], n: int, work: Path, entries: list[dict[str, Any]]) -> None:
    """Run the selected figure groups, appending to ``entries``."""
    if not only or "throughput" in only or "steady" in only:
        e2e_run.throughput_and_steady(work, n, entries, args.steady_seconds or (20.0 if args.quick else 60.0),
                                      steady="steady" in only or not only, profile=args.profile)
    if not only or "isolation" in only:
        e2e_run.vcenter_isolation(work, args.isolation_vms or (50 if args.quick else 100), entries)
    if not only or "memory" in only:
        import e2e_bulk
        for size in args.scales or ([100, 1000] if args.quick else [100, 1000, 10000]):
            e2e_bulk.scale_point(work, size, entries, e2e_run.record)


DOC = HERE.parent / "docs" / "performance.md"
BEGIN, END = "<!-- e2e-table:begin -->", "<!-- e2e-table:end -->"


def write_table(entries: list[dict[str, Any]]) -> None:
    """Replace the table between the markers in docs/performance.md with ``entries``."""
    rows = ["| figure | value | unit | comparison | compared with |", "|---|---|---|---|---|"]
    for e in entries:
        comp = "" if e.get("comparison") is None else f"{e['comparison']:g}"
        rows.append(f"| `{e['name']}` | {e['value']:g} | {e['unit']} | {comp} | {e['comparison_label']} |")
    table = "\n".join(rows)
    text = DOC.read_text() if DOC.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
