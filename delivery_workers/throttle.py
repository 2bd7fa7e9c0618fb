"""A subscription's circuit breaker and adaptive rate, as a few async hooks of its dispatch.

One :class:`Throttle` per **subscription**, not per endpoint host, because:

- the policy (thresholds, probe rate, floor, rate limit) is set per subscription, and so are
  the retry budget and the commit position it protects;
- a host is often a gateway in front of many services: one subscription's path failing (its
  database down) must not throttle another subscription's healthy path on the same host —
  tenants stay isolated, which is the point of the second subscription in the tests;
- the price: N subscriptions to one dead host probe it N times as often, still bounded by the
  sum of their probe rates.

The hooks (each a line where it is used):

- :meth:`gate` — the intake (:mod:`.intake`) and the dispatcher (:mod:`.dispatch`) wait
  here while the circuit is OPEN, so the worker **stops pulling** and starts no new delivery
  for a failing endpoint;
- :meth:`admit` — before *every* attempt (first or retry; :mod:`.attempt`): wait for a
  permit from the :class:`~circuit_breaker.Governor`. A message in hand therefore waits
  instead of spending attempts: an attempt the open circuit refuses is never sent, so never counted.
  Waiters are served first come, first served (``asyncio.Lock`` is fair), so the rare probes
  of an open circuit go round the messages in hand rather than to the same few;
- :meth:`record` — after every attempt: feed the outcome to the governor; a change of state
  is logged, audited (``AuditType.CIRCUIT``) and shown in ``stats.circuit_state`` and
  ``stats.circuit_rate``;
- :meth:`sidelined` — the dispatch, when a head failed for good at the endpoint (a failure
  for the breaker: not a 4xx, not a message the worker itself fails on) and its group's
  queued and held messages follow it into the DLQ unattempted: each counts as a failed call
  of the breaker's window (:meth:`circuit_breaker.Governor.record_unattempted`). Without it a
  grouped subscription whose endpoint fails everything sees only its heads' few attempts,
  fewer than ``min_calls`` in a window, and its circuit stays closed while the DLQ fills
  (issue 39).

A subscription with the breaker disabled gets a throttle whose hooks do nothing.

Example::

    throttle = Throttle.for_subscription(sub, runner.stats, audit)
    await throttle.admit()
    result = await sender.send(delivery)
    throttle.record(result)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from circuit_breaker import (
    BreakerConfig,
    CallError,
    CallOutcome,
    CircuitState,
    Governor,
    GovernorConfig,
    Transition,
)
from core.audit import AuditEvent, AuditType
from core.model import Subscription
from core.result import DeliveryResult, ErrorKind
from core.shards import WHOLE, Shard
from segments.audit import AuditSink

log = logging.getLogger(__name__)
# Stands for "no rate limit" as the adaptive rate's ceiling: far above what one worker
# delivers, so unthrottled is unthrottled; the limiter decreases from the observed rate.
UNLIMITED_PER_S = 100_000.0
MAX_SLEEP_S = 0.5  # re-read the state at least this often while waiting


class CircuitStats(Protocol):
    circuit_state: str | None
    circuit_rate: float | None


def governor_config(sub: Subscription) -> GovernorConfig:
    """The governor settings of a subscription's :class:`CircuitBreakerPolicy`."""
    p = sub.circuit_breaker
    ceiling = sub.rate_limit_per_second or UNLIMITED_PER_S
    # The policy refuses probe > floor > rate limit; clamping still keeps a subscription
    # stored before that check runnable.
    floor = min(p.floor_per_second, ceiling)
    breaker = BreakerConfig(
        failure_rate_threshold=p.failure_rate_threshold,
        window_s=p.window_seconds,
        min_calls=p.min_calls,
        cooldown_s=p.cooldown_seconds,
        probe_per_s=min(p.probe_per_second, floor),
    )
    return GovernorConfig(breaker, floor_per_s=floor, max_per_s=ceiling)


def call_outcome(result: DeliveryResult) -> CallOutcome | None:
    """The library's view of an attempt; None for one refused before it was sent (a bad
    URL, say), which says nothing about the endpoint's health."""
    if result.status is not None:
        return CallOutcome(result.status, result.retry_after)
    if result.error_kind in (ErrorKind.INVALID_REQUEST, ErrorKind.REPORTED_FAILED):
        return None  # the second: one message of a batch the endpoint answered 2xx
    timed_out = result.error_kind is ErrorKind.TIMEOUT
    return CallOutcome(error=CallError.TIMEOUT if timed_out else CallError.CONNECTION)


class Throttle:
    """See the module doc. ``governor`` None: the breaker is disabled."""

    def __init__(
        self,
        governor: Governor | None,
        stats: CircuitStats,
        on_transition: Callable[[Transition], None] = lambda change: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.governor = governor
        self.stats = stats
        self.on_transition = on_transition
        self.clock = clock
        self._turn = asyncio.Lock()
        self._refresh()

    @classmethod
    def for_subscription(
        cls,
        sub: Subscription,
        stats: CircuitStats,
        audit: AuditSink | None = None,
        shard: Shard = WHOLE,
    ) -> Throttle:
        """The throttle of ``sub`` (of its slice ``shard``: each shard has its own circuit,
        and its audited transitions name the shard)."""
        if not sub.circuit_breaker.enabled:
            return cls(None, stats)
        key = f"{sub.project}/{sub.name}"

        def on_transition(change: Transition) -> None:
            log.warning(
                "subscription %s: circuit %s -> %s (%s)",
                key,
                change.from_state,
                change.to_state,
                change.reason,
            )
            if audit is not None:
                audit.emit(_audit_event(sub, change, shard))

        return cls(Governor(governor_config(sub), time.monotonic()), stats, on_transition)

    @property
    def is_open(self) -> bool:
        if self.governor is None:
            return False
        self._emit(self.governor.poll(self.clock()))
        return self.governor.state is CircuitState.OPEN

    async def gate(self) -> None:
        """Return once the circuit is not OPEN (at once when it is not)."""
        while self.is_open:
            await asyncio.sleep(MAX_SLEEP_S)

    async def admit(self) -> None:
        """Wait for the governor's permit for one attempt (first come, first served)."""
        if self.governor is None:
            return
        now = self.clock()
        if not self._turn.locked() and self.governor.permit(now) <= 0:
            self._emit(self.governor.poll(now))  # nobody waits and a permit is free: no lock
            return
        async with self._turn:
            while (wait := self.governor.permit(self.clock())) > 0:
                self._emit(self.governor.poll(self.clock()))
                await asyncio.sleep(min(wait, MAX_SLEEP_S))
        self._emit(self.governor.poll(self.clock()))

    def record(self, result: DeliveryResult) -> None:
        outcome = call_outcome(result)
        if self.governor is not None and outcome is not None:
            self._emit(self.governor.record(outcome, self.clock()))

    def sidelined(self, count: int, head: DeliveryResult) -> None:
        """``count`` messages went to the DLQ unattempted behind a head that failed for good
        with ``head``: failures of the breaker when ``head`` is one (a 4xx head is the
        message's fault, not the endpoint's, and so is the queue sidelined behind it)."""
        outcome = call_outcome(head)
        governor = self.governor
        if governor is None or count < 1 or outcome is None or not governor.classifier(outcome):
            return
        self._emit(governor.record_unattempted(count, self.clock()))

    def _emit(self, changes: tuple[Transition, ...]) -> None:
        for change in changes:
            self.on_transition(change)
        if changes:
            self._refresh()
        elif self.governor is not None and self.governor.state is CircuitState.CLOSED:
            self.stats.circuit_rate = self.governor.limiter.rate  # cheap: no snapshot

    def _refresh(self) -> None:
        if self.governor is None:
            self.stats.circuit_state = self.stats.circuit_rate = None
            return
        snap = self.governor.snapshot(self.clock())
        self.stats.circuit_state, self.stats.circuit_rate = snap.state.value, snap.rate_per_s


def _audit_event(sub: Subscription, change: Transition, shard: Shard) -> AuditEvent:
    return AuditEvent(
        type=AuditType.CIRCUIT,
        message_id="",
        project=sub.topic_project,
        topic=sub.topic,
        subscription=f"{sub.project}/{sub.name}",
        at_ms=int(time.time() * 1000),
        circuit_from=change.from_state.value,
        circuit_to=change.to_state.value,
        reason=change.reason,
        failure_rate=round(change.failure_rate, 4),
        shard=shard.label,
    )
