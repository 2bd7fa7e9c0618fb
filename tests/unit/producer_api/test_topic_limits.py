"""A topic's capacity (``producer_api.limits``), on an injected clock: bytes over one second
of ``max_bytes_per_second`` get the same answer in one message or in a batch (issue 40)."""

from __future__ import annotations

import pytest

from core.errors import Throttled
from core.model import Capacity, Topic
from producer_api.limits import TopicLimits
from tests.support.clock import ManualClock

TOPIC = Topic(project="p", name="t", capacity=Capacity(max_qps=100, max_bytes_per_second=2_048))


def _waits(limits: TopicLimits, messages: int, size: int) -> float:
    """0.0 if the request passed, else its ``Retry-After``."""
    try:
        limits.check(TOPIC, messages, size)
    except Throttled as exc:
        assert exc.retry_after is not None, exc.message
        return exc.retry_after
    return 0.0


@pytest.mark.parametrize("messages", [1, 2, 3])
def test_bytes_over_a_second_pass_when_full_then_wait_off_their_debt(messages: int) -> None:
    """3 000 bytes on a 2 048 B/s topic, in one, two or three messages: the same answers."""
    clock = ManualClock(100.0)
    limits = TopicLimits(clock)
    assert _waits(limits, messages, 3_000) == 0.0  # the bucket was full
    wait = _waits(limits, messages, 3_000)  # in debt by 952 bytes: a full burst is due
    assert wait == pytest.approx((2_048 + 952) / 2_048)
    clock.now += wait - 0.01
    assert _waits(limits, messages, 3_000) > 0.0
    clock.now += 0.01
    assert _waits(limits, messages, 3_000) == 0.0


def test_the_long_run_byte_rate_stays_at_the_capacity_in_batches_and_alone() -> None:
    for messages in (1, 2):
        clock, passed = ManualClock(100.0), 0
        limits = TopicLimits(clock)
        for _ in range(10_000):  # 100 s in steps of 10 ms
            clock.now += 0.01
            if _waits(limits, messages, 4_000) == 0.0:
                passed += 4_000
        assert 2_048 * 99 <= passed <= 2_048 * 100 + 4_000, (messages, passed)


def test_a_batch_of_more_messages_than_a_second_takes_never_fits() -> None:
    limits = TopicLimits(ManualClock(100.0))
    with pytest.raises(Throttled) as refused:
        limits.check(TOPIC, 101, 101)
    assert "smaller batches" in refused.value.message
    limits.check(TOPIC, 100, 100)  # the burst itself fits
