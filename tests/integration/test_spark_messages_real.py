"""The segment-aware Spark reader on real Kafka and Pulsar: a Kafka segment then a Pulsar
segment, written through the segment stores as the producer service writes them, read back as
one DataFrame of messages in timeline order, byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from core import envelope
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from spark.messages import read_timeline
from spark.plan import KafkaSource, PositionRange, PulsarSource, SegmentPlan, TimelinePlan
from tests.support.services import RealServices

pytestmark = [pytest.mark.kafka, pytest.mark.pulsar]
RETENTION_MS = 3_600_000
PRODUCED_AT_MS = 1_790_000_000_000


@pytest.fixture
async def kafka(real_services: RealServices) -> AsyncIterator[SegmentStore]:
    async with open_store(KafkaClusterConfig(bootstrap_servers=real_services.kafka)) as store:
        yield store


@pytest.fixture
async def pulsar(real_services: RealServices) -> AsyncIterator[SegmentStore]:
    config = PulsarClusterConfig(
        service_url=real_services.pulsar, admin_url=real_services.pulsar_admin
    )
    async with open_store(config) as store:
        yield store


def record(i: int, *, with_id: bool = True) -> Record:
    group = f"g{i % 3}".encode()
    headers: list[tuple[str, bytes]] = []
    if with_id:
        headers.append((envelope.MESSAGE_ID, f"m{i}".encode()))
    headers += [
        (envelope.GROUP_ID, group),
        (envelope.PRODUCED_AT, str(PRODUCED_AT_MS + i).encode()),
        ("x-binary", bytes([i % 256, 0, 255])),
    ]
    payload = bytes([i % 256]) * (i % 7) + f"payload {i} é".encode()
    return Record(payload, key=group, headers=tuple(headers), timestamp_ms=PRODUCED_AT_MS + i)


async def fill(store: SegmentStore, name: str, records: list[Record]) -> dict[int, int]:
    await store.create_topic(name, 2, retention_ms=RETENTION_MS)
    for r in records:
        await store.produce(name, r)
    return await store.end_positions(name)


def ranges(ends: dict[int, int], start: int = 0) -> dict[int, PositionRange]:
    return {p: PositionRange(start=start, end=end) for p, end in ends.items()}


def shop_orders(*segments: SegmentPlan) -> TimelinePlan:
    return TimelinePlan(project="shop", topic="orders", segments=list(segments))


def on_kafka(
    real: RealServices, segment: int, topic: str, ranges: dict[int, PositionRange]
) -> SegmentPlan:
    source = KafkaSource(bootstrap_servers=real.kafka)
    return SegmentPlan(segment=segment, storage_topic=topic, source=source, ranges=ranges)


def on_pulsar(
    real: RealServices, segment: int, topic: str, ranges: dict[int, PositionRange]
) -> SegmentPlan:
    source = PulsarSource(service_url=real.pulsar)
    return SegmentPlan(segment=segment, storage_topic=topic, source=source, ranges=ranges)


async def test_a_kafka_then_a_pulsar_segment_read_as_one_frame(
    real_services: RealServices, kafka: SegmentStore, pulsar: SegmentStore, unique: str, spark: Any
) -> None:
    first = [record(i) for i in range(20)] + [record(20, with_id=False)]
    second = [record(i) for i in range(100, 130)]
    k_topic, p_topic = f"it.{unique}.spark.1", f"it.{unique}.spark.2"
    k_ends = await fill(kafka, k_topic, first)
    p_ends = await fill(pulsar, p_topic, second)
    plan = shop_orders(
        on_kafka(real_services, 1, k_topic, ranges(k_ends)),
        on_pulsar(real_services, 2, p_topic, ranges(p_ends)),
    )
    rows = read_timeline(spark, plan, ordered=True).collect()
    assert [r["segment"] for r in rows] == [1] * len(first) + [2] * len(second)
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == len(first) + len(second)
    for i, rec in enumerate(first[:-1] + second):
        n = i if i < 20 else 100 + i - 20
        row = by_id[f"m{n}"]
        assert bytes(row["payload"]) == rec.value
        assert [(h["name"], bytes(h["value"])) for h in row["headers"]] == list(rec.headers)
        assert row["group"] == f"g{n % 3}"
        assert int(row["produced_at"].timestamp() * 1000) == PRODUCED_AT_MS + n
    # No id header: a deterministic id from where it is stored.
    nameless = [
        r for r in rows if r["segment"] == 1 and r["id"] not in {f"m{i}" for i in range(20)}
    ]
    assert [r["id"] for r in nameless] == [
        f"{k_topic}:{nameless[0]['partition']}:{nameless[0]['position']}"
    ]
    # Positions grow within a partition in produce order.
    for seg in (1, 2):
        for p in (0, 1):
            ids = [r["id"] for r in rows if (r["segment"], r["partition"]) == (seg, p)]
            numbers = [int(i[1:]) for i in ids if i.startswith("m")]
            assert numbers == sorted(numbers)


async def test_ranges_bound_the_read_on_both_backends(
    real_services: RealServices, kafka: SegmentStore, pulsar: SegmentStore, unique: str, spark: Any
) -> None:
    k_topic, p_topic = f"it.{unique}.range.1", f"it.{unique}.range.2"
    await kafka.create_topic(k_topic, 1, retention_ms=RETENTION_MS)
    await pulsar.create_topic(p_topic, 1, retention_ms=RETENTION_MS)
    k_pos = [(await kafka.produce(k_topic, record(i))).position for i in range(10)]
    p_pos = [(await pulsar.produce(p_topic, record(i))).position for i in range(10)]
    plan = shop_orders(
        on_kafka(real_services, 1, k_topic, {0: PositionRange(start=k_pos[2], end=k_pos[5])}),
        on_pulsar(real_services, 3, p_topic, {0: PositionRange(start=p_pos[4], end=p_pos[8])}),
    )
    rows = read_timeline(spark, plan, ordered=True).collect()
    assert [(r["segment"], r["id"]) for r in rows] == [(1, "m2"), (1, "m3"), (1, "m4")] + [
        (3, f"m{i}") for i in range(4, 8)
    ]
