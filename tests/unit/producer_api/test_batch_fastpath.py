"""The fast batch path answers exactly as the pydantic model path it replaces.

``batch_drafts`` decodes the common shape without a model per message, ``BatchParser``
validates each distinct header set once, ``produce_many`` answers in raw ASGI: each is
checked against the slow path it stands for, on good and bad input alike.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from core import http_errors
from core.errors import HttpbusError, Malformed, TooLarge
from producer_api import fastpath, headers
from producer_api.fastpath import Batch, batch_drafts
from producer_api.publish import Accepted, Draft
from tests.support.producer import ADMIN, producer_env


def _model_path(body: bytes) -> list[Draft] | HttpbusError:
    """What the batch route did before the fast path: a model per message."""
    try:
        batch = Batch.model_validate_json(body)
    except ValidationError as exc:
        return http_errors.from_validation(exc.errors())
    try:
        return [m.draft() for m in batch.messages]
    except HttpbusError as exc:
        return exc


def _fast_path(body: bytes) -> list[Draft] | HttpbusError:
    try:
        return batch_drafts(body)
    except HttpbusError as exc:
        return exc


def _messages(*messages: Any) -> bytes:
    return json.dumps({"messages": list(messages)}).encode()


COMMON = [
    _messages({"payload": "a"}),
    _messages({"payload": "a" * 1024}, {"payload": "é ☃ 😀"}, {"payload": ""}),
    _messages({"payload_base64": base64.b64encode(b"\x00\xff").decode()}, {"payload_base64": ""}),
    _messages(
        {"payload": "x", "content_type": "text/plain", "headers": {"X-Group-Id": "g", "X-A": "1"}},
        {"payload": "y", "payload_base64": None, "content_type": None, "headers": {}},
    ),
    b'{"messages": [{"payload": "a", "payload": "b", "headers": {"X-A": "1", "x-a": "2"}}]}',
    b'  {"messages":[{"payload":"\\u00e9\\ud83d\\ude00"}]}\n',
    _messages(*[{"payload": str(i)} for i in range(1000)]),
]

UNUSUAL = [
    b"",
    b"{",
    b'{"messages": [',
    b"[]",
    b"null",
    b'{"messages": null}',
    b'{"messages": {}}',
    b'{"messages": []}',
    _messages(*[{"payload": "a"}] * 1001),
    b'{"messages": [{"payload": "a"}], "extra": 1}',
    b'{"messages": [{"payload": "a"}], "messages": []}',
    b'\xef\xbb\xbf{"messages": [{"payload": "a"}]}',
    b'{"messages": [{"payload": "a\xff"}]}',
    b'{"messages": [{"payload": "\\ud800"}]}',
    b'{"messages": [{"payload": "a", "headers": {"X-A": "\\udfff"}}]}',
    b'{"messages": [{"payload": NaN}]}',
    _messages("a"),
    _messages(None),
    _messages([]),
    _messages({}),
    _messages({"payload": "a", "payload_base64": "YQ=="}),
    _messages({"payload": None, "payload_base64": None}),
    _messages({"payload": 1}),
    _messages({"payload": True}),
    _messages({"payload": ["a"]}),
    _messages({"payload_base64": 5}),
    _messages({"payload": "a", "extra": 1}),
    _messages({"payload": "a", "headers": None}),
    _messages({"payload": "a", "headers": []}),
    _messages({"payload": "a", "headers": {"X-A": 1}}),
    _messages({"payload": "a", "headers": {"X-A": None}}),
    _messages({"payload": "a", "content_type": 3}),
    _messages({"payload": "ok"}, {"payload_base64": "not base64!"}, {"payload": 2}),
    _messages({"payload": "ok"}, {"payload_base64": "not base64!"}),
    _messages({"payload_base64": "YQ="}),
    _messages({"payload_base64": "é"}),
]


def _same(fast: list[Draft] | HttpbusError, slow: list[Draft] | HttpbusError) -> None:
    if isinstance(slow, HttpbusError):
        assert isinstance(fast, HttpbusError), fast
        assert (type(fast), fast.to_body()) == (type(slow), slow.to_body())
    else:
        assert fast == slow


@pytest.mark.parametrize("body", COMMON + UNUSUAL)
def test_decoding_matches_the_model(body: bytes) -> None:
    try:
        slow = _model_path(body)
    except ValueError:  # a non-ASCII payload_base64: the model path fails unhandled too
        with pytest.raises(ValueError):
            batch_drafts(body)
        return
    _same(_fast_path(body), slow)


@pytest.mark.parametrize("body", COMMON)
def test_common_batches_skip_the_model(body: bytes) -> None:
    assert fastpath._common_drafts(body) == _model_path(body)


@pytest.mark.parametrize("body", UNUSUAL)
def test_unusual_batches_are_left_to_the_model(body: bytes) -> None:
    assert fastpath._common_drafts(body) is None


def test_the_answer_is_the_json_of_before() -> None:
    results: list[Accepted | HttpbusError] = [
        Accepted("01JD3ZK6Q7M2X9C4V8B1N5R0TT", 1, 2, 3),
        Malformed("no", details={"fields": [{"field": "x", "problem": "y"}]}),
        TooLarge("big"),
    ]
    old = [
        {
            "index": 0,
            "status": 201,
            "message_id": "01JD3ZK6Q7M2X9C4V8B1N5R0TT",
            "segment": 1,
            "partition": 2,
            "position": 3,
        },
        {"index": 1, "status": 400, **results[1].to_body()},  # type: ignore[union-attr]
        {"index": 2, "status": 413, **results[2].to_body()},  # type: ignore[union-attr]
    ]
    body = {"accepted": 1, "failed": 2, "results": old}
    status, accepted, answer = fastpath._batch_body(results)
    assert (status, accepted, json.loads(answer)) == (207, 1, body)
    assert fastpath._batch_body(results[:1])[:2] == (200, 1)


HEADER_SETS: list[list[tuple[str, str]]] = [
    [],
    [("x-message-id", "m-1")],
    [("x-group-id", "g1"), ("x-a", "1"), ("x-forwarded-for", "h"), ("accept", "x")],
    [("x-delay-ms", "500")],
    [("x-deliver-at", "2026-01-02T03:04:05Z")],
    [("x-deliver-at", "2026-01-02T03:04:05")],
    [("x-deliver-at", "1"), ("x-delay-ms", "1")],
    [("x-message-id", "bad id")],
    [("x-group-id", "g/1")],
    [("x-b", "1"), ("x-c", "2"), ("x-d", "3")],
]


RULES = headers.HeaderRules(max_carried=2)


def _parse(items: list[tuple[str, str]], ctype: str | None, grouped: bool) -> Any:
    try:
        return headers.parse(items, ctype, grouped=grouped, rules=RULES, now_ms=1_000)
    except Malformed as exc:
        return exc


@pytest.mark.parametrize("grouped", [False, True])
def test_batch_parser_matches_parse(grouped: bool) -> None:
    parser = headers.BatchParser(grouped=grouped, rules=RULES, now_ms=1_000)
    for items in HEADER_SETS:
        for ctype in (None, "text/plain"):
            expected = _parse(items, ctype, grouped)
            for _ in range(2):  # the second one comes from the parser's cache
                got = parser.parse(items, ctype)
                if isinstance(expected, Malformed):
                    assert isinstance(got, Malformed) and got.message == expected.message
                    continue
                assert isinstance(got, headers.Parsed)
                generated = dict(items).get("x-message-id") is None
                if generated:  # a new id each time; everything else as parse() has it
                    assert got.message_id != expected.message_id
                    got = headers.Parsed(
                        expected.message_id,
                        got.group_id,
                        got.deliver_at_ms,
                        (expected.headers[0], *got.headers[1:]),
                        got.header_bytes,
                    )
                assert got == expected


def test_batch_parser_gives_each_message_its_own_id() -> None:
    parser = headers.BatchParser(grouped=False, rules=headers.DEFAULT_RULES, now_ms=1_000)
    ids = [parser.parse([], None) for _ in range(500)]
    assert len({p.message_id for p in ids if isinstance(p, headers.Parsed)}) == 500


@pytest.fixture
async def apps(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Clients of the service with its fast path, and of the bare FastAPI app."""
    async with producer_env(tmp_path, {"small": {"max_message_bytes": 20}}) as env:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        clients = [
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=a), base_url="http://p", headers=auth
            )
            for a in (env.app, env.app.app)
        ]
        for client in clients:
            client.headers.update(auth)
        async with clients[0] as fast, clients[1] as bare:
            yield fast, bare


def _comparable(r: httpx.Response) -> tuple[int, str, Any]:
    body = r.json()
    for result in body.get("results", []):
        for volatile in ("message_id", "partition", "position"):
            result.pop(volatile, None)
    return r.status_code, r.headers["content-type"], body


@pytest.mark.parametrize(
    "content",
    [
        _messages(
            {"payload": "ok", "headers": {"X-Message-Id": "m1"}},
            {"payload": "far too large for the topic"},
            {"payload": "bad", "headers": {"X-Message-Id": "bad id"}},
            {"payload": "bad", "headers": {"X-Message-Id": "bad id"}},
            {"payload_base64": "b2s="},
        ),
        _messages({"payload": "a"}),
        _messages({"payload": 1}),
        _messages({"payload_base64": "!!"}),
        b"{",
    ],
)
async def test_fast_and_fastapi_routes_answer_alike(
    apps: tuple[httpx.AsyncClient, httpx.AsyncClient], content: bytes
) -> None:
    fast, bare = apps
    url = "/v1/projects/shop/topics/small/produce/batch"
    answers = [await c.post(url, content=content) for c in (fast, bare)]
    assert _comparable(answers[0]) == _comparable(answers[1])
    if answers[0].status_code == 207:
        statuses = [r["status"] for r in answers[0].json()["results"]]
        assert statuses == [201, 413, 400, 400, 201]
        assert answers[0].json()["results"][0]["message_id"] == "m1"
    refused = await fast.post(url, content=content, headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ({"payload": "x", "headers": {"X-City": "Kraków ☃"}}, 201),
        ({"payload": "x", "content_type": "text/plain; charset=☃"}, 400),  # ASCII only
        ({"payload_base64": "aGk☃"}, None),  # the whole request: 400 malformed
    ],
)
async def test_batch_text_beyond_latin1_is_never_a_500(
    apps: tuple[httpx.AsyncClient, httpx.AsyncClient],
    message: dict[str, object],
    status: int | None,
) -> None:
    for client in apps:
        r = await client.post(
            "/v1/projects/shop/topics/small/produce/batch", json={"messages": [message]}
        )
        if status is None:
            assert (r.status_code, r.json()["code"]) == (400, "malformed")
        else:
            assert r.status_code in (200, 207), r.text
            assert r.json()["results"][0]["status"] == status
