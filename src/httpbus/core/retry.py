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
