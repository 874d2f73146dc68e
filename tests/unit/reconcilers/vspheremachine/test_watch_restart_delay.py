"""Issue F4: the restart schedule of a failing vCenter watch (sources.watch_restart_delay)."""

from __future__ import annotations

import pytest

from banlieue.reconcilers.vspheremachine.sources import (
    WATCH_AUTH_FAILED_SECONDS,
    WATCH_RESTART_MAX_SECONDS,
    WATCH_RESTART_SECONDS,
    watch_restart_delay,
)


def test_pause_doubles_from_the_first_restart_up_to_the_cap() -> None:
    delays = [watch_restart_delay(n, auth_failed=False) for n in range(1, 12)]
    assert delays[:5] == [5.0, 10.0, 20.0, 40.0, 80.0]
    assert delays[0] == WATCH_RESTART_SECONDS
    assert max(delays) == WATCH_RESTART_MAX_SECONDS == 300.0
    assert delays == sorted(delays)


def test_refused_credentials_wait_the_lockout_safe_pause_at_once() -> None:
    # vCenter SSO default lockout: 5 failures within 180 s. One try per 300 s never reaches it.
    assert watch_restart_delay(1, auth_failed=True) == WATCH_AUTH_FAILED_SECONDS == 300.0
    assert all(watch_restart_delay(n, auth_failed=True) >= 180.0 for n in range(1, 100))


def test_huge_failure_counts_stay_at_the_cap() -> None:
    assert watch_restart_delay(10_000, auth_failed=False) == WATCH_RESTART_MAX_SECONDS


def test_failures_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="failures must be >= 1"):
        watch_restart_delay(0, auth_failed=False)
