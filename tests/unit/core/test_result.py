"""How one attempt's answer (or its absence) becomes a DeliveryResult."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from core.result import (
    MAX_RETRY_AFTER_S,
    DeliveryResult,
    ErrorKind,
    parse_retry_after,
)

NOW = 1_700_000_000.0


def _http_date(epoch: float) -> str:
    return format_datetime(datetime.fromtimestamp(epoch, UTC), usegmt=True)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    result = DeliveryResult.from_response(status, {}, 0.01)
    assert result.succeeded
    assert (result.status, result.error_kind, result.error, result.retry_after) == (
        status,
        None,
        None,
        None,
    )
    assert result.latency_s == 0.01


@pytest.mark.parametrize("status", [100, 199, 300, 400, 404, 408, 429, 500, 503, 599, 600, 999])
def test_any_other_status_is_a_failed_answer_with_facts_only(status: int) -> None:
    result = DeliveryResult.from_response(status, {"Retry-After": "7"}, 0.5)
    assert not result.succeeded
    assert result.status == status and result.error_kind is None
    assert result.error is not None and result.error.startswith(f"HTTP {status}")
    assert result.retry_after == 7  # a fact; whether it matters is core.retry.decide's call


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308])
def test_3xx_names_the_location(status: int) -> None:
    result = DeliveryResult.from_response(status, {"Location": "https://elsewhere/x"}, 0.1)
    assert not result.succeeded
    assert result.error is not None
    assert "not followed" in result.error and "https://elsewhere/x" in result.error


def test_the_error_shows_the_start_of_the_response_body() -> None:
    body = b'{"error":  "bad\n  signature"}' + b"x" * 10_000
    result = DeliveryResult.from_response(400, {}, 0.1, body=body)
    assert result.error is not None
    assert result.error.startswith('HTTP 400: {"error": "bad signature"}xxx')
    assert len(result.error) <= len("HTTP 400: ") + 200
    assert result.answer is not None and result.error == f"HTTP 400: {result.answer}"


def test_the_start_of_any_answer_is_kept_for_the_trace() -> None:
    delivered = DeliveryResult.from_response(200, {}, 0.1, body=b' {"ok":\n true} ')
    assert delivered.answer == '{"ok": true}' and delivered.error is None
    assert DeliveryResult.from_response(204, {}, 0.1).answer is None
    assert DeliveryResult.from_response(200, {}, 0.1, body=b" \n").answer is None


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


def test_retry_after_is_read_in_any_case_on_every_failed_answer() -> None:
    headers = {"retry-after": _http_date(NOW + 30)}
    assert DeliveryResult.from_response(503, headers, 0.1, now=NOW).retry_after == 30
    assert DeliveryResult.from_response(429, {"RETRY-AFTER": "2"}, 0.1).retry_after == 2
    assert DeliveryResult.from_response(200, {"Retry-After": "2"}, 0.1).retry_after is None
    assert DeliveryResult.from_response(404, {"Retry-After": "2"}, 0.1).retry_after == 2
    assert (
        DeliveryResult.from_response(503, httpx.Headers({"Retry-After": "5"}), 0.1).retry_after == 5
    )


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (TimeoutError(), ErrorKind.TIMEOUT, "timeout after 1500 ms (TimeoutError)"),
        (ConnectionRefusedError(111, "refused"), ErrorKind.CONNECTION, "connection error"),
        (ConnectionResetError(104, "reset"), ErrorKind.CONNECTION, "connection error"),
        (OSError("unreachable"), ErrorKind.CONNECTION, "connection error: OSError"),
        (RuntimeError("who knows"), ErrorKind.UNEXPECTED, "unexpected error: RuntimeError"),
    ],
)
def test_from_exception(exc: Exception, kind: ErrorKind, words: str) -> None:
    result = DeliveryResult.from_exception(exc, 1.5)
    assert result.error_kind is kind and not result.succeeded
    assert result.status is None and result.retry_after is None
    assert result.error is not None and words in result.error
    assert result.latency_s == 1.5


def test_results_are_frozen_values() -> None:
    result = DeliveryResult.from_response(200, {}, 0.1)
    assert result == DeliveryResult(200, latency_s=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = 500  # type: ignore[misc]
    assert DeliveryResult.invalid("bad secret").error_kind is ErrorKind.INVALID_REQUEST


def test_a_batch_answer_may_name_failed_messages() -> None:
    from core.model import RetryPolicy
    from core.result import failed_ids
    from core.retry import RetryInPlace, decide

    ok = DeliveryResult.from_response(200, {}, 0.1, body=b'{"failed": ["a", "b"]}', batch=True)
    assert ok.succeeded and ok.failed_ids == frozenset({"a", "b"})
    single = DeliveryResult.from_response(200, {}, 0.1, body=b'{"failed": ["a"]}')
    assert single.failed_ids is None  # only a batch's answer is read so
    for body in (b"", b"ok", b'{"failed": "a"}', b'{"failed": [1]}', b'["a"]', b'{"failed": ['):
        assert failed_ids(body) is None, body
    assert failed_ids(b' {"failed": []} ') == frozenset()
    one = DeliveryResult.reported_failed(ok, "named failed")
    assert not one.succeeded and one.error == "HTTP 200, named failed"
    # always retried, whatever the policy says of connection errors
    policy = RetryPolicy(max_attempts=2, retry_connection_errors=False, delay_levels_ms=(60_000,))
    assert isinstance(decide(policy, one, 1), RetryInPlace)
    assert not isinstance(decide(policy, one, 2), RetryInPlace)


@pytest.mark.parametrize("levels", [200, 5_000, 60_000])
def test_a_batch_answer_nested_too_deep_names_nothing_and_never_raises(levels: int) -> None:
    """``{"failed": [[[…`` raised RecursionError out of the parse, and the whole batch went
    to the DLQ; now it is an answer that names nothing: the batch is delivered."""
    from core.result import failed_ids

    body = b'{"failed": ' + b"[" * levels + b"]" * levels + b"}"
    assert failed_ids(body) is None
    answer = DeliveryResult.from_response(200, {}, 0.1, body=body[:65_536], batch=True)
    assert answer.succeeded and answer.failed_ids is None
    shallow = b'{"failed": ["a"], "why": ' + b"[" * 100 + b"]" * 100 + b"}"
    assert failed_ids(shallow) == frozenset({"a"})
