"""What one call to an endpoint came to, and which outcomes count as failures.

The library imports nothing of the rest of httpbus, so a call's outcome is described here by
the little a breaker needs: the HTTP status (None when no answer came), the endpoint's
``Retry-After`` and, for calls without an answer, whether it was a timeout or a connection
error. Which outcomes count as failures is a parameter: a :data:`FailureClassifier`.

Example::

    >>> is_failure(CallOutcome(status=503))
    True
    >>> is_failure(CallOutcome(status=429, retry_after_s=2.0))  # the endpoint paces us: healthy
    False
    >>> is_failure(CallOutcome(error=CallError.TIMEOUT))
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class CallError(StrEnum):
    """Why a call got no answer."""

    TIMEOUT = "timeout"
    CONNECTION = "connection"


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One call: ``status`` is the HTTP status, or None with ``error`` set when none came."""

    status: int | None = None
    retry_after_s: float | None = None
    error: CallError | None = None


FailureClassifier = Callable[[CallOutcome], bool]


def is_failure(outcome: CallOutcome) -> bool:
    """The default classifier: 5xx, timeouts, connection errors, and 429 without
    ``Retry-After`` (a 429 that says when to come back is pacing, which the caller honours,
    not a sick endpoint). Other 4xx are the message's fault, not the endpoint's."""
    if outcome.status is None:
        return outcome.error is not None
    if outcome.status == 429:
        return outcome.retry_after_s is None
    return outcome.status >= 500
