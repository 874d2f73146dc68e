"""End-to-end performance and scale of ``banlieue manager`` on this machine; results go to
``bench/results/e2e.json`` and a table in ``docs/performance.md``.

    .venv/bin/python bench/e2e.py [--quick] [--only NAME,...] [--vms 1000] [--steady-seconds 60]
                                  [--apiserver double|real]

Every process is real and separate: the API server, one vcsim per Provider (``bin/vcsim``),
``banlieue manager --leader-elect --log-level warning`` with a kubeconfig, and this script as the
client (aiohttp). ``--apiserver double`` (default): the in-repo API-server double (``python -m
banlieue.testing.apiserver``), requests counted from its request log. ``--apiserver real``:
envtest's kube-apiserver and etcd (``make envtest``), banlieue installed from config/default and
its manager running as its ServiceAccount, requests counted from the audit log; groups
``throughput``, ``steady`` and ``isolation`` (``memory`` is refused: ``bench/e2e_bulk.py`` writes
its n objects through the double's plain-HTTP URL), figures named ``<figure>_real_<N>``
(``vcenter_isolation_real``) beside the double's (bench/e2e_env.py).
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

Bad flags exit 2 (argparse usage + one ``error:`` line) before anything starts. SIGINT (Ctrl-C)
and SIGTERM stop the run: every process it started is stopped, the figures measured so far are
written to ``--out`` (which is left as it was when none was), and one line says so; exit 130
(SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


import e2e_run  # noqa: E402

from banlieue.testing.argtypes import at_least_one, integer, positive_seconds  # noqa: E402

RESULTS = HERE / "results" / "e2e.json"
PROG = "bench/e2e.py"
GROUPS = ("throughput", "steady", "memory", "isolation")
APISERVERS = ("double", "real")  # e2e_env.APISERVERS (not imported before the flags are parsed)
UNSUPPORTED_GROUPS = {"real": {"memory"}}
"""Groups an API server does not run (default --only leaves them out; naming one is an error)."""
# Flag validators: banlieue.testing.argtypes, plus the two below (messages name the problem).


def scale_list(text: str) -> list[int]:
    """Comma list of object counts, each even and >= 2: ``e2e_bulk.scale_point`` splits a count
    between two vCenters (n // 2 model VMs each), so an odd count would measure one VM less than
    asked and a count below 2 none at all."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError(
            "must be a comma list of object counts, e.g. 100,1000; got an empty value")
    scales = []
    for item in items:
        value = integer(item, "a comma list of integers (object counts)")
        if value < 2 or value % 2:
            raise argparse.ArgumentTypeError(
                f"each scale must be an even number >= 2 (split between two vCenters), got {value}")
        scales.append(value)
    return scales


def group_list(text: str) -> set[str]:
    """Comma list of figure groups, each one of GROUPS."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"must be a comma list of {', '.join(GROUPS)}; got an empty name in {text!r}")
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown group {unknown[0]!r}: must be one of {', '.join(GROUPS)}")
    return set(names)


class Interrupted(SystemExit):
    """SIGINT or SIGTERM arrived; ``code`` is 128 + the signal number (130, 143)."""


def _interrupt(signum: int, _frame: object) -> None:
    # Raised in the main thread wherever it is, so every `with` block (API double, vcsims,
    # manager) unwinds and stops its process. Tasks that asyncio.run cancels and aiohttp sessions
    # torn down mid-request can report through the "asyncio" logger ("Task exception was never
    # retrieved", "Unclosed client session"); the run is over and main's one line says why.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Parse flags (SystemExit(2) on a bad one) and run; returns 0, or 130/143 when interrupted."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100 VMs, scaling up to 1,000 objects, short steady state")
    p.add_argument("--vms", type=at_least_one, default=None,
                   help="VMs in the throughput run (default 1000; --quick 100)")
    p.add_argument("--only", type=group_list, default=None,
                   help=f"comma list of figure groups: {','.join(GROUPS)} (default: all; --apiserver real: all but memory)")
    p.add_argument("--steady-seconds", type=positive_seconds, default=None,
                   help="seconds of steady state (default 60; --quick 20)")
    p.add_argument("--scales", type=scale_list, default=None,
                   help="comma list of object counts for memory/cold start, each even and >= 2 "
                        "(default 100,1000,10000; --quick 100,1000)")
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
    p.add_argument("--vcsim-hosts", type=at_least_one, default=None,
                   help="hosts per cluster in each vcsim (default 4: 96 GiB per vCenter, enough for 1,000 bench VMs; "
                        "10,000 VMs of 16 MiB need 8)")
    p.add_argument("--isolation-vms", type=at_least_one, default=None,
                   help="VMs per vCenter in vcenter_isolation (default 100; --quick 50)")
    p.add_argument("--apiserver", choices=APISERVERS, default="double",
                   help="API server: the in-repo double (default) or envtest's kube-apiserver (real; make envtest)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.apiserver == "real" and args.only is not None and "memory" in args.only:
        p.error("--apiserver real: group 'memory' runs on the double only (bench/e2e_bulk.py writes through its URL)")
    # SIGINT is set explicitly: a shell starting the script in the background (`&`) hands it
    # SIGINT ignored, and Python then keeps it ignored. Both signals unwind the same way.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    import e2e_env
    e2e_env.MANAGER_ARGS.extend(args.manager_arg)
    e2e_env.APISERVER = args.apiserver
    e2e_run.PROFILE_GIL = args.profile_gil
    e2e_env.MEMPROBE = args.memprobe
    e2e_env.GUESTS = args.guests
    if args.vcsim_hosts is not None:
        e2e_env.VCSIM_OPTS["host"] = args.vcsim_hosts
    if args.stock_collector:
        e2e_env.VCSIM_OPTS["batch_collector"] = False
    n = args.vms if args.vms is not None else (100 if args.quick else 1000)
    e2e_env.REQUEST_LOG_SIZE = max(e2e_env.REQUEST_LOG_SIZE, 40 * n)  # ~11 requests per VM, with room
    only: set[str] = args.only if args.only is not None else set(GROUPS) - UNSUPPORTED_GROUPS.get(args.apiserver, set())
    entries: list[dict[str, Any]] = json.loads(args.out.read_text()) if args.out.exists() else []
    before = list(entries)
    work = Path(tempfile.mkdtemp(prefix="banlieue-e2e-"))
    print(f"work dir {work}", file=sys.stderr)
    try:
        run_groups(args, only, n, work, entries)
    except Interrupted as stop:
        stop_children()
        saved = _save(args.out, entries, before)
        what = f"partial results in {args.out}" if saved else f"nothing measured; {args.out} left as it was"
        print(f"{PROG}: interrupted; {what}", file=sys.stderr)
        return int(stop.code or 1)
    except BaseException:
        stop_children()
        _save(args.out, entries, before)
        raise
    _save(args.out, entries, before)
    return 0


def stop_children(grace: float = 5.0) -> list[int]:
    """SIGTERM every process whose parent is this one, SIGKILL those alive after ``grace``
    seconds; returns their pids. A backstop for cleanup cut short: a signal that arrives while
    an ``Env`` is still starting (its ``__exit__`` never runs) or while its ``__exit__`` waits for
    the manager (the rest of it is skipped) leaves vcsims running, and a vcsim holding a
    WaitForUpdatesEx long poll does not exit on its own when its stdin closes. Linux: /proc."""
    me = os.getpid()
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == me and fields[0] != "Z":
            children.append(int(stat.parent.name))
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = set(children)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if not _reaped(pid)}
        if alive:
            time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return children


def _reaped(pid: int) -> bool:
    """Whether child ``pid`` has exited (reaping it)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True  # already reaped (by its Popen)


def _save(out: Path, entries: list[dict[str, Any]], before: list[dict[str, Any]]) -> bool:
    """Write ``entries`` to ``out`` (and the table, for the default path) when the run recorded
    something; returns whether it wrote. An unchanged list is not written, so an interrupted or
    failed run that measured nothing leaves an existing file as it was (and creates none)."""
    if entries == before:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entries, indent=2) + "\n")
    if out == RESULTS:
        write_table(entries)
    return True


def run_groups(args: argparse.Namespace, only: set[str], n: int, work: Path, entries: list[dict[str, Any]]) -> None:
    """Run the selected figure groups (names from GROUPS), appending to ``entries``."""
    if "throughput" in only or "steady" in only:
        steady_s = args.steady_seconds if args.steady_seconds is not None else (20.0 if args.quick else 60.0)
        e2e_run.throughput_and_steady(work, n, entries, steady_s, steady="steady" in only, profile=args.profile)
    if "isolation" in only:
        m = args.isolation_vms if args.isolation_vms is not None else (50 if args.quick else 100)
        e2e_run.vcenter_isolation(work, m, entries)
    if "memory" in only:
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
