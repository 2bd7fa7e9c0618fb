"""Retry schedules: how long to wait before attempt ``n + 1`` of a delivery.

``fixed``: the initial delay every time; ``linear``: ``initial * n``; ``exponential``:
``initial * multiplier ** (n - 1)``; all capped at ``max_delay_ms``, then spread by up to
``± jitter`` of the delay so that many failed messages do not come back at once. An
endpoint's ``Retry-After`` replaces the schedule (capped the same way).
"""

from __future__ import annotations

import random

from .model import RetryPolicy


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
