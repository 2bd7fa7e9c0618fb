"""An attempt returns core.retry.decide's verdict as a value: with a recording sender, no socket."""

from __future__ import annotations

from core.model import Endpoint, RetryPolicy, Subscription
from core.result import DeliveryResult, ErrorKind
from core.retry import DELIVERED, DeadLetter, ToLevel
from delivery_workers.attempt import Attempts, Finished
from delivery_workers.audit import SubscriptionAudit
from delivery_workers.items import Item, Kind
from delivery_workers.progress import Progress
from delivery_workers.stats import RunnerStats
from delivery_workers.throttle import Throttle
from segments.protocol import Stored
from segments.subscription.retry_meta import RetryMeta
from tests.support.senders import RecordingSender

POLICY = RetryPolicy(
    max_attempts=3, backoff="fixed", initial_delay_ms=10, jitter=0, delay_levels_ms=(1_000,)
)


def _sub() -> Subscription:
    return Subscription(
        project="shop",
        name="billing",
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url="http://hooks.example/in"),
        retry=POLICY,
        signing_secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )


async def _attempt(*answers: DeliveryResult) -> tuple[RecordingSender, Finished, RunnerStats]:
    script = iter(answers)
    sender = RecordingSender(lambda _delivery: next(script))
    stats = RunnerStats()
    sub = _sub()
    attempts = Attempts(
        sub,
        sender,
        Throttle(None, stats),
        Progress(),
        stats,
        SubscriptionAudit(None, sub),  # type: ignore[arg-type]
    )
    msg = Stored(partition=0, position=7, timestamp_ms=0, value=b"{}")
    item = Item(msg, None, Kind.FRESH, None, RetryMeta(origin="1:0:7", topic="shop/orders"))  # type: ignore[arg-type]
    async with sender:
        finished = await attempts.run(item)
    assert finished.item is item
    return sender, finished, stats


async def test_short_waits_are_retried_in_place_until_delivered() -> None:
    sender, finished, stats = await _attempt(
        DeliveryResult(503), DeliveryResult(500), DeliveryResult(200)
    )
    assert sender.attempts() == [1, 2, 3]
    assert (finished.verdict, finished.attempt) == (DELIVERED, 3)
    assert (stats.attempts, stats.failed_attempts, stats.delivered, stats.in_flight) == (3, 2, 1, 0)


async def test_a_refused_answer_goes_to_the_dlq_at_once() -> None:
    sender, finished, stats = await _attempt(DeliveryResult(404))
    assert sender.attempts() == [1]
    assert isinstance(finished.verdict, DeadLetter)
    assert (finished.attempt, finished.result.status) == (1, 404)
    assert stats.dead_lettered == 1


async def test_attempts_spent_go_to_the_dlq() -> None:
    timeout = DeliveryResult.failure(ErrorKind.TIMEOUT, "timeout after 5 ms (TimeoutError)")
    sender, finished, _ = await _attempt(timeout, timeout, timeout)
    assert sender.attempts() == [1, 2, 3]
    assert finished.verdict == DeadLetter(exhausted=True)
    assert (finished.attempt, finished.result.error_kind) == (3, ErrorKind.TIMEOUT)


async def test_retry_after_beyond_a_level_goes_to_the_level() -> None:
    sender, finished, stats = await _attempt(DeliveryResult(429, retry_after=5.0))
    assert sender.attempts() == [1]
    assert (finished.verdict, finished.attempt) == (ToLevel(5_000, 1_000), 1)
    assert stats.retried == 1
