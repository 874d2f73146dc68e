"""Fixtures of the chaos suite and its summary line.

``chaos_env`` gives each scenario a fresh :class:`ChaosEnv` (API double in its own process, or
envtest's kube-apiserver: ``$BANLIEUE_TEST_APISERVER``, or per scenario with
``@ON_BOTH_SERVERS``, which plain ``make test`` runs on both, or ``@ON_THE_REAL_SERVER``, which it
runs on kube-apiserver only; the scenario adds vcsims and
banlieue processes); everything is stopped at teardown.

At the end of a run that collected chaos scenarios, the terminal summary prints
``chaos: N scenarios tried, M held`` and names every scenario that did not hold (failed,
errored, or a strict xfail naming a known product bug).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from banlieue.testing.vcsim import VcsimUnavailable, vcsim_binary

from .harness import ChaosEnv

CHAOS_PREFIX = "tests/chaos/"


@pytest.fixture
def chaos_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosEnv]:
    """A fresh environment with an API server running and the CRDs installed (``request.param``
    when parametrized indirectly: ``double`` or ``real``)."""
    try:
        vcsim_binary()
    except VcsimUnavailable as err:
        pytest.skip(str(err))
    with ExitStack() as stack:
        env = ChaosEnv(tmp_path, stack)
        env.start_api(getattr(request, "param", None))
        yield env


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
