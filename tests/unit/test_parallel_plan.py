"""tests/parallel_plan.py: how `make test PYTEST_WORKERS=N` spreads the suite over pytest-xdist workers."""

from __future__ import annotations

import itertools

import parallel_plan
import pytest


def test_each_worker_gets_its_own_port_range_below_the_ephemeral_ports() -> None:
    ranges = [parallel_plan.worker_port_range(f"gw{i}", 3, 32768) for i in range(3)]
    bounds = [tuple(int(p) for p in r.split("-")) for r in ranges if r]
    assert len(bounds) == 3
    assert bounds[0][0] == parallel_plan.PORTS_FROM and bounds[-1][1] < 32768
    for (_, high), (low, _) in itertools.pairwise(bounds):
        assert high < low  # disjoint, in order
    assert all(high - low + 1 >= parallel_plan.MIN_PORTS_PER_WORKER for low, high in bounds)


@pytest.mark.parametrize(("worker", "count", "first_ephemeral"), [("gw0", 30, 32768), ("gw0", 1, 10500), ("gw2", 2, 32768)])
def test_no_range_when_slices_are_too_small_or_the_worker_unknown(worker: str, count: int, first_ephemeral: int) -> None:
    assert parallel_plan.worker_port_range(worker, count, first_ephemeral) is None


def test_units_are_files_except_the_real_capi_files() -> None:
    assert parallel_plan.unit_of("tests/chaos/test_crash.py::test_x[real]") == "tests/chaos/test_crash.py"
    units = {parallel_plan.unit_of(f"{path}::test_y") for path in parallel_plan.REAL_CAPI_FILES}
    assert units == {parallel_plan.REAL_CAPI_UNIT}
    assert parallel_plan.unit_of("tests/capi/test_capi_acceptance.py::test_z") == "tests/capi/test_capi_acceptance.py"


def test_longest_units_exist() -> None:
    """Every unit named in LONGEST_FIRST is a test file of the suite (a renamed file would
    silently lose its early start)."""
    from pathlib import Path

    repo = Path(parallel_plan.__file__).resolve().parents[1]
    for unit in parallel_plan.LONGEST_FIRST:
        files = parallel_plan.REAL_CAPI_FILES if unit == parallel_plan.REAL_CAPI_UNIT else (unit,)
        assert all((repo / f).is_file() for f in files), unit
