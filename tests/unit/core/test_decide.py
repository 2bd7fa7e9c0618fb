"""The one retry verdict: every status class and every error kind, with and without
``retry_statuses``, with attempts left or spent."""

from __future__ import annotations

import pytest

from core.model import RetryPolicy
from core.result import DeliveryResult, ErrorKind
from core.retry import (
    DELIVERED,
    DeadLetter,
    Delivered,
    RetryInPlace,
    ToLevel,
    decide,
    retries,
)

LEVELS = (1_000, 10_000)
DEFAULT = RetryPolicy(
    max_attempts=3, backoff="fixed", initial_delay_ms=100, jitter=0, delay_levels_ms=LEVELS
)
LISTED = DEFAULT.model_copy(update={"retry_statuses": (409, 503)})
RETRY_4XX = DEFAULT.model_copy(update={"retry_4xx": True})
NO_TIMEOUTS = DEFAULT.model_copy(update={"retry_timeouts": False})
NO_CONNECTION = DEFAULT.model_copy(update={"retry_connection_errors": False})

# status -> retried by DEFAULT, by LISTED (409 and 503 only), by RETRY_4XX
STATUSES = {
    100: (False, False, False),
    199: (False, False, False),
    301: (False, False, False),
    304: (False, False, False),
    400: (False, False, True),
    404: (False, False, True),
    408: (True, False, True),
    409: (False, True, True),
    429: (True, False, True),
    451: (False, False, True),
    500: (True, False, True),
    503: (True, True, True),
    599: (True, False, True),
    600: (False, False, False),
}


def _answer(status: int, retry_after: float | None = None) -> DeliveryResult:
    return DeliveryResult(status, retry_after=retry_after, error=f"HTTP {status}")


@pytest.mark.parametrize("status", [200, 201, 204, 299])
@pytest.mark.parametrize("policy", [DEFAULT, LISTED, RETRY_4XX])
@pytest.mark.parametrize("attempt", [1, 3, 99])
def test_2xx_is_delivered_whatever_the_policy(
    status: int, policy: RetryPolicy, attempt: int
) -> None:
    verdict = decide(policy, _answer(status), attempt)
    assert verdict is DELIVERED and isinstance(verdict, Delivered)


@pytest.mark.parametrize("status", sorted(STATUSES))
def test_every_status_class_with_and_without_retry_statuses(status: int) -> None:
    for policy, expected in zip((DEFAULT, LISTED, RETRY_4XX), STATUSES[status], strict=True):
        assert retries(policy, _answer(status)) is expected, (status, policy.retry_statuses)
        verdict = decide(policy, _answer(status), 1)
        if expected:
            assert verdict == RetryInPlace(100), (status, policy)
        else:
            assert verdict == DeadLetter(exhausted=False), (status, policy)


@pytest.mark.parametrize(
    ("kind", "default", "no_timeouts", "no_connection"),
    [
        (ErrorKind.TIMEOUT, True, False, True),
        (ErrorKind.CONNECTION, True, True, False),
        (ErrorKind.UNEXPECTED, True, True, False),
        (ErrorKind.INVALID_REQUEST, False, False, False),
    ],
)
def test_every_error_kind(
    kind: ErrorKind, default: bool, no_timeouts: bool, no_connection: bool
) -> None:
    result = DeliveryResult.failure(kind, "no answer")
    for policy, expected in ((DEFAULT, default), (NO_TIMEOUTS, no_timeouts)):
        assert retries(policy, result) is expected
    assert retries(NO_CONNECTION, result) is no_connection
    # retry_statuses speaks of answers only: it changes nothing for a failure without one
    assert retries(LISTED, result) is default
    expected_verdict = RetryInPlace(100) if default else DeadLetter(exhausted=False)
    assert decide(DEFAULT, result, 1) == expected_verdict


@pytest.mark.parametrize(
    "result",
    [_answer(503), _answer(429, 5.0), DeliveryResult.failure(ErrorKind.TIMEOUT, "t")],
)
def test_attempts_spent_is_a_dead_letter(result: DeliveryResult) -> None:
    assert decide(DEFAULT, result, 2) != DeadLetter(exhausted=True)
    assert decide(DEFAULT, result, 3) == DeadLetter(exhausted=True)
    assert decide(DEFAULT, result, 4) == DeadLetter(exhausted=True)
    assert decide(DEFAULT, _answer(404), 3) == DeadLetter(exhausted=False)  # refused first


def test_retry_after_is_honoured_and_picks_the_level() -> None:
    assert decide(DEFAULT, _answer(503, 0.5), 1) == RetryInPlace(500)
    assert decide(DEFAULT, _answer(503, 1.0), 1) == ToLevel(1_000, 1_000)
    assert decide(DEFAULT, _answer(429, 42.0), 1) == ToLevel(42_000, 10_000)
    # the policy decides, Retry-After only says how long: a 409 it lists waits as told
    assert decide(LISTED, _answer(409, 2.0), 1) == ToLevel(2_000, 1_000)
    capped = DEFAULT.model_copy(update={"max_delay_ms": 3_000})
    assert decide(capped, _answer(503, 3_600.0), 1) == ToLevel(3_000, 1_000)


def test_the_backoff_schedule_chooses_in_place_or_a_level() -> None:
    expo = DEFAULT.model_copy(
        update={"backoff": "exponential", "multiplier": 10.0, "max_attempts": 10}
    )
    failed = _answer(500)
    assert decide(expo, failed, 1) == RetryInPlace(100)
    assert decide(expo, failed, 2) == ToLevel(1_000, 1_000)
    assert decide(expo, failed, 3) == ToLevel(10_000, 10_000)
    assert decide(expo, failed, 4) == ToLevel(100_000, 10_000)
