"""A batch attempt: push the messages :meth:`.dispatch.Dispatch.run_batches` gathered in one
request (:class:`~.sender.BatchDelivery`), and return :func:`core.retry.decide`'s verdict on
each of them to the dispatch as it comes (:class:`~.attempt.Finished`), as :mod:`.attempt`
does for one message.

The batch is one attempt: the circuit's permit is taken once, the breaker and the endpoint's
health are told its one result, and the endpoint's answer applies to every message of it,
unless a 2xx answer names failed messages (``{"failed": ["id", …]}``, docs/receiving.md):

- a 2xx: every message is delivered, but those the
  answer names failed: each of these gets the verdict of a failed attempt of its own
  (:meth:`core.result.DeliveryResult.reported_failed`, always retryable), so only they are
  sent again, by their own attempt counts, and end in the DLQ when those are spent. The
  endpoint was up, so the breaker and the endpoint's health count the batch's 2xx; each
  retry of these messages is a request of its own that the breaker admits and counts;
- otherwise each message gets the verdict its own attempt count gives with that result: to a
  delay level or to the DLQ with its group behind it (as a single message would), or retried
  in place; the messages retried in place are sent again together, as one batch, after the
  longest of their waits.

A message named in ``poisoned`` is never sent: it is dead-lettered alone, as in :mod:`.attempt`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from core.audit import AuditType
from core.result import DeliveryResult
from core.retry import DELIVERED, Delivered, RetryInPlace, Verdict, decide

from .attempt import POISONED, AttemptParts, Finished, accepted_s, count_failed
from .items import Item, sleep_until
from .poison import crash_names, poisoned_result
from .sender import BatchDelivery, batch_message_id

log = logging.getLogger(__name__)


class BatchAttempts(AttemptParts):
    """Carries out the batch attempts of one subscription (see the module doc)."""

    async def run(self, batch: list[Item]) -> AsyncIterator[Finished]:
        """Attempt ``batch`` until every message of it left memory (delivered, to a level,
        to the DLQ); each message's verdict as it comes."""
        stats = self.stats
        stats.in_flight += len(batch)
        try:
            kept = []
            for item in batch:
                why = self.poisoned.get(item.origin)
                if why is None:
                    kept.append(item)
                    continue
                self.stats.dead_lettered += 1
                yield Finished(item, POISONED, poisoned_result(why), item.meta.attempts)
            async for finished in self._attempt(kept):
                yield finished
        finally:
            stats.in_flight -= len(batch)

    async def _attempt(self, batch: list[Item]) -> AsyncIterator[Finished]:
        throttle, stats = self.throttle, self.stats
        if not batch:
            return
        await sleep_until(max(item.not_before_ms for item in batch))
        attempts = [item.meta.attempts + 1 for item in batch]
        while batch:
            await throttle.admit()  # refused while open: waits, costs no attempt
            delivery = BatchDelivery(
                self.sub, self.topic, tuple(i.msg for i in batch), tuple(attempts)
            )
            result = await self._send(delivery)
            throttle.record(result)
            if self.health is not None:
                self.health.record(result)
            stats.attempts += len(batch)
            latency_ms = round(result.latency_s * 1000, 1)
            for item, attempt in zip(batch, attempts, strict=True):
                self.audit.item(
                    AuditType.ATTEMPTED,
                    item,
                    attempt=attempt,
                    status=result.status,
                    error=result.error,
                    latency_ms=latency_ms,
                    answer=result.answer,
                )
            again: list[Item] = []
            again_attempts: list[int] = []
            wait_ms = 0
            outcomes = _per_message(self.topic, batch, result)
            for item, attempt, outcome in zip(batch, attempts, outcomes, strict=True):
                with crash_names(item.origin):  # a failure here is this message's (.poison)
                    verdict = self._verdict(item, attempt, outcome)
                if isinstance(verdict, RetryInPlace):
                    again.append(item)
                    again_attempts.append(attempt)
                    wait_ms = max(wait_ms, verdict.wait_ms)
                else:
                    yield Finished(item, verdict, outcome, attempt)
            batch, attempts = again, again_attempts
            if batch:
                await asyncio.sleep(wait_ms / 1000)  # shorter than every level
                attempts = [a + 1 for a in attempts]

    def _verdict(self, item: Item, attempt: int, result: DeliveryResult) -> Verdict:
        """One message's verdict, counted (and audited when delivered)."""
        policy, stats = self.sub.retry, self.stats
        verdict = decide(policy, result, attempt)
        if verdict is DELIVERED:
            stats.delivered += 1
            stats.latency.observe(time.time() - accepted_s(item))
            self.audit.item(AuditType.DELIVERED, item, attempt=attempt, status=result.status)
            return verdict
        assert not isinstance(verdict, Delivered)
        count_failed(stats, verdict, result)
        return verdict

    async def _send(self, delivery: BatchDelivery) -> DeliveryResult:
        """One request; a sender that raises fails the batch as an unexpected error (retried
        by each message's policy), as :meth:`.attempt.Attempts._send` does."""
        started = time.perf_counter()
        try:
            with self.progress.on_the_wire():
                return await self.sender.send(delivery)
        except Exception as exc:
            log.exception("delivery of %s failed in the worker", delivery.message_id)
            return DeliveryResult.from_exception(exc, time.perf_counter() - started)


def _per_message(topic: str, batch: list[Item], result: DeliveryResult) -> list[DeliveryResult]:
    """Each message's result: the batch's, but for the messages a 2xx answer names failed.
    (A batch holds at most one message of a group, so no later message of a failed one's
    group was in it: the group waits behind it as after any failed attempt.)"""
    failed = result.failed_ids
    if not failed:
        return [result] * len(batch)
    named = DeliveryResult.reported_failed(result, "the batch's answer names this message failed")
    return [named if batch_message_id(topic, item.msg) in failed else result for item in batch]
