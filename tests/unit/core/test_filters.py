"""The filter language: what each operator answers, what is refused at compile time and where,
and that evaluating never raises (a missing header is an ERROR outcome, counted apart)."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from core import filters
from core.errors import ErrorCode
from core.filters import (
    MATCH_ALL,
    FilterError,
    FilterOutcome,
    FilterPosition,
    compile_filter,
    header_map,
)
from core.model import SubscriptionSettings

MATCH, NO_MATCH, ERROR = FilterOutcome.MATCH, FilterOutcome.NO_MATCH, FilterOutcome.ERROR
HEADERS = (
    ("x-message-id", b"01HZX5V0000000000000000000"),
    ("x-produced-at", b"1700000000000"),
    ("x-group-id", b"g2"),
    ("content-type", b"application/json"),
    ("x-region", b"eu-west"),
    ("x-kind", b"order"),
)


def run(
    expression: str,
    headers: Sequence[tuple[str, bytes]] = HEADERS,
    group: str | None = "g2",
    topic: str = "shop/orders",
    content_type: str | None = "application/json",
) -> FilterOutcome:
    found = compile_filter(expression).matches(
        headers, group=group, topic=topic, content_type=content_type
    )
    return found.outcome


def refused(expression: str) -> FilterError:
    with pytest.raises(FilterError) as caught:
        compile_filter(expression)
    return caught.value


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('headers["x-region"] == "eu-west"', MATCH),
        ('headers["x-region"] == "eu"', NO_MATCH),
        ('headers["x-region"] != "eu"', MATCH),
        ('headers["x-region"] != "eu-west"', NO_MATCH),
        ('headers["x-region"] in ["eu-west", "us"]', MATCH),
        ('headers["x-region"] in ["eu", "us"]', NO_MATCH),
        ('"x-kind" in headers', MATCH),
        ('"x-priority" in headers', NO_MATCH),
        ('headers["x-region"].startsWith("eu-")', MATCH),
        ('headers["x-region"].startsWith("us-")', NO_MATCH),
        ('headers["x-region"].endsWith("-west")', MATCH),
        ('headers["x-region"].endsWith("-east")', NO_MATCH),
        ('headers["x-region"].contains("u-w")', MATCH),
        ('headers["x-region"].contains("east")', NO_MATCH),
        ('headers["x-region"].matches("^eu-(west|east)$")', MATCH),
        ('headers["x-group-id"] == group && group == "g2"', MATCH),
        ('group == "g1" || content_type == "text/plain"', NO_MATCH),
        ('!(group == "g1") && content_type == "application/json"', MATCH),
        ('topic == "shop/orders" || headers["x-kind"] != "test"', MATCH),
        ('topic == "shop/refunds" || headers["x-kind"] == "test"', NO_MATCH),
        ('headers.exists(name, name.startsWith("x-k"))', MATCH),
        ('int(headers["x-produced-at"]) > 1600000000000', MATCH),
    ],
)
def test_each_operator(expression: str, expected: FilterOutcome) -> None:
    assert run(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('group == "g2" || group == "g1" && topic == "x/y"', MATCH),  # && binds tighter
        ('(group == "g2" || group == "g1") && topic == "x/y"', NO_MATCH),
        ('!(group == "g1" && topic == "shop/orders")', MATCH),
        ('!(group == "g2") && topic == "shop/orders"', NO_MATCH),  # ! binds to its operand
        ('!(group == "g2" && topic == "shop/orders")', NO_MATCH),
        ('((((group == "g2"))))', MATCH),
    ],
)
def test_precedence_and_parentheses(expression: str, expected: FilterOutcome) -> None:
    assert run(expression) is expected


def test_absent_group_and_content_type_are_empty_strings() -> None:
    assert run('group == "" && content_type == ""', group=None, content_type=None) is MATCH
    assert run('group == ""', group="g1") is NO_MATCH


def test_a_missing_header_is_an_error_outcome_not_an_exception() -> None:
    result = compile_filter('headers["x-priority"] == "high"').matches(
        HEADERS, group=None, topic="shop/orders", content_type=None
    )
    assert result.outcome is ERROR and not result.matched
    assert result.error is not None and "x-priority" in result.error
    # Guarded, or decided by the other side of || / &&, it is no error.
    assert run('"x-priority" in headers && headers["x-priority"] == "high"') is NO_MATCH
    assert run('!("x-priority" in headers) || headers["x-priority"] == "high"') is MATCH
    assert run('headers["x-priority"] == "high" || group == "g2"') is MATCH
    assert run('headers["x-priority"] == "high" && group == "g1"') is NO_MATCH
    assert run('headers["x-priority"] == "high" || group == "g1"') is ERROR
    assert run('int(headers["x-kind"]) > 3') is ERROR  # not a number: an error too


def test_header_bytes_are_decoded_with_replacement_and_repeats_joined() -> None:
    headers = [("x-raw", b"caf\xc3\xa9 \xff!"), ("x-tag", b"a"), ("x-tag", b"b")]
    assert header_map(headers) == {"x-raw": "café \ufffd!", "x-tag": "a, b"}
    assert run('headers["x-raw"] == "café \\uFFFD!"', headers) is MATCH
    assert run('headers["x-raw"].startsWith("café")', headers) is MATCH
    assert run('headers["x-tag"] == "a, b"', headers) is MATCH
    assert run('size(headers["x-raw"]) == 7', headers) is MATCH  # code points, not bytes


def test_every_example_of_the_issue_compiles() -> None:
    for expression in (
        'headers["x-region"] == "eu"',
        'headers["x-region"] in ["eu", "us"]',
        '"x-priority" in headers',
        'headers["x-region"].startsWith("eu-")',
        'headers["x-region"].endsWith("-1")',
        'headers["x-region"].contains("u")',
        '!(group == "g1") && content_type == "application/json"',
        'topic == "shop/orders" || headers["x-kind"] != "test"',
    ):
        assert compile_filter(expression).expression == expression


@pytest.mark.parametrize(
    ("expression", "line", "column", "words"),
    [
        ('headers["x-region"] ==', 1, 23, "syntax error"),
        ('group == "a" &&& true', 1, 16, "syntax error"),
        ('group == "a"\n  && (topic == ', 2, 16, "syntax error"),
        ('"é" == "é" && nope == "x"', 1, 15, "unknown name 'nope'"),
        ('headers["x"] == 1', 1, 14, "'==' applied to '(string, int)'"),
        ("group.startsWith(1)", 1, 17, "startsWith"),
        ('topic == "a"\n || size(headers) + "1" == 2', 2, 19, "'+'"),
        ('topic.split("/")[0] == "shop"', 1, 12, "unknown name 'split'"),
        ('headers["x-region"]', 1, 1, "gives string"),
        ("dyn(group)", 1, 1, "gives dyn"),
        ('headers["X-Region"] == "eu"', 1, 9, 'write "x-region"'),
        ('topic == "a" || "X-Kind" in headers', 1, 17, 'write "x-kind"'),
        ('headers.all(a, ["x"].exists(b, a == b))', 1, 22, "comprehension"),
    ],
)
def test_refused_with_the_position(expression: str, line: int, column: int, words: str) -> None:
    error = refused(expression)
    assert error.position == FilterPosition.at(expression, line, column)
    assert error.position is not None
    assert expression[error.position.offset - (column - 1) :].startswith(
        expression.split("\n")[line - 1]
    )
    assert words in error.problem
    assert error.message.startswith(f"line {line}, column {column}: ")
    assert error.code is ErrorCode.VALIDATION_FAILED
    assert error.details == {"fields": [{"field": "filter", "problem": error.message}]}


def test_position_offsets() -> None:
    text = "ab\ncde\nf"
    assert FilterPosition.at(text, 2, 2) == FilterPosition(2, 2, 4)
    assert FilterPosition.at_offset(text, 4) == FilterPosition(2, 2, 4)
    assert FilterPosition.at_offset(text, 0) == FilterPosition(1, 1, 0)
    assert str(FilterPosition(3, 7, 20)) == "line 3, column 7"


def test_upper_case_in_literals_comments_and_values_is_fine() -> None:
    assert run('headers["x-kind"] == "ORDER"') is NO_MATCH
    assert run('topic == "headers[\'X\']" || true // "X" in headers') is MATCH
    assert run('b"X" in [b"X"]') is MATCH


def test_comprehensions_one_level_and_chained_are_allowed() -> None:
    assert run('headers.filter(k, k.startsWith("x-")).exists(k, k == "x-kind")') is MATCH
    assert run('headers.exists(k, k == "x-kind") && [1, 2].all(n, n > 0)') is MATCH
    assert run('["(", ")"].exists(s, s == "(")') is MATCH  # parentheses in strings do not count


def test_the_iteration_budget_gives_an_error_outcome() -> None:
    many = [(f"x-h{i}", b"v") for i in range(10_001)]
    assert run('headers.exists(k, k == "x-none")', many) is ERROR
    assert run('headers.exists(k, k == "x-h1")', many[:50]) is MATCH


def test_too_deep_and_too_long() -> None:
    deep = refused("(" * 40 + "true" + ")" * 40)
    assert deep.position is None and "nests too deeply" in deep.problem
    assert "nests too deeply" in refused(" + ".join(["1"] * 40) + " > 0").problem
    long = refused('group == "' + "a" * 5_000 + '"')
    assert long.position is None and "at most 4096" in long.problem


def test_none_or_blank_matches_everything() -> None:
    assert compile_filter(None) is MATCH_ALL and compile_filter(" \n") is MATCH_ALL
    assert MATCH_ALL.expression == ""
    result = MATCH_ALL.matches((), group=None, topic="p/t", content_type=None)
    assert result.matched and result.outcome is MATCH


def _oracle(headers: dict[str, bytes], group: str | None, content_type: str | None) -> bool:
    region = headers.get("x-region")
    return (region is not None and region.startswith(b"eu")) or (
        group == "g1" and content_type != "text/plain"
    )


EXPRESSION = (
    '("x-region" in headers && headers["x-region"].startsWith("eu")) '
    '|| (group == "g1" && content_type != "text/plain")'
)


def _messages(seed: int, count: int) -> list[tuple[dict[str, bytes], str | None, str | None]]:
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        headers = {"x-kind": rng.choice([b"a", b"b"])}
        region = rng.choice([None, b"eu", b"eu-west", b"us", b"\xffeu"])
        if region is not None:
            headers["x-region"] = region
        found.append((headers, rng.choice([None, "g1", "g2"]), rng.choice([None, "text/plain"])))
    return found


def test_compiled_once_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    env = filters._env()
    compiled: list[str] = []

    class Counting:
        def compile(self, expression: str) -> object:
            compiled.append(expression)
            return env.compile(expression)

    filters._compile.cache_clear()
    monkeypatch.setattr(filters, "_env", Counting)
    first = compile_filter(EXPRESSION)
    assert compile_filter(EXPRESSION) is first
    for headers, group, content_type in _messages(seed=7, count=2_000):
        got = first.matches(
            list(headers.items()), group=group, topic="p/t", content_type=content_type
        )
        assert got.matched is _oracle(headers, group, content_type)
    assert compiled == [EXPRESSION]
    filters._compile.cache_clear()


def test_one_filter_shared_by_threads() -> None:
    shared = compile_filter(EXPRESSION)
    wrong: list[object] = []

    def work(seed: int) -> None:
        for headers, group, content_type in _messages(seed, 500):
            got = shared.matches(
                list(headers.items()), group=group, topic="p/t", content_type=content_type
            )
            if got.matched is not _oracle(headers, group, content_type):
                wrong.append((headers, group, content_type))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not wrong


def test_subscription_settings_refuse_an_invalid_filter() -> None:
    endpoint = {"url": "http://127.0.0.1:9/hook"}
    ok = SubscriptionSettings.model_validate({"endpoint": endpoint, "filter": '"x-a" in headers'})
    assert ok.filter == '"x-a" in headers'
    with pytest.raises(ValidationError) as caught:
        SubscriptionSettings.model_validate({"endpoint": endpoint, "filter": "group =="})
    [error] = caught.value.errors()
    assert error["loc"] == ("filter",) and "line 1, column 9: syntax error" in error["msg"]
