"""pytest fixture ``envtest`` (session scope): one :class:`~banlieue.testing.envtest.Envtest` for the
whole session, skipped (with the reason) when ``make envtest`` has not run; registered through
``tests/conftest.py``'s ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import Envtest, envtest_binaries_missing, start_envtest


@pytest.fixture(scope="session")
def envtest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envtest]:
    """One envtest for the session (skipped when the binaries are missing); its logs stay in the
    session's tmp dir."""
    reason = envtest_binaries_missing()
    if reason:
        pytest.skip(reason)
    with start_envtest(tmp_path_factory.mktemp("envtest"), keep_logs=True) as env:
        yield env
