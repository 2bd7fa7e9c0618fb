"""The relay's counters: retries as the poster makes them, outcomes per acknowledged batch."""

from __future__ import annotations

import httpx

from outbox_relay.events import OutboxEvent
from outbox_relay.metrics import RelayMetrics
from outbox_relay.poster import Poster


async def test_retries_are_counted_as_they_happen() -> None:
    answers = iter([503, 429, 201])
    metrics = RelayMetrics()

    def answer(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        return httpx.Response(status, headers={"Retry-After": "0"}, json={"message_id": "e"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    poster = Poster(
        client,
        "http://producer/v1/projects/p/topics/t/produce",
        source="/s",
        group_attribute="partitionkey",
        content_type="application/json",
        retry_max_s=0.01,
        metrics=metrics,
    )
    await poster.post(OutboxEvent("e", "a", "t", "x", b"{}"))
    assert metrics.registry.get_sample_value("httpbus_outbox_retries_total") == 2


def test_an_acknowledged_batch_counts_each_outcome_and_stamps_the_time() -> None:
    metrics = RelayMetrics()
    value = metrics.registry.get_sample_value
    assert value("httpbus_outbox_events_total", {"outcome": "duplicate"}) == 0  # from the start
    metrics.acknowledged(stored=7, duplicates=2, skipped=1)
    metrics.acknowledged(stored=1, duplicates=0, skipped=0)
    assert value("httpbus_outbox_events_total", {"outcome": "stored"}) == 8
    assert value("httpbus_outbox_events_total", {"outcome": "duplicate"}) == 2
    assert value("httpbus_outbox_events_total", {"outcome": "skipped"}) == 1
    assert value("httpbus_outbox_batches_total") == 2
    assert (value("httpbus_outbox_last_batch_timestamp_seconds") or 0) > 1.7e9
