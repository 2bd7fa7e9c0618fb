"""An attempt: push one message through the :class:`~.sender.EndpointSender` until
:func:`core.retry.decide` gives a verdict that takes it out of memory, and return that
verdict, as a value (:class:`Finished`), to the dispatch, which carries it out:

- delivered: the message is terminal;
- to a delay level: the message and its group's queued messages leave the scheduler for the
  level and the hold topic;
- dead letter: the same, to the DLQ.

A verdict to retry in place (a wait shorter than every delay level) is the attempt's own:
the message keeps its slot, its group waits behind it, and it is sent again after the wait.

Each attempt waits for the circuit's permit first: an attempt the open circuit refuses is
never sent, so never counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from core import telemetry
from core.audit import AuditType
from core.envelope import PRODUCED_AT, header
from core.model import Subscription
from core.result import DeliveryResult
from core.retry import DELIVERED, DeadLetter, Delivered, RetryInPlace, ToLevel, decide

from .audit import SubscriptionAudit
from .items import Item, now_ms, sleep_until
from .latency import LatencyHistogram
from .poison import poisoned_result
from .progress import Progress
from .sender import Delivery, EndpointSender
from .stats import record_failure
from .throttle import Throttle

log = logging.getLogger(__name__)


class AttemptStats(Protocol):
    delivered: int
    attempts: int
    failed_attempts: int
    retried: int
    dead_lettered: int
    in_flight: int
    latency: LatencyHistogram
    failures: dict[str, int]
    last_failure: dict[str, object] | None


class HealthRecorder(Protocol):
    """Told every attempt's result: the endpoint lifecycle (:mod:`.disabling`)."""

    def record(self, result: DeliveryResult) -> None: ...


@dataclass(frozen=True, slots=True)
class Finished:
    """An attempt's last word on ``item``: its ``verdict`` (never to retry in place), the
    ``result`` and the number of the ``attempt`` it came from."""

    item: Item
    verdict: Delivered | ToLevel | DeadLetter
    result: DeliveryResult
    attempt: int


POISONED = DeadLetter(exhausted=False)


def count_failed(
    stats: AttemptStats, verdict: RetryInPlace | ToLevel | DeadLetter, result: DeliveryResult
) -> None:
    """Count one failed attempt of one message by what follows it: dead-lettered, or retried
    (another attempt comes, in place or through a delay level), and by what the endpoint
    answered (``stats.record_failure``). The single and the batch attempts count here, so a
    batch's failed messages count as each would alone."""
    stats.failed_attempts += 1
    record_failure(stats, result, now_ms())
    if isinstance(verdict, DeadLetter):
        stats.dead_lettered += 1
    else:
        stats.retried += 1


class AttemptParts:
    """What every kind of attempt of one subscription works with: the single attempts here,
    the batch attempts of :mod:`.batch_attempt`."""

    def __init__(
        self,
        sub: Subscription,
        sender: EndpointSender,
        throttle: Throttle,
        progress: Progress,
        stats: AttemptStats,
        audit: SubscriptionAudit,
        poisoned: Mapping[str, str] | None = None,
        health: HealthRecorder | None = None,
    ) -> None:
        self.sub = sub
        self.health = health
        self.poisoned = poisoned or {}
        self.topic = f"{sub.topic_project}/{sub.topic}"
        self.sender = sender
        self.throttle = throttle  # the circuit breaker
        self.progress = progress  # counts the requests on the wire
        self.stats = stats
        self.audit = audit


class Attempts(AttemptParts):
    """Carries out the attempts of one subscription's messages (see the module doc)."""

    async def run(self, item: Item) -> Finished:
        """Attempt ``item`` until its verdict takes it out of memory, and return it."""
        why = self.poisoned.get(item.origin)
        if why is not None:  # never sent: a delivery that failed for good, its group after it
            self.stats.dead_lettered += 1
            return Finished(item, POISONED, poisoned_result(why), item.meta.attempts)
        sub, policy, stats = self.sub, self.sub.retry, self.stats
        throttle, audit = self.throttle, self.audit
        stats.in_flight += 1
        try:
            await sleep_until(item.not_before_ms)
            attempt = item.meta.attempts + 1
            while True:
                await throttle.admit()  # refused while open: waits, costs no attempt
                result = await self._send(Delivery(sub, self.topic, item.msg, attempt))
                throttle.record(result)
                if self.health is not None:
                    self.health.record(result)
                stats.attempts += 1
                audit.item(
                    AuditType.ATTEMPTED,
                    item,
                    attempt=attempt,
                    status=result.status,
                    error=result.error,
                    latency_ms=round(result.latency_s * 1000, 1),
                    answer=result.answer,
                )
                verdict = decide(policy, result, attempt)
                if verdict is DELIVERED:
                    break
                assert not isinstance(verdict, Delivered)
                count_failed(stats, verdict, result)
                if not isinstance(verdict, RetryInPlace):
                    return Finished(item, verdict, result, attempt)
                await asyncio.sleep(verdict.wait_ms / 1000)  # shorter than every level
                attempt += 1
        finally:
            stats.in_flight -= 1
        stats.delivered += 1
        stats.latency.observe(time.time() - accepted_s(item))
        audit.item(AuditType.DELIVERED, item, attempt=attempt, status=result.status)
        return Finished(item, DELIVERED, result, attempt)

    async def _send(self, delivery: Delivery) -> DeliveryResult:
        """One attempt through the sender. A sender that raises (a bug, or a message nothing
        foresaw) fails this message as an unexpected error, retried and dead-lettered by its
        policy: an exception here would leave the message in flight for ever and stall its
        group and the commit behind it."""
        started = time.perf_counter()
        started_ns = time.time_ns() if telemetry.enabled else 0  # spans only
        try:
            with self.progress.on_the_wire():
                result = await self.sender.send(delivery)
        except Exception as exc:
            log.exception("delivery of %s failed in the worker", delivery.message_id)
            result = DeliveryResult.from_exception(exc, time.perf_counter() - started)
        if telemetry.enabled:
            sub = f"{self.sub.project}/{self.sub.name}"
            telemetry.deliver_span(
                delivery.message.headers,
                sub,
                delivery.message_id,
                delivery.attempt,
                started_ns,
                time.time_ns(),
                result.status,
                result.error,
            )
        return result


def accepted_s(item: Item) -> float:
    """When httpbus accepted the message (``x-produced-at``, else its storage timestamp)."""
    produced = header(item.msg.headers, PRODUCED_AT)
    ms = int(produced) if produced and produced.isdigit() else item.msg.timestamp_ms
    return ms / 1000
