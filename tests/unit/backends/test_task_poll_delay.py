"""The gap between two polls of a vCenter task (``tasks.next_poll_delay``): at most 2 s while the
task is young, then at most a tenth of its age, so a clone that runs minutes on a real vCenter is
not read every 2 s (issue 22: 4 vCenter requests per machine)."""

from __future__ import annotations

import pytest

from banlieue.backends.vsphere.tasks import ALONG_POLL_DELAY, POLL_DELAY_MAX, POLL_SHARE, next_poll_delay


def polls(duration: float, first: float) -> tuple[int, float]:
    """Polls of a task that ends ``duration`` s after the wait began, the first at ``first`` s
    (a clone's ``first_poll``), and how late the last one saw it done."""
    t, delay, n = first, ALONG_POLL_DELAY, 1
    while t < duration:
        t += delay
        n += 1
        delay = next_poll_delay(delay, t)
    return n, t - duration


@pytest.mark.parametrize(("delay", "elapsed", "want"), [
    (0.1, 0.1, 0.2),     # doubles from the first gap
    (1.0, 3.0, 2.0),     # young: capped at POLL_DELAY_MAX
    (2.0, 19.0, 2.0),    # still 2 s below 20 s of age
    (2.0, 60.0, 4.0),    # doubles towards a tenth of its age
    (8.0, 60.0, 6.0),    # but never beyond it
    (30.0, 600.0, 60.0),
])
def test_gap_doubles_up_to_two_seconds_then_a_tenth_of_the_tasks_age(delay: float, elapsed: float, want: float) -> None:
    assert next_poll_delay(delay, elapsed) == pytest.approx(want)


def test_a_simulator_clone_is_polled_as_before() -> None:
    # A 5 s clone whose first poll comes at 0.8 of the expected duration: two polls, on time.
    assert polls(5.0, 4.0) == (2, pytest.approx(0.0))
    assert POLL_DELAY_MAX == 2.0 and POLL_SHARE == 0.1


@pytest.mark.parametrize(("duration", "most_polls", "before"), [(60.0, 19, 26), (180.0, 30, 86), (600.0, 43, 296)])
def test_a_long_clone_is_polled_tens_of_times_not_hundreds(duration: float, most_polls: int, before: int) -> None:
    # First poll at CLONE_FIRST_POLL_MAX (10 s), as for a vCenter whose clones take minutes;
    # ``before``: the polls of the schedule this replaced (every 2 s from then on).
    n, late = polls(duration, 10.0)
    assert before == 1 + int((duration - 10.0) / 2.0 + 0.999)
    assert n <= most_polls < before
    assert late <= POLL_SHARE * duration  # seen done at most a tenth of its duration late
