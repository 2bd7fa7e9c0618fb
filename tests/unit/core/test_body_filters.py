"""Filters over the JSON body (core/filters.py): fields, nesting, absent fields, payloads that
are not a JSON object, the size and depth bounds, and validation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.filters import (
    MAX_BODY_BYTES,
    MAX_BODY_DEPTH,
    FilterOutcome,
    compile_filter,
    parse_body,
)
from core.model import SubscriptionSettings

MATCH, NO_MATCH, ERROR = FilterOutcome.MATCH, FilterOutcome.NO_MATCH, FilterOutcome.ERROR
ORDER = {"region": "eu", "amount": 150, "customer": {"vip": True, "tags": ["a", "b"]}, "n": None}


def outcome(expression: str, payload: bytes | object) -> FilterOutcome:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    found = compile_filter(expression).matches(
        (), group=None, topic="shop/orders", content_type=None, body=parse_body(raw)
    )
    return found.outcome


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('body.region == "eu" && body.amount > 100', MATCH),
        ('body.region == "eu" && body.amount > 200', NO_MATCH),
        ("body.amount > 100.5", MATCH),  # an int compares with a double
        ("has(body.customer.vip)", MATCH),
        ("has(body.customer) && has(body.customer.gold)", NO_MATCH),
        ("body.customer.vip == true", MATCH),
        ('"b" in body.customer.tags && size(body.customer.tags) == 2', MATCH),
        ('body["region"] == "eu"', MATCH),
        ("body.n == null", MATCH),
        ('body.customer.tags.exists(t, t == "a")', MATCH),
        ('body.country == "fr"', ERROR),  # an absent field, as an absent header
        ("has(body.missing.vip)", ERROR),  # has() of a field of an absent field
        ('!has(body.country) || body.country == "fr"', MATCH),
    ],
)
def test_fields_nesting_and_absent_fields(expression: str, expected: FilterOutcome) -> None:
    assert outcome(expression, ORDER) is expected


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"region=eu", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"a": NaN}', "not JSON"),
        (b"[1, 2]", "a JSON list"),
        (b'"eu"', "a JSON str"),
        (b"", "not JSON"),
        (b'{"a": ' + b"[" * MAX_BODY_DEPTH + b"]" * MAX_BODY_DEPTH + b"}", "nests deeper"),
        (b"[" * 150_000 + b"]" * 150_000, "bytes, a filter parses at most"),
        (b"[" * 60_000 + b"]" * 60_000, "nests deeper"),
        (b'{"a": "' + b"x" * MAX_BODY_BYTES + b'"}', "bytes, a filter parses at most"),
    ],
)
def test_a_payload_that_is_not_a_bounded_json_object_is_an_error_with_its_reason(
    payload: bytes, reason: str
) -> None:
    body = parse_body(payload)
    assert body.value is None and body.refusal is not None and reason in body.refusal
    # Whatever the other branch says: a filter that names body sees JSON objects only.
    found = compile_filter('group == "" || body.a == 1').matches(
        (), group=None, topic="p/t", content_type=None, body=body
    )
    assert found.outcome is ERROR and found.error == body.refusal


def test_the_bounds_let_what_they_promise_through() -> None:
    deepest = b'{"a": ' + b"[" * (MAX_BODY_DEPTH - 1) + b"]" * (MAX_BODY_DEPTH - 1) + b"}"
    assert parse_body(deepest).value is not None
    padding = MAX_BODY_BYTES - len(b'{"a": ""}')
    assert parse_body(b'{"a": "' + b"x" * padding + b'"}').value is not None


def test_integers_past_64_bits_become_doubles() -> None:
    body = parse_body(b'{"big": 100000000000000000000000, "list": [-100000000000000000000000]}')
    assert body.value == {"big": 1e23, "list": [-1e23]}
    assert outcome("body.big > 1.0e22 && body.list[0] < 0.0", body.value) is MATCH


def test_only_a_filter_that_names_body_reads_it() -> None:
    assert compile_filter('body.region == "eu"').reads_body
    assert compile_filter('has(body.x) && group == ""').reads_body
    assert not compile_filter('headers["x-body"] == "body" // body').reads_body
    assert not compile_filter('"x-kind" in headers').reads_body
    # Not named: no body is needed, none is parsed, the filter answers from the headers.
    found = compile_filter('"x-kind" in headers').matches(
        [("x-kind", b"a")], group=None, topic="p/t", content_type=None
    )
    assert found.outcome is MATCH


def test_a_body_field_must_be_compared_to_give_a_bool() -> None:
    endpoint = {"url": "http://127.0.0.1:9/hook"}
    ok = SubscriptionSettings.model_validate(
        {"endpoint": endpoint, "filter": 'body.region == "eu" && body.amount > 100'}
    )
    assert ok.filter is not None
    for bad, words in [("body.vip", "gives dyn"), ('body.region == "eu" &&', "syntax error")]:
        with pytest.raises(ValidationError) as caught:
            SubscriptionSettings.model_validate({"endpoint": endpoint, "filter": bad})
        [error] = caught.value.errors()
        assert error["loc"] == ("filter",) and words in error["msg"]
