import random

import pytest

from core.model import RetryPolicy
from core.retry import delay_ms


def test_schedules_without_jitter() -> None:
    fixed = RetryPolicy(backoff="fixed", initial_delay_ms=500, jitter=0)
    linear = RetryPolicy(backoff="linear", initial_delay_ms=500, jitter=0)
    expo = RetryPolicy(
        backoff="exponential", initial_delay_ms=500, multiplier=3, jitter=0, max_delay_ms=10_000
    )
    assert [delay_ms(fixed, n) for n in (1, 2, 3)] == [500, 500, 500]
    assert [delay_ms(linear, n) for n in (1, 2, 3)] == [500, 1000, 1500]
    assert [delay_ms(expo, n) for n in (1, 2, 3, 4, 5)] == [500, 1500, 4500, 10_000, 10_000]
    assert delay_ms(expo, 10_000) == 10_000  # no overflow however many attempts


def test_jitter_stays_within_its_band_and_the_cap() -> None:
    policy = RetryPolicy(backoff="fixed", initial_delay_ms=1000, jitter=0.2, max_delay_ms=1100)
    rng = random.Random(7)
    seen = [delay_ms(policy, 1, rng=rng) for _ in range(500)]
    assert min(seen) >= 800 and max(seen) <= 1100 and len(set(seen)) > 50


def test_retry_after_wins_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay_ms=100, max_delay_ms=5_000)
    assert delay_ms(policy, 1, retry_after_s=3) == 3_000
    assert delay_ms(policy, 1, retry_after_s=3_600) == 5_000
    with pytest.raises(ValueError):
        delay_ms(policy, 0)
