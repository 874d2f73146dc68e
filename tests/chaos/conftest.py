"""Fixtures of the chaos suite and its summary line.

``chaos_env`` gives each scenario a fresh :class:`ChaosEnv` (API double in its own process, or
envtest's kube-apiserver: ``$BANLIEUE_TEST_APISERVER``, or per scenario with
``@ON_BOTH_SERVERS``, which plain ``make test`` runs on both, or ``@ON_THE_REAL_SERVER``, which it
runs on kube-apiserver only; the scenario adds vcsims and
banlieue processes); everything is stopped at teardown.

At the end of a run that collected chaos scenarios, the terminal summary prints
``chaos: N scenarios tried, M held`` and names every scenario that did not hold (failed,
errored, or a strict xfail naming a known product bug): ``summary.py``, a plugin that
``tests/conftest.py`` registers so that pytest-xdist's controller prints it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from banlieue.testing.vcsim import VcsimUnavailable, vcsim_binary

from .harness import ChaosEnv


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
