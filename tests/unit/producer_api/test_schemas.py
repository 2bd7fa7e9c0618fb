"""Publishing to a topic with a schema: refusals name the path, each version is compiled
once, and the version travels with the message to the endpoint (embedded backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from control_plane.api.topic_schemas import add_version
from core.json_depth import MAX_DEPTH
from tests.support.producer import PROJECT, ProducerEnv, produce_url, producer_env
from tests.support.until import until

V1: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}},
    "required": ["amount"],
}
V2: dict[str, Any] = {  # backward compatible: a wider type, an optional property
    "type": "object",
    "properties": {"amount": {"type": "number", "minimum": 0}, "note": {}},
    "required": ["amount"],
}
URL = produce_url("orders")


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[ProducerEnv]:
    async with producer_env(tmp_path, {"orders": {}, "free": {}}) as built:
        await add_version(built.catalog, PROJECT, "orders", V1)
        yield built


def _version(env: ProducerEnv) -> int | None:
    found = env.service.cache.schema(PROJECT, "orders")
    return None if found is None else found.version


async def test_an_invalid_payload_is_422_naming_path_and_rule(env: ProducerEnv) -> None:
    r = await env.client.post(URL, content=b'{"amount": -3}')
    assert r.status_code == 422, r.text
    assert r.json() == {
        "code": "schema_violation",
        "message": "`$.amount`: -3 is less than the minimum of 0",
        "details": {"path": "$.amount", "rule": "minimum", "schema_version": 1},
    }
    r = await env.client.post(URL, content=b"<xml/>", headers={"Content-Type": "text/xml"})
    assert r.status_code == 422 and r.json()["details"]["rule"] == "json"
    assert await env.stored("orders") == []
    # A topic without a schema takes anything, and a client cannot forge the version.
    r = await env.client.post(
        produce_url("free"), content=b"<xml/>", headers={"X-Schema-Version": "7"}
    )
    assert r.status_code == 201
    (stored,) = await env.stored("free")
    assert "x-schema-version" not in dict(stored.headers)


async def test_a_valid_payload_is_stored_with_its_schema_version(env: ProducerEnv) -> None:
    r = await env.client.post(URL, content=b'{"amount": 3}', headers={"X-Schema-Version": "9"})
    assert r.status_code == 201, r.text
    (stored,) = await env.stored("orders")
    assert [v for k, v in stored.headers if k == "x-schema-version"] == [b"1"]


async def test_batch_reports_each_refusal(env: ProducerEnv) -> None:
    messages = [
        {"payload": '{"amount": 1}'},
        {"payload": '{"amount": "one"}'},
        {"payload": "not json"},
        {"payload": '{"amount": 2}'},
    ]
    r = await env.client.post(URL + "/batch", json={"messages": messages})
    assert r.status_code == 207, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 422, 422, 201]
    assert results[1]["code"] == "schema_violation"
    assert "$.amount" in results[1]["message"] and '"one" is not of type' in results[1]["message"]
    assert "not JSON" in results[2]["message"]
    assert len(await env.stored("orders")) == 2


@pytest.mark.parametrize("levels", [300, 1_000, 100_000])
async def test_a_payload_nested_too_deep_is_422_not_a_500(env: ProducerEnv, levels: int) -> None:
    """Past 255 levels the validator refused with a bare ValueError, past about 1 000 the
    parser raised RecursionError: both were 500s, for a whole batch too."""
    deep = "[" * levels + "]" * levels
    r = await env.client.post(URL, content=deep.encode())
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "schema_violation"
    assert r.json()["details"] == {"path": "$", "rule": "depth", "schema_version": 1}
    assert f"deeper than {MAX_DEPTH} levels" in r.json()["message"]
    messages = [{"payload": '{"amount": 1}'}, {"payload": deep}, {"payload": '{"amount": 2}'}]
    r = await env.client.post(URL + "/batch", json={"messages": messages})
    assert r.status_code == 207, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 422, 201]
    assert results[1]["details"]["rule"] == "depth"
    assert len(await env.stored("orders")) == 2


async def test_a_payload_at_the_depth_limit_is_validated_as_usual(env: ProducerEnv) -> None:
    nested = '{"amount": 1, "note": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    r = await env.client.post(URL, content=nested.encode())
    assert r.status_code == 201, r.text


async def test_each_version_is_compiled_once(env: ProducerEnv) -> None:
    schemas = env.service.cache.schemas
    for _ in range(3):
        assert (await env.client.post(URL, content=b'{"amount": 1}')).status_code == 201
    assert (_version(env), schemas.compilations) == (1, 1)
    # A reload of the topic for another reason (a settings change) compiles nothing new.
    topic = await env.catalog.get_topic(PROJECT, "orders")
    await env.catalog.update_topic(topic.model_copy(update={"description": "changed"}))

    async def reloaded() -> bool:
        return (await env.service.cache.topic(PROJECT, "orders")).description == "changed"

    await until(reloaded, 5, "the producer reloads the topic")
    assert schemas.compilations == 1
    await add_version(env.catalog, PROJECT, "orders", V2)
    await until(lambda: _version(env) == 2, 5, "the producer sees version 2")
    assert schemas.compilations == 2
    assert (await env.client.post(URL, content=b'{"amount": 1.5}')).status_code == 201


async def test_removing_the_schema_stops_validation(env: ProducerEnv) -> None:
    assert (await env.client.post(URL, content=b"x")).status_code == 422
    state, read_at = await env.catalog.get_schema_state(PROJECT, "orders") or (None, 0)
    assert state is not None
    await env.catalog.set_schema_state(
        PROJECT, "orders", state.model_copy(update={"active": False}), read_at
    )
    await until(lambda: _version(env) is None, 5, "validation removed")
    assert (await env.client.post(URL, content=b"x")).status_code == 201


async def test_the_endpoint_sees_each_messages_version(env: ProducerEnv) -> None:
    r = await env.client.post(URL, content=b'{"amount": 1}')
    first = r.json()["message_id"]
    await add_version(env.catalog, PROJECT, "orders", V2)
    await until(lambda: _version(env) == 2, 5, "the producer sees version 2")
    second = (await env.client.post(URL, content=b'{"amount": 1.5}')).json()["message_id"]
    # The subscription starts at the active segment's start: both messages are there.
    hook = await env.deliver(
        "orders", "audit", lambda hook: len(hook.on("o")) >= 2, "both delivered"
    )
    seen = {r.id: r.headers.get("X-Schema-Version") for r in hook.on("o")}
    assert seen == {first: "1", second: "2"}


async def test_a_cloudevents_data_is_checked_against_the_schema(env: ProducerEnv) -> None:
    def event(i: int, data: Any) -> dict[str, Any]:
        return {"specversion": "1.0", "id": f"e{i}", "source": "/s", "type": "t", "data": data}

    structured = {"Content-Type": "application/cloudevents+json"}
    r = await env.client.post(URL, json=event(1, {"amount": -3}), headers=structured)
    assert (r.status_code, r.json()["details"]["path"]) == (422, "$.amount"), r.text
    r = await env.client.post(URL, json=event(2, {"amount": 3}), headers=structured)
    assert r.status_code == 201, r.text
    batch = {"Content-Type": "application/cloudevents-batch+json"}
    r = await env.client.post(
        URL + "/batch", json=[event(3, {"amount": 4}), event(4, {"no": 1})], headers=batch
    )
    assert [one["status"] for one in r.json()["results"]] == [201, 422], r.text
    stored = await env.stored("orders")
    assert sorted(dict(m.headers)["x-message-id"] for m in stored) == [b"e2", b"e3"]
    assert all(dict(m.headers)["x-schema-version"] == b"1" for m in stored)
