"""Rate limiters: client-go default_rate_limiters.go series and combinations."""

from __future__ import annotations

import pytest

from banlieue.runtime.clock import FakeClock
from banlieue.runtime.rate_limiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)


def test_item_exponential_series_is_5ms_doubling_capped_at_1000s() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [rl.when("a") for _ in range(25)]
    assert delays[0] == pytest.approx(0.005)
    assert delays[1] == pytest.approx(0.010)
    assert delays[2] == pytest.approx(0.020)
    assert delays[17] == pytest.approx(655.36)  # failure #18 = 5 ms * 2**17
    assert delays[18:] == [1000.0] * 7  # failure #19 onwards is capped
    assert rl.num_requeues("a") == 25


def test_item_exponential_is_per_item_and_forget_resets() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    rl.when("a")
    rl.when("a")
    assert rl.when("b") == pytest.approx(0.005)
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == pytest.approx(0.005)


def test_item_exponential_overflow_guard() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 5.0)
    for _ in range(2000):
        delay = rl.when("a")
    assert delay == 5.0


def test_bucket_burst_100_then_10_per_second() -> None:
    clock = FakeClock()
    rl: BucketRateLimiter[str] = BucketRateLimiter(10.0, 100, clock=clock)
    assert [rl.when(f"x{i}") for i in range(100)] == [0.0] * 100
    # Every further call reserves the next token, 0.1 s apart.
    assert rl.when("y") == pytest.approx(0.1)
    assert rl.when("y") == pytest.approx(0.2)
    assert rl.when("z") == pytest.approx(0.3)
    clock.step(0.3)  # the three reservations are now paid for
    assert rl.when("w") == pytest.approx(0.1)
    clock.step(100.0)  # refills up to the burst, no further
    assert [rl.when("v") for _ in range(100)] == [0.0] * 100
    assert rl.when("v") == pytest.approx(0.1)
    assert rl.num_requeues("v") == 0
    rl.forget("v")  # no effect on tokens
    assert rl.when("v") == pytest.approx(0.2)


def test_fast_slow() -> None:
    rl: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.1, 10.0, 3)
    assert [rl.when("a") for _ in range(5)] == [0.1, 0.1, 0.1, 10.0, 10.0]
    assert rl.num_requeues("a") == 5
    rl.forget("a")
    assert rl.when("a") == 0.1


def test_max_of_takes_the_worst_and_charges_every_limiter() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(1.0, 1, clock=clock)
    expo: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.01, 100.0)
    rl = MaxOfRateLimiter(expo, bucket)
    assert rl.when("a") == pytest.approx(0.01)  # bucket had its one token
    assert rl.when("a") == pytest.approx(1.0)  # bucket wait (1 s) > expo (0.02 s)
    assert rl.num_requeues("a") == 2
    rl.forget("a")
    assert expo.num_requeues("a") == 0


def test_with_max_wait_caps() -> None:
    rl = WithMaxWaitRateLimiter(ItemExponentialFailureRateLimiter[str](1.0, 1000.0), 3.0)
    assert [rl.when("a") for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]
    assert rl.num_requeues("a") == 4
    rl.forget("a")
    assert rl.num_requeues("a") == 0


def test_default_controller_rate_limiter() -> None:
    clock = FakeClock()
    rl: MaxOfRateLimiter[str] = default_controller_rate_limiter(clock=clock)
    # Per item: 5 ms, 10 ms, ... while the bucket still has tokens.
    assert rl.when("a") == pytest.approx(0.005)
    assert rl.when("a") == pytest.approx(0.010)
    # 98 more distinct failures drain the burst of 100; the next one waits for a token.
    for i in range(98):
        rl.when(f"other{i}")
    assert rl.when("fresh") == pytest.approx(0.1)
    for _ in range(20):
        rl.when("a")
    clock.step(1000.0)
    assert rl.when("a") == 1000.0
