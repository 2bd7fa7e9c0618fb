"""Retry schedules: how long to wait before attempt ``n + 1`` of a delivery.

``fixed``: the initial delay every time; ``linear``: ``initial * n``; ``exponential``:
``initial * multiplier ** (n - 1)``; all capped at ``max_delay_ms``, then spread by up to
``± jitter`` of the delay so that many failed messages do not come back at once. An
endpoint's ``Retry-After`` replaces the schedule (capped the same way).

:func:`decide` is the one place that answers "is this attempt retried, and how?": every
caller (the worker's attempt, the circuit breaker's view aside) reads its verdict.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .model import RetryPolicy
from .result import DeliveryResult, ErrorKind


def delay_ms(
    policy: RetryPolicy,
    failed_attempts: int,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> int:
    """The wait after ``failed_attempts`` (>= 1) failed attempts."""
    if failed_attempts < 1:
        raise ValueError("failed_attempts counts from 1")
    if retry_after_s is not None:
        return min(int(retry_after_s * 1000), policy.max_delay_ms)
    if policy.backoff == "fixed":
        base = float(policy.initial_delay_ms)
    elif policy.backoff == "linear":
        base = float(policy.initial_delay_ms * failed_attempts)
    else:
        base = policy.initial_delay_ms * policy.multiplier ** min(failed_attempts - 1, 64)
    base = min(base, float(policy.max_delay_ms))
    spread = base * policy.jitter
    chosen = base + (rng or random).uniform(-spread, spread) if spread else base
    return max(0, min(int(chosen), policy.max_delay_ms))


def status_retries(policy: RetryPolicy, status: int) -> bool:
    """Whether an attempt answered with ``status`` (not 2xx) may be retried by ``policy``:
    the listed statuses (default 408, 429 and every 5xx), and any other 4xx when
    ``retry_4xx`` is set."""
    if policy.retry_statuses is None:
        listed = status in (408, 429) or 500 <= status <= 599
    else:
        listed = status in policy.retry_statuses
    return listed or (policy.retry_4xx and 400 <= status <= 499)


def level_for(levels: tuple[int, ...], wait_ms: int) -> int | None:
    """The delay level a message that must wait ``wait_ms`` goes to: the largest level not
    longer than the wait, or None when the wait is shorter than every level (it is then
    waited out in memory, with its source position still uncommitted)."""
    chosen = None
    for level in levels:
        if level <= wait_ms:
            chosen = level
    return chosen


@dataclass(frozen=True, slots=True)
class Delivered:
    """The endpoint took the message: it is terminal."""


@dataclass(frozen=True, slots=True)
class RetryInPlace:
    """Wait ``wait_ms`` (shorter than every delay level) in memory, then attempt again; the
    message keeps its delivery slot and its group waits behind it."""

    wait_ms: int


@dataclass(frozen=True, slots=True)
class ToLevel:
    """Wait ``wait_ms`` in the delay level ``level_ms`` (the largest not longer than the wait)."""

    wait_ms: int
    level_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Failed for good: refused by the policy, or out of attempts."""

    exhausted: bool  # True: it could have been retried, but the attempts are spent


Verdict = Delivered | RetryInPlace | ToLevel | DeadLetter
DELIVERED = Delivered()
_REFUSED = DeadLetter(exhausted=False)
_EXHAUSTED = DeadLetter(exhausted=True)


def retries(policy: RetryPolicy, result: DeliveryResult) -> bool:
    """Whether ``policy`` tries a failed ``result`` again, attempts aside: an answer by its
    status (:func:`status_retries`), a timeout if ``retry_timeouts``, a lost or refused
    connection, an answer that broke HTTP or its limits (or an unexpected error) if
    ``retry_connection_errors``; a request that cannot be sent as configured never; a
    message a batch's answer named failed always."""
    if result.status is not None:
        return status_retries(policy, result.status)
    kind = result.error_kind
    if kind is ErrorKind.TIMEOUT:
        return policy.retry_timeouts
    if kind is ErrorKind.REPORTED_FAILED:  # the endpoint asked for it again
        return True
    if kind is ErrorKind.INVALID_REQUEST:
        return False
    return policy.retry_connection_errors


def decide(
    policy: RetryPolicy,
    result: DeliveryResult,
    attempt: int,
    rng: random.Random | None = None,
) -> Verdict:
    """What becomes of a message whose attempt number ``attempt`` (from 1) came to
    ``result``: delivered; retried in place or through a delay level after the schedule's
    wait (or the endpoint's ``Retry-After``); or dead-lettered when the policy does not retry
    such a failure or ``max_attempts`` are spent."""
    if result.succeeded:
        return DELIVERED
    if not retries(policy, result):
        return _REFUSED
    if attempt >= policy.max_attempts:
        return _EXHAUSTED
    wait = delay_ms(policy, attempt, result.retry_after, rng)
    level = level_for(policy.delay_levels_ms, wait)
    if level is None:
        return RetryInPlace(wait)
    return ToLevel(wait, level)
