"""Each event as a binary-mode CloudEvent; what httpbus answered as a value; a batch posted
by aggregate, in order, and taken whole or not at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from outbox_relay.events import OutboxEvent
from outbox_relay.poster import Outcome, Posted, Poster, RefusedEvent
from outbox_relay.relay import BatchPoster

URL = "http://producer/v1/projects/p/topics/t/produce"
Answer = Callable[[httpx.Request], httpx.Response]


def _event(i: int, agg: str = "a-1") -> OutboxEvent:
    return OutboxEvent(f"e-{i}", agg, "order", "order.créé", b'{"i": %d}' % i)


def _poster(answer: Answer) -> Poster:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # let other lanes run between requests
        return answer(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return Poster(
        client,
        URL,
        source="/shop orders",
        group_attribute="partitionkey",
        content_type="application/json",
        retry_max_s=0.01,
    )


def _stored(request: httpx.Request) -> httpx.Response:
    return httpx.Response(201, json={"message_id": request.headers["ce-id"]})


async def test_an_event_is_a_binary_mode_cloudevent_named_by_its_id_grouped_by_its_aggregate() -> (
    None
):
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _stored(request)

    posted = await _poster(answer).post(_event(7, "order-42"))
    assert posted.outcome is Outcome.STORED
    (request,) = seen
    assert str(request.url) == URL
    h = request.headers
    assert h["ce-specversion"] == "1.0" and h["ce-id"] == "e-7"
    assert h["ce-partitionkey"] == "order-42" and h["ce-aggregatetype"] == "order"
    assert h["ce-source"] == "/shop%20orders" and h["ce-type"] == "order.cr%C3%A9%C3%A9"
    assert h["content-type"] == "application/json"
    assert request.content == b'{"i": 7}'


def test_what_httpbus_answered_is_a_value() -> None:
    def of(status: int, **kw: object) -> Posted:
        return Posted.from_response(httpx.Response(status, **kw))  # type: ignore[arg-type]

    assert of(201, json={"message_id": "x"}).outcome is Outcome.STORED
    assert of(200, json={"message_id": "x", "duplicate": True}).outcome is Outcome.DUPLICATE
    throttled = of(429, headers={"Retry-After": "3"}, json={"code": "throttled"})
    assert throttled.outcome is Outcome.RETRY and throttled.retry_after == 3.0
    assert of(503, json={"code": "storage_unavailable"}).outcome is Outcome.RETRY
    assert of(507).outcome is Outcome.RETRY and of(408).outcome is Outcome.RETRY
    assert of(422, json={"code": "invalid_cloud_event"}).outcome is Outcome.REFUSED
    assert of(404, json={"code": "topic_not_found"}).outcome is Outcome.REFUSED


async def test_unavailable_and_unreachable_are_tried_again_until_taken() -> None:
    tries: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        tries.append(1)
        if len(tries) == 1:
            raise httpx.ConnectError("refused")
        if len(tries) == 2:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"code": "x"})
        return httpx.Response(200, json={"message_id": "e-1", "duplicate": True})

    posted = await _poster(answer).post(_event(1))
    assert posted.outcome is Outcome.DUPLICATE and len(tries) == 3


async def test_a_refused_event_raises_naming_the_event_and_the_answer() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"code": "schema_mismatch", "message": "no"})

    with pytest.raises(RefusedEvent, match=r"e-3 \(aggregate a-1\) with 422.*schema_mismatch"):
        await _poster(answer).post(_event(3))


async def test_a_batch_posts_each_aggregate_in_commit_order_and_counts_duplicates() -> None:
    order: dict[str, list[str]] = {}
    duplicates = {"e-4", "e-9"}

    def answer(request: httpx.Request) -> httpx.Response:
        order.setdefault(request.headers["ce-partitionkey"], []).append(request.headers["ce-id"])
        if request.headers["ce-id"] in duplicates:
            return httpx.Response(200, json={"message_id": "x", "duplicate": True})
        return _stored(request)

    batch: list[OutboxEvent | None] = [_event(i, f"a-{i % 3}") for i in range(12)]
    batch.insert(5, None)  # a tombstone: skipped
    totals = await BatchPoster(_poster(answer), concurrency=2).post(batch)
    assert order == {f"a-{k}": [f"e-{i}" for i in range(12) if i % 3 == k] for k in range(3)}
    assert (totals.events, totals.stored, totals.duplicates, totals.skipped) == (13, 10, 2, 1)
    assert totals.aggregates == 3


async def test_a_batch_with_a_refused_event_is_not_taken() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.headers["ce-id"] == "e-2":
            return httpx.Response(400, json={"code": "bad"})
        return _stored(request)

    with pytest.raises(RefusedEvent, match="e-2"):
        await BatchPoster(_poster(answer), concurrency=4).post([_event(i) for i in range(5)])
