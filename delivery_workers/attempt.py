"""An attempt: push one message through the :class:`~.sender.EndpointSender`, then carry out
the verdict of :func:`core.retry.decide` on it.

- delivered: the message is terminal (:meth:`.routing.Routing.delivered`);
- retried in place (a wait shorter than every delay level): the message keeps its slot, its
  group waits behind it, and it is attempted again after the wait;
- to a delay level: the message and its group's queued messages leave the scheduler for the
  level and the hold topic (:meth:`.routing.Routing.to_level`);
- dead letter: the same, to the DLQ (:meth:`.routing.Routing.dead_letter`).

Each attempt waits for the circuit's permit first: an attempt the open circuit refuses is
never sent, so never counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from core import telemetry
from core.audit import AuditType
from core.envelope import PRODUCED_AT, header
from core.model import Subscription
from core.result import DeliveryResult
from core.retry import DELIVERED, DeadLetter, RetryInPlace, ToLevel, decide

from .audit import SubscriptionAudit
from .dispatch import Dispatch
from .items import Item, sleep_until
from .latency import LatencyHistogram
from .poison import crash_names, poisoned_result
from .routing import Routing
from .sender import Delivery, EndpointSender

log = logging.getLogger(__name__)


class AttemptStats(Protocol):
    delivered: int
    attempts: int
    failed_attempts: int
    retried: int
    dead_lettered: int
    in_flight: int
    latency: LatencyHistogram


class HealthRecorder(Protocol):
    """Told every attempt's result: the endpoint lifecycle (:mod:`.disabling`)."""

    def record(self, result: DeliveryResult) -> None: ...


class AttemptParts:
    """What every kind of attempt of one subscription works with: the single attempts here,
    the batch attempts of :mod:`.batch_attempt`."""

    def __init__(
        self,
        sub: Subscription,
        sender: EndpointSender,
        dispatch: Dispatch,
        routing: Routing,
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
        self.dispatch = dispatch
        self.routing = routing
        self.stats = stats
        self.audit = audit


class Attempts(AttemptParts):
    """Carries out the attempts of one subscription's messages (see the module doc)."""

    async def run(self, item: Item) -> None:
        """Attempt ``item`` until its verdict takes it out of memory; a failure of the worker
        on the way is the :class:`~.poison.MessageCrashed` of the message."""
        with crash_names(item.origin):
            why = self.poisoned.get(item.origin)
            if why is None:
                await self._attempt(item)
            else:
                self._dead_letter_poisoned(item, why)

    def _dead_letter_poisoned(self, item: Item, why: str) -> None:
        """Never sent: to the DLQ as a delivery that failed for good, its group after it."""
        self.stats.dead_lettered += 1
        drained = self.dispatch.stop_group(item)
        self.routing.dead_letter(item, poisoned_result(why), item.meta.attempts, drained)
        self.dispatch.wake()

    async def _attempt(self, item: Item) -> None:
        sub, policy, stats = self.sub, self.sub.retry, self.stats
        throttle, audit = self.dispatch.throttle, self.audit
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
                stats.failed_attempts += 1
                if isinstance(verdict, DeadLetter):
                    stats.dead_lettered += 1
                    drained = self.dispatch.stop_group(item)
                    self.routing.dead_letter(item, result, attempt, drained)
                    return
                if isinstance(verdict, ToLevel):
                    stats.retried += 1
                    drained = self.dispatch.stop_group(item)
                    self.routing.to_level(item, result, attempt, verdict, drained)
                    return
                assert isinstance(verdict, RetryInPlace)
                await asyncio.sleep(verdict.wait_ms / 1000)  # shorter than every level
                attempt += 1
        finally:
            stats.in_flight -= 1
            self.dispatch.wake()
        stats.delivered += 1
        stats.latency.observe(time.time() - accepted_s(item))
        audit.item(AuditType.DELIVERED, item, attempt=attempt, status=result.status)
        self.dispatch.done(item)
        self.routing.delivered(item)

    async def _send(self, delivery: Delivery) -> DeliveryResult:
        """One attempt through the sender. A sender that raises (a bug, or a message nothing
        foresaw) fails this message as an unexpected error, retried and dead-lettered by its
        policy: an exception here would leave the message in flight for ever and stall its
        group and the commit behind it."""
        started = time.perf_counter()
        started_ns = time.time_ns() if telemetry.enabled else 0  # spans only
        try:
            with self.dispatch.on_the_wire():
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
