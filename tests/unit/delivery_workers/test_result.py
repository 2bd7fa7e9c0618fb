"""How one attempt's answer (or its absence) becomes a DeliveryResult."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from delivery_workers.result import (
    MAX_RETRY_AFTER_S,
    DeliveryResult,
    Outcome,
    parse_retry_after,
)

NOW = 1_700_000_000.0


def _http_date(epoch: float) -> str:
    return format_datetime(datetime.fromtimestamp(epoch, UTC), usegmt=True)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    result = DeliveryResult.from_response(status, {}, 0.01)
    assert result.outcome is Outcome.DELIVERED
    assert result.succeeded and not result.retryable
    assert (result.status, result.error, result.retry_after, result.latency_s) == (
        status,
        None,
        None,
        0.01,
    )


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
def test_408_429_and_5xx_are_retryable(status: int) -> None:
    result = DeliveryResult.from_response(status, {}, 0.5)
    assert result.retryable and not result.succeeded
    assert result.status == status
    assert result.error == f"HTTP {status}"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 413, 422, 451])
def test_other_4xx_are_rejected_unless_the_policy_retries_them(status: int) -> None:
    assert DeliveryResult.from_response(status, {}, 0.1).outcome is Outcome.REJECTED
    retried = DeliveryResult.from_response(status, {"Retry-After": "7"}, 0.1, retry_4xx=True)
    assert retried.outcome is Outcome.RETRYABLE
    assert retried.retry_after == 7


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308])
def test_3xx_is_rejected_and_names_the_location(status: int) -> None:
    result = DeliveryResult.from_response(status, {"Location": "https://elsewhere/x"}, 0.1)
    assert result.outcome is Outcome.REJECTED
    assert result.error is not None
    assert "not followed" in result.error and "https://elsewhere/x" in result.error


@pytest.mark.parametrize("status", [100, 199, 600, 999])
def test_statuses_outside_the_known_classes_are_rejected(status: int) -> None:
    assert DeliveryResult.from_response(status, {}, 0.1).outcome is Outcome.REJECTED


def test_the_error_shows_the_start_of_the_response_body() -> None:
    body = b'{"error":  "bad\n  signature"}' + b"x" * 10_000
    result = DeliveryResult.from_response(400, {}, 0.1, body=body)
    assert result.error is not None
    assert result.error.startswith('HTTP 400: {"error": "bad signature"}xxx')
    assert len(result.error) <= len("HTTP 400: ") + 200


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-4", 0.0),
        ("86400", MAX_RETRY_AFTER_S),
        (_http_date(NOW + 90), 90.0),
        (_http_date(NOW - 90), 0.0),
        (_http_date(NOW + 7 * 86400), MAX_RETRY_AFTER_S),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_is_read_in_any_case_and_only_when_retryable() -> None:
    headers = {"retry-after": _http_date(NOW + 30)}
    assert DeliveryResult.from_response(503, headers, 0.1, now=NOW).retry_after == 30
    assert DeliveryResult.from_response(429, {"RETRY-AFTER": "2"}, 0.1).retry_after == 2
    assert DeliveryResult.from_response(200, {"Retry-After": "2"}, 0.1).retry_after is None
    assert DeliveryResult.from_response(404, {"Retry-After": "2"}, 0.1).retry_after is None
    assert (
        DeliveryResult.from_response(503, httpx.Headers({"Retry-After": "5"}), 0.1).retry_after == 5
    )


@pytest.mark.parametrize(
    ("exc", "outcome", "words"),
    [
        (httpx.ReadTimeout("read"), Outcome.RETRYABLE, "timeout after 1500 ms (ReadTimeout)"),
        (httpx.ConnectTimeout("c"), Outcome.RETRYABLE, "timeout"),
        (httpx.PoolTimeout("p"), Outcome.RETRYABLE, "timeout"),
        (TimeoutError(), Outcome.RETRYABLE, "timeout after 1500 ms (TimeoutError)"),
        (httpx.ConnectError("refused"), Outcome.RETRYABLE, "connection error: ConnectError"),
        (httpx.RemoteProtocolError("eof"), Outcome.RETRYABLE, "connection error"),
        (httpx.ReadError("reset"), Outcome.RETRYABLE, "connection error"),
        (ConnectionResetError(104, "reset"), Outcome.RETRYABLE, "connection error"),
        (httpx.LocalProtocolError("bad header"), Outcome.REJECTED, "invalid request"),
        (httpx.UnsupportedProtocol("ftp"), Outcome.REJECTED, "invalid request"),
        (httpx.InvalidURL("bad"), Outcome.REJECTED, "invalid request"),
        (RuntimeError("who knows"), Outcome.RETRYABLE, "unexpected error: RuntimeError"),
    ],
)
def test_from_exception(exc: Exception, outcome: Outcome, words: str) -> None:
    result = DeliveryResult.from_exception(exc, 1.5)
    assert result.outcome is outcome
    assert result.status is None and result.retry_after is None
    assert result.error is not None and words in result.error
    assert result.latency_s == 1.5


def test_results_are_frozen_values() -> None:
    result = DeliveryResult.from_response(200, {}, 0.1)
    assert result == DeliveryResult(Outcome.DELIVERED, 200, latency_s=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = 500  # type: ignore[misc]
    assert DeliveryResult.rejected("bad secret").outcome is Outcome.REJECTED
