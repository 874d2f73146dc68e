"""The chaos suite's terminal summary: ``chaos: N scenarios tried, M held`` and every scenario
that did not hold (failed, errored, or a strict xfail naming a known product bug).

A plugin registered by ``tests/conftest.py`` rather than a hook in ``tests/chaos/conftest.py``:
under pytest-xdist (``make test PYTEST_WORKERS=2`` runs ``-n 2``) the summary is printed by the controller, which
loads only the conftest files of its command-line paths' anchors (``tests/conftest.py`` for a
plain ``pytest``), never ``tests/chaos/conftest.py``. The controller's terminal reporter holds
every worker's reports (xdist replays each through ``pytest_runtest_logreport``), so the counts
cover every scenario wherever it ran; workers print no summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

CHAOS_PREFIX = "tests/chaos/"


def _outcomes(reporter: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for key in ("passed", "failed", "error", "xfailed", "xpassed", "skipped"):
        reports = [r for r in reporter.stats.get(key, []) if getattr(r, "nodeid", "").startswith(CHAOS_PREFIX)]
        # A test can report an error at setup and at teardown; count each scenario once.
        out[key] = list({r.nodeid: r for r in reports if key != "passed" or r.when == "call"}.values())
    return out


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Iterator[None]:
    """Print ``chaos: N scenarios tried, M held`` and what did not hold, after pytest's own
    summaries (the outermost wrapper's code after ``yield`` runs last)."""
    yield
    outcomes = _outcomes(terminalreporter)
    tried_ids = {r.nodeid for key in ("passed", "failed", "error", "xfailed", "xpassed") for r in outcomes[key]}
    if not tried_ids and not outcomes["skipped"]:
        return
    held_ids = {r.nodeid for r in outcomes["passed"]} - {r.nodeid for k in ("failed", "error") for r in outcomes[k]}
    terminalreporter.write_sep("=", "chaos summary")
    terminalreporter.write_line(f"chaos: {len(tried_ids)} scenarios tried, {len(held_ids)} held")
    for key, label in (("failed", "FAILED"), ("error", "ERROR"), ("xfailed", "KNOWN BUG (xfail)"),
                       ("xpassed", "XPASS"), ("skipped", "SKIPPED")):
        for report in outcomes[key]:
            reason = ""
            if key == "xfailed":
                reason = str(getattr(report, "wasxfail", ""))
            elif key == "skipped" and isinstance(report.longrepr, tuple):
                reason = str(report.longrepr[2])
            elif report.longrepr is not None:
                crash = getattr(report.longrepr, "reprcrash", None)
                reason = str(crash.message if crash is not None else report.longrepr).splitlines()[0]
            terminalreporter.write_line(f"  {label}: {report.nodeid} {reason[:300]}")
