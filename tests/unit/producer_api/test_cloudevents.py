"""Publishing CloudEvents (the HTTP binding, binary, structured and batched modes): ``ce-id``
is the message id (deduplicated), the topic's group attribute the group, every other attribute
a stored ``ce-`` header; an invalid event is 400 ``invalid_cloudevent`` saying what to fix,
and nothing is stored."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.producer import ProducerEnv, produce_url, producer_env

TOPICS: dict[str, dict[str, Any]] = {
    "events": {"dedupe_window": "10m"},
    "grouped": {"grouped": True},
    "by-subject": {"grouped": True, "cloudevents_group_attribute": "subject"},
    "tiny": {"max_message_bytes": 256},
}
BINARY = {
    "ce-specversion": "1.0",
    "ce-id": "evt-1",
    "ce-source": "%2Forders%2Fapi",  # percent-encoded, as the 2.x SDK writes it
    "ce-type": "order.created",
    "ce-time": "2026-01-02T03:04:05Z",
    "Content-Type": "application/json",
}
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[ProducerEnv]:
    async with producer_env(tmp_path, TOPICS) as found:
        yield found


def _event(**fields: Any) -> dict[str, Any]:
    base = {"specversion": "1.0", "id": "e1", "source": "/orders", "type": "order.created"}
    return {**base, **fields}


async def _structured(env: ProducerEnv, topic: str, event: Any, **headers: str) -> httpx.Response:
    return await env.client.post(
        produce_url(topic),
        content=json.dumps(event).encode(),
        headers={"Content-Type": STRUCTURED, **headers},
    )


def _headers(env_stored: Any) -> dict[str, bytes]:
    return dict(env_stored.headers)


async def test_binary_mode_id_is_the_message_id_and_attributes_are_stored(
    env: ProducerEnv,
) -> None:
    r = await env.client.post(
        produce_url("events"), content=b'{"n":1}', headers={**BINARY, "X-Trace": "t1"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["message_id"] == "evt-1"
    (stored,) = await env.stored("events")
    assert stored.value == b'{"n":1}'
    headers = _headers(stored)
    assert headers["x-message-id"] == b"evt-1"
    assert headers["content-type"] == b"application/json"
    assert headers["ce-source"] == b"/orders/api"  # decoded, stored in the minimal encoding
    assert headers["ce-type"] == b"order.created"
    assert headers["ce-specversion"] == b"1.0"
    assert headers["ce-time"] == b"2026-01-02T03:04:05Z"
    assert headers["x-trace"] == b"t1"
    assert "ce-id" not in headers and "ce-datacontenttype" not in headers


async def test_a_replayed_event_is_a_duplicate_in_every_mode(env: ProducerEnv) -> None:
    first = await env.client.post(produce_url("events"), content=b"a", headers=BINARY)
    again = await _structured(env, "events", _event(id="evt-1", data="b"))
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json()["duplicate"] is True
    batch = await env.client.post(
        produce_url("events") + "/batch",
        content=json.dumps([_event(id="evt-1"), _event(id="evt-2")]).encode(),
        headers={"Content-Type": BATCH},
    )
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert results[0]["duplicate"] is True and results[1]["status"] == 201
    assert len(await env.stored("events")) == 2


async def test_structured_mode_data_and_data_base64(env: ProducerEnv) -> None:
    r = await _structured(env, "events", _event(id="j", data={"a": [1, 2]}, subject="s1"))
    assert r.status_code == 201, r.text
    r = await _structured(
        env,
        "events",
        _event(id="b", data_base64=base64.b64encode(b"\x00\xff").decode()),
        **{"X-Region": "eu"},
    )
    assert r.status_code == 201, r.text
    r = await _structured(env, "events", _event(id="t", datacontenttype="text/plain", data="hé"))
    assert r.status_code == 201, r.text
    json_msg, binary_msg, text_msg = await _by_id(env, "events", "j", "b", "t")
    assert json.loads(json_msg.value) == {"a": [1, 2]}
    assert _headers(json_msg)["content-type"] == b"application/json"
    assert _headers(json_msg)["ce-subject"] == b"s1"
    assert binary_msg.value == b"\x00\xff" and "content-type" not in _headers(binary_msg)
    assert _headers(binary_msg)["x-region"] == b"eu"
    assert text_msg.value == "hé".encode() and _headers(text_msg)["content-type"] == b"text/plain"


async def _by_id(env: ProducerEnv, topic: str, *ids: str) -> list[Any]:
    stored = {_headers(m)["x-message-id"].decode(): m for m in await env.stored(topic)}
    return [stored[i] for i in ids]


async def test_the_group_is_the_topics_attribute(env: ProducerEnv) -> None:
    r = await env.client.post(
        produce_url("grouped"), content=b"x", headers={**BINARY, "ce-partitionkey": "order-7"}
    )
    assert r.status_code == 201, r.text
    r = await _structured(env, "by-subject", _event(subject="order-8"))
    assert r.status_code == 201, r.text
    (one,) = await env.stored("grouped")
    (two,) = await env.stored("by-subject")
    assert one.key == b"order-7" and _headers(one)["x-group-id"] == b"order-7"
    assert two.key == b"order-8" and _headers(two)["ce-subject"] == b"order-8"
    missing = await _structured(env, "grouped", _event())
    assert missing.status_code == 400 and missing.json()["code"] == "invalid_cloudevent"
    assert "'partitionkey'" in missing.json()["message"]
    assert missing.json()["details"] == {"attribute": "partitionkey"}


@pytest.mark.parametrize(
    ("event", "fix"),
    [
        (_event(specversion="0.3"), "send 1.0"),
        ({k: v for k, v in _event().items() if k != "specversion"}, "no specversion"),
        ({k: v for k, v in _event().items() if k != "id"}, "no id"),
        ({k: v for k, v in _event().items() if k != "source"}, "no source"),
        (_event(type=""), "no type"),
        (_event(id="a b"), "becomes the message id"),
        (_event(time="yesterday"), "RFC 3339"),
        (_event(Bad=1), "lower-case letters and digits"),
        (_event(ext=1.5), "32-bit whole number"),
        (_event(ext={"a": 1}), "a string, a boolean"),
        (_event(data="a", data_base64="YQ=="), "not both"),
        (_event(data_base64="***"), "not valid base64"),
        (_event(datacontenttype="text/plain\r\nX: 1"), "control character"),
        (_event(datacontenttype="text/plain; charset=é"), "no content type"),
        ([_event()], "JSON object"),
    ],
)
async def test_invalid_events_are_400_with_what_to_fix(
    env: ProducerEnv, event: Any, fix: str
) -> None:
    r = await _structured(env, "events", event)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_cloudevent"), r.text
    assert fix in r.json()["message"]
    assert await env.stored("events") == []


@pytest.mark.parametrize(
    ("headers", "fix"),
    [
        ({"ce-id": "x", "ce-source": "/s", "ce-type": "t"}, "no specversion"),
        ({**BINARY, "ce-specversion": "1.1"}, "send 1.0"),
        ({**BINARY, "X-Message-Id": "m"}, "send no X-Message-Id"),
        ({**BINARY, "ce-source": ""}, "no source"),
        ({"Content-Type": "application/cloudevents+xml"}, "no CloudEvents format"),
        ({"Content-Type": BATCH}, "batch route"),
    ],
)
async def test_invalid_binary_requests_are_400(
    env: ProducerEnv, headers: dict[str, str], fix: str
) -> None:
    r = await env.client.post(produce_url("events"), content=b"x", headers=headers)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_cloudevent"), r.text
    assert fix in r.json()["message"]
    assert await env.stored("events") == []


async def test_hostile_structured_bodies_are_400_never_500(env: ProducerEnv) -> None:
    deep = json.dumps(_event()).encode()[:-1] + b', "data": ' + b"[" * 300 + b"]" * 300 + b"}"
    for body in (b"", b"{", b"[" * 100_000, b'{"id": 1e400}', b"\xff\xfe", b'"s"', b"null", deep):
        r = await env.client.post(
            produce_url("events"), content=body, headers={"Content-Type": STRUCTURED}
        )
        assert r.status_code == 400, (body[:20], r.text)
        assert r.json()["code"] == "invalid_cloudevent"
    big = _event(data="x" * 300)
    r = await _structured(env, "tiny", big)
    assert r.status_code == 413, r.text
    await env.fifty_ordinary("events")


async def test_a_batch_answers_each_event(env: ProducerEnv) -> None:
    events = [_event(id="ok1"), _event(id="bad id"), _event(id="ok2", data={"n": 2})]
    r = await env.client.post(
        produce_url("events") + "/batch",
        content=json.dumps(events).encode(),
        headers={"Content-Type": BATCH},
    )
    assert r.status_code == 207, r.text
    deep = [_event(id="deep", data=json.loads("[" * 300 + "]" * 300))]
    too_deep = await env.client.post(
        produce_url("events") + "/batch",
        content=json.dumps(deep).encode(),
        headers={"Content-Type": BATCH},
    )
    assert too_deep.status_code == 400 and too_deep.json()["code"] == "invalid_cloudevent"
    first, bad, last = r.json()["results"]
    assert first["status"] == 201 and last["message_id"] == "ok2"
    assert (bad["status"], bad["code"]) == (400, "invalid_cloudevent")
    assert len(await env.stored("events")) == 2
    for body, headers in (
        (b"{}", {"Content-Type": BATCH}),
        (b"[]", {"Content-Type": BATCH}),
        (json.dumps(_event()).encode(), {"Content-Type": STRUCTURED}),
        (b'{"messages": [{"payload": "p"}]}', BINARY),
    ):
        r = await env.client.post(produce_url("events") + "/batch", content=body, headers=headers)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_cloudevent"), r.text


async def test_an_ordinary_publish_is_untouched(env: ProducerEnv) -> None:
    r = await env.client.post(
        produce_url("events"),
        content=b"p",
        headers={"Content-Type": "application/json", "ce-partitionkey": "k"},  # no event
    )
    assert r.status_code == 201, r.text
    (stored,) = await env.stored("events")
    assert not any(name.startswith("ce-") for name, _ in stored.headers)
