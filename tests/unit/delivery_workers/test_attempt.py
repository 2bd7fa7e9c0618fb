"""An attempt carries out core.retry.decide's verdict: with a recording sender, no socket."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from core.model import Endpoint, RetryPolicy, Subscription
from core.result import DeliveryResult, ErrorKind
from core.retry import ToLevel
from delivery_workers.attempt import Attempts
from delivery_workers.audit import SubscriptionAudit
from delivery_workers.items import Item, Kind
from delivery_workers.runner import RunnerStats
from delivery_workers.throttle import Throttle
from segments.protocol import Stored
from segments.subscription.retry_meta import RetryMeta
from tests.support.senders import RecordingSender

POLICY = RetryPolicy(
    max_attempts=3, backoff="fixed", initial_delay_ms=10, jitter=0, delay_levels_ms=(1_000,)
)


class FakeDispatch:
    def __init__(self, stats: RunnerStats) -> None:
        self.throttle = Throttle(None, stats)
        self.events: list[str] = []

    def wake(self) -> None:
        pass

    @contextlib.contextmanager
    def on_the_wire(self) -> Iterator[None]:
        yield

    def done(self, item: Item) -> None:
        self.events.append("done")

    def stop_group(self, item: Item) -> list[Item]:
        self.events.append("stop_group")
        return []


class FakeRouting:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def delivered(self, item: Item) -> None:
        self.calls.append(("delivered",))

    def to_level(
        self, item: Item, result: DeliveryResult, attempt: int, verdict: ToLevel, _: Any
    ) -> None:
        self.calls.append(("to_level", attempt, verdict))

    def dead_letter(self, item: Item, result: DeliveryResult, attempt: int, _: Any) -> None:
        self.calls.append(("dead_letter", attempt, result.status, result.error_kind))


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


async def _attempt(*answers: DeliveryResult) -> tuple[RecordingSender, FakeRouting, RunnerStats]:
    script = iter(answers)
    sender = RecordingSender(lambda _delivery: next(script))
    stats, routing = RunnerStats(), FakeRouting()
    sub = _sub()
    attempts = Attempts(
        sub,
        sender,
        FakeDispatch(stats),
        routing,
        stats,
        SubscriptionAudit(None, sub),  # type: ignore[arg-type]
    )
    msg = Stored(partition=0, position=7, timestamp_ms=0, value=b"{}")
    item = Item(msg, None, Kind.FRESH, None, RetryMeta(origin="1:0:7", topic="shop/orders"))  # type: ignore[arg-type]
    async with sender:
        await attempts.run(item)
    return sender, routing, stats


async def test_short_waits_are_retried_in_place_until_delivered() -> None:
    sender, routing, stats = await _attempt(
        DeliveryResult(503), DeliveryResult(500), DeliveryResult(200)
    )
    assert sender.attempts() == [1, 2, 3]
    assert routing.calls == [("delivered",)]
    assert (stats.attempts, stats.failed_attempts, stats.delivered, stats.in_flight) == (3, 2, 1, 0)


async def test_a_refused_answer_goes_to_the_dlq_at_once() -> None:
    sender, routing, stats = await _attempt(DeliveryResult(404))
    assert sender.attempts() == [1]
    assert routing.calls == [("dead_letter", 1, 404, None)]
    assert stats.dead_lettered == 1


async def test_attempts_spent_go_to_the_dlq() -> None:
    timeout = DeliveryResult.failure(ErrorKind.TIMEOUT, "timeout after 5 ms (TimeoutError)")
    sender, routing, _ = await _attempt(timeout, timeout, timeout)
    assert sender.attempts() == [1, 2, 3]
    assert routing.calls == [("dead_letter", 3, None, ErrorKind.TIMEOUT)]


async def test_retry_after_beyond_a_level_goes_to_the_level() -> None:
    sender, routing, stats = await _attempt(DeliveryResult(429, retry_after=5.0))
    assert sender.attempts() == [1]
    assert routing.calls == [("to_level", 1, ToLevel(5_000, 1_000))]
    assert stats.retried == 1
