"""How ``make test PYTEST_WORKERS=N`` spreads the suite over pytest-xdist workers (``-n N --dist loadfile``).

- The unit of work is a test file, as with xdist's ``loadfile``: a file's module-scoped
  fixtures (a vcsim, an API server, a banlieue manager shared by its tests) start once, on the one
  worker that runs the file, and its tests keep their order.
- The files that drive real Cluster API (:data:`REAL_CAPI_FILES`) are one unit: three share the
  package-scoped envtest and CAPI managers of ``tests/capi/conftest.py`` (about 40 s to start on
  two cores), which would otherwise start once per worker that gets one of these files, and
  ``banlieue dev --capi``'s own CAPI managers must not start while those do.
- Workers run the longest units first (:data:`LONGEST_FIRST`): each file listed there takes a few
  minutes, and xdist hands out units in collection order; started last, one of them would leave
  the other workers idle at the end of the run.

Each worker runs its tests one at a time, so a test never shares its process with another, and
every test works in its own ``tmp_path`` (pytest gives each worker its own base temp directory).
Ports: a server that binds port 0 itself (the API double, vcsim) gets one no other process holds;
a port chosen now and bound later by another process (etcd, kube-apiserver, the managers' probe
and metrics listeners: ``banlieue.cmd.dev.free_ports``) comes from the worker's own range below
the OS's ephemeral ports (``$BANLIEUE_PORT_RANGE``, :func:`pytest_configure`), inherited by the
processes the worker starts, so no other worker (nor any outgoing connection) can take it in
between. A plain ``pytest`` (no ``-n``, or ``-n 0``) runs everything in collection order, on ports
the OS chooses, as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from banlieue.cmd.dev import PORT_RANGE_ENV

# tests/e2e/test_dev_capi.py starts its own CAPI managers (``banlieue dev --capi``): in the same
# unit, two CAPI stacks never start at once. When they did (2 workers, load 10-18), the tier's
# envtest + managers took 408 s instead of about 40 s and dev's took over its 150-s deadline.
REAL_CAPI_FILES = (
    "tests/capi/test_real_capi.py",
    "tests/capi/test_real_capi_workload.py",
    "tests/capi/test_clusterctl.py",
    "tests/e2e/test_dev_capi.py",
)
REAL_CAPI_UNIT = "tests/capi: real Cluster API"

# The longest units, longest first; seconds are one serial `make test` on 2 loaded cores
# (2026-12-02, --durations), setup and teardown included.
LONGEST_FIRST = (
    "tests/chaos/test_api_faults.py",  # 6 fault scenarios, 60-165 s each
    REAL_CAPI_UNIT,  # about 500 s: 3 workload scenarios of 70-100 s plus 45-s teardowns
    "tests/chaos/test_leader_election.py",  # 2 x 110 s
    "tests/chaos/test_vcenter_faults.py",  # 93 + 39 + 35 + 25 s and more
    "tests/e2e/test_delete_no_leak.py",  # 80 + 28 s and more
    "tests/chaos/test_crash.py",
    "tests/chaos/test_kill_in_window.py",
    "tests/e2e/test_dev_supervision.py",
    "tests/e2e/test_dev.py",
)


PORTS_FROM = 10000  # the workers' port ranges split [PORTS_FROM, the first ephemeral port)
MIN_PORTS_PER_WORKER = 1000


def ephemeral_low() -> int:
    """The first port of the OS's ephemeral range (``net.ipv4.ip_local_port_range``); Linux's
    default, 32768, when it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def worker_port_range(worker: str, count: int, first_ephemeral: int) -> str | None:
    """``LOW-HIGH`` for xdist worker ``worker`` (``gw<i>``) of ``count``: the ``i``-th of ``count``
    equal slices of ``[PORTS_FROM, first_ephemeral)``; None when a slice would hold fewer than
    :data:`MIN_PORTS_PER_WORKER` ports (the OS chooses then, as without xdist)."""
    span = (first_ephemeral - PORTS_FROM) // max(count, 1)
    index = int(worker.removeprefix("gw"))
    if span < MIN_PORTS_PER_WORKER or not 0 <= index < count:
        return None
    low = PORTS_FROM + index * span
    return f"{low}-{low + span - 1}"


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker: ``$BANLIEUE_PORT_RANGE`` = this worker's range (module docstring),
    unless the environment already sets one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not worker or not count or os.environ.get(PORT_RANGE_ENV):
        return
    ports = worker_port_range(worker, count, ephemeral_low())
    if ports:
        os.environ[PORT_RANGE_ENV] = ports


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its file, or :data:`REAL_CAPI_UNIT` for the real-CAPI files."""
    path = nodeid.split("::", 1)[0]
    return REAL_CAPI_UNIT if path in REAL_CAPI_FILES else path


def _rank(nodeid: str) -> int:
    unit = unit_of(nodeid)
    return LONGEST_FIRST.index(unit) if unit in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``: xdist's file scheduler with :func:`unit_of` as its unit, handing out
    units in collection order (which :func:`pytest_collection_modifyitems` makes longest
    first) rather than by number of tests. Other ``--dist`` modes are xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class UnitScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker only: the units of :data:`LONGEST_FIRST` first, in that order, then the
    rest in collection order (a stable sort: tests keep their order within a file). Every worker
    sorts the same collection the same way, as xdist requires."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: _rank(item.nodeid))
