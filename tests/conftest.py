"""Shared pytest configuration: fixtures for the API-server double and vcsim, hypothesis profiles."""

import os

from hypothesis import settings

pytest_plugins = [
    "banlieue.testing.apiserver.fixture",
    "banlieue.testing.envtest.fixture",
    "banlieue.testing.vcsim",
    "chaos.summary",  # the chaos summary line, printed by xdist's controller too
    "parallel_plan",  # how `make test PYTEST_WORKERS=N` spreads files over xdist workers
]

# No per-example deadline: on a loaded 2-core machine a slow example is not a failure (the
# properties are about outcomes, not speed). In CI, examples are derived from each test's name so
# a run is reproducible; locally hypothesis keeps exploring new ones.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
