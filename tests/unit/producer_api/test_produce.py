"""The producer service on the embedded backends: what a 201 means, and every refusal."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.audit import AuditEvent, AuditType
from core.model import Capacity
from core.tokens import make_token
from segments.audit import decode_audit_record
from tests.support.producer import ProducerEnv as Env
from tests.support.producer import producer_env

URL = "/v1/projects/shop/topics/{}/produce"
TOPICS = {
    "orders": {},
    "grouped": {"grouped": True},
    "small": {"max_message_bytes": 10},
    "slow": {"capacity": Capacity(max_qps=2)},
}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with producer_env(tmp_path, TOPICS) as found:
        yield found


async def _stored(
    env: Env, topic: str, partition: int, position: int
) -> tuple[bytes, dict[str, bytes]]:
    [msg] = await env.store.read(f"st.{topic}", partition, position, max_records=1, timeout=2)
    return msg.value, dict(msg.headers)


async def test_201_means_stored_byte_for_byte(env: Env) -> None:
    payload = bytes(range(256))
    r = await env.client.post(
        URL.format("orders"),
        content=payload,
        headers={
            "Content-Type": "application/octet-stream",
            "X-Trace": "t-1",
            "X-Message-Id": "m-1",
            "X-Forwarded-For": "10.0.0.1",
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["message_id"] == "m-1" == r.headers["x-message-id"]
    value, headers = await _stored(env, "orders", body["partition"], body["position"])
    assert value == payload
    assert headers["x-trace"] == b"t-1" and headers["x-message-id"] == b"m-1"
    assert headers["content-type"] == b"application/octet-stream"
    assert "x-forwarded-for" not in headers and int(headers["x-produced-at"]) > 0


async def test_generated_ids_sort_by_time(env: Env) -> None:
    ids = [
        (await env.client.post(URL.format("orders"), content=b"x")).json()["message_id"]
        for _ in range(5)
    ]
    assert ids == sorted(ids) and len(set(ids)) == 5


async def test_grouped_topic_needs_a_group_and_keeps_it_in_one_partition(env: Env) -> None:
    r = await env.client.post(URL.format("grouped"), content=b"x")
    assert (r.status_code, r.json()["code"]) == (400, "malformed")
    assert "X-Group-Id" in r.json()["message"]
    parts = {
        (
            await env.client.post(
                URL.format("grouped"), content=b"x", headers={"X-Group-Id": "g-42"}
            )
        ).json()["partition"]
        for _ in range(5)
    }
    assert len(parts) == 1


async def test_a_group_on_an_ungrouped_topic_is_400_and_not_stored(env: Env) -> None:
    """It would have made the message grouped (ordered, held behind its group's failures)
    on a topic made without groups, and reached the endpoint (issue 38)."""
    r = await env.client.post(URL.format("orders"), content=b"x", headers={"X-Group-Id": "g"})
    assert (r.status_code, r.json()["code"]) == (400, "malformed")
    assert "not grouped" in r.json()["message"] and "X-Group-Id" in r.json()["message"]
    messages = [{"payload": "a", "headers": {"X-Group-Id": "g"}}, {"payload": "b"}]
    r = await env.client.post(URL.format("orders") + "/batch", json={"messages": messages})
    assert [x["status"] for x in r.json()["results"]] == [400, 201]
    assert sum((await env.store.end_positions("st.orders")).values()) == 1


async def test_headers_httpbus_sets_on_a_delivery_are_dropped(env: Env) -> None:
    """X-Batch-Size, X-Topic and X-Attempt are httpbus's own on a delivery: a producer's
    value is never stored, so no endpoint ever sees it (a single delivery sent the
    producer's X-Batch-Size as if it were a batch)."""
    own = {"X-Batch-Size": "1000", "X-Topic": "other/topic", "X-Attempt": "9", "X-Replay": "true"}
    r = await env.client.post(URL.format("orders"), content=b"x", headers={**own, "X-Keep": "1"})
    assert r.status_code == 201, r.text
    _, headers = await _stored(env, "orders", r.json()["partition"], r.json()["position"])
    assert headers["x-keep"] == b"1"
    # X-Replay too: only a replay by an operator marks a delivery so (docs/archive.md)
    assert not {"x-batch-size", "x-topic", "x-attempt", "x-replay"} & set(headers)
    r = await env.client.post(
        URL.format("orders") + "/batch", json={"messages": [{"payload": "y", "headers": own}]}
    )
    (one,) = r.json()["results"]
    _, headers = await _stored(env, "orders", one["partition"], one["position"])
    assert not {"x-batch-size", "x-topic", "x-attempt"} & set(headers)


async def test_too_large_is_413_and_not_stored(env: Env) -> None:
    r = await env.client.post(URL.format("small"), content=b"x" * 11)
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    assert await env.store.end_positions("st.small") == {0: 0, 1: 0}
    assert (await env.client.post(URL.format("small"), content=b"x" * 10)).status_code == 201


async def test_unknown_topic_and_project_are_404(env: Env) -> None:
    r = await env.client.post(URL.format("nope"), content=b"x")
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    r = await env.client.post("/v1/projects/ghost/topics/orders/produce", content=b"x")
    assert r.status_code == 404


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Delay-Ms": "soon"},
        {"X-Deliver-At": "tomorrow"},
        {"X-Deliver-At": "2026-01-01T00:00"},
        {"X-Delay-Ms": "5", "X-Deliver-At": "1"},
        {"X-Message-Id": "has space"},
    ],
)
async def test_bad_headers_are_400_with_what_to_fix(env: Env, headers: dict[str, str]) -> None:
    r = await env.client.post(URL.format("orders"), content=b"x", headers=headers)
    assert (r.status_code, r.json()["code"]) == (400, "malformed")
    assert "X-" in r.json()["message"]


async def test_delay_is_stored_as_an_absolute_time(env: Env) -> None:
    r = await env.client.post(URL.format("orders"), content=b"x", headers={"X-Delay-Ms": "10000"})
    _, headers = await _stored(env, "orders", r.json()["partition"], r.json()["position"])
    assert int(headers["x-deliver-at"]) - int(headers["x-produced-at"]) == 10_000
    r = await env.client.post(
        URL.format("orders"), content=b"x", headers={"X-Deliver-At": "2030-01-02T03:04:05Z"}
    )
    _, headers = await _stored(env, "orders", r.json()["partition"], r.json()["position"])
    assert int(headers["x-deliver-at"]) == 1893553445000


async def test_tokens_401_403_and_scope(env: Env) -> None:
    token, plaintext = make_token("shop", ("orders",))
    await env.catalog.create_token(token)

    def auth(value: str) -> dict[str, str]:
        return {"Authorization": value}

    ok = await env.client.post(
        URL.format("orders"), content=b"x", headers=auth(f"Bearer {plaintext}")
    )
    assert ok.status_code == 201
    other = await env.client.post(
        URL.format("small"), content=b"x", headers=auth(f"Bearer {plaintext}")
    )
    assert (other.status_code, other.json()["code"]) == (403, "forbidden")
    for bad in ("", "Bearer nope", f"Bearer {plaintext}x", "Basic abc"):
        r = await env.client.post(URL.format("orders"), content=b"x", headers=auth(bad))
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized"), bad
    await env.catalog.delete_token("shop", token.id)
    for _ in range(50):  # the watch drops it
        r = await env.client.post(
            URL.format("orders"), content=b"x", headers=auth(f"Bearer {plaintext}")
        )
        if r.status_code == 401:
            break
        await asyncio.sleep(0.05)
    assert r.status_code == 401


async def test_rate_limit_is_429_with_retry_after(env: Env) -> None:
    codes = [
        (await env.client.post(URL.format("slow"), content=b"x")).status_code for _ in range(4)
    ]
    assert codes[:2] == [201, 201] and codes[2] == 429
    r = await env.client.post(URL.format("slow"), content=b"x")
    assert r.json()["code"] == "throttled" and int(r.headers["retry-after"]) >= 1


async def test_batch_reports_each_message(env: Env) -> None:
    messages = [
        {"payload": "hello", "headers": {"X-Group-Id": "g1"}},
        {"payload_base64": base64.b64encode(b"\x00\x01").decode(), "headers": {"X-Group-Id": "g1"}},
        {"payload": "no group"},
    ]
    r = await env.client.post(URL.format("grouped") + "/batch", json={"messages": messages})
    assert r.status_code == 207, r.text
    body = r.json()
    assert (body["accepted"], body["failed"]) == (2, 1)
    assert [x["status"] for x in body["results"]] == [201, 201, 400]
    first, second = body["results"][0], body["results"][1]
    assert first["partition"] == second["partition"] and first["position"] < second["position"]
    value, _ = await _stored(env, "grouped", second["partition"], second["position"])
    assert value == b"\x00\x01"
    all_ok = await env.client.post(
        URL.format("orders") + "/batch", json={"messages": [{"payload": "a"}, {"payload": "b"}]}
    )
    assert all_ok.status_code == 200 and all_ok.json()["accepted"] == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"messages": [', "malformed"),
        (b'{"messages": []}', "validation_failed"),
        (b'{"messages": [{"payload": "a", "payload_base64": "YQ=="}]}', "validation_failed"),
    ],
)
async def test_bad_batches(env: Env, body: bytes, code: str) -> None:
    r = await env.client.post(URL.format("orders") + "/batch", content=body)
    assert r.json()["code"] == code


async def test_accepted_messages_are_audited(env: Env) -> None:
    r = await env.client.post(
        URL.format("orders"),
        content=b"abc",
        headers={"X-Message-Id": "aud-1", "X-Region": "eu", "Content-Type": "text/plain"},
    )
    assert r.status_code == 201
    events: list[AuditEvent] = []
    for _ in range(40):
        msgs = await env.store.read("httpbus.audit", 0, 0, max_records=100, timeout=0.1)
        events = [e for m in msgs for e in decode_audit_record(m.value)]  # audit topic: 1 partition
        if any(e.message_id == "aud-1" for e in events):
            break
        await asyncio.sleep(0.05)
    [event] = [e for e in events if e.message_id == "aud-1"]
    assert event.type is AuditType.ACCEPTED and event.size == 3
    assert event.headers == {"content-type": "text/plain", "x-region": "eu"}  # for the trace
    assert (event.partition, event.position) == (r.json()["partition"], r.json()["position"])


async def test_metrics_and_health(env: Env) -> None:
    await env.client.post(URL.format("orders"), content=b"abc")
    text = (await env.client.get("/metrics")).text
    assert 'httpbus_produce_messages_total{project="shop",topic="orders"} 1.0' in text
    assert (await env.client.get("/readyz")).json() == {"status": "ready"}
    members = await env.catalog.store.members("producers")
    assert "producer-test" in members
