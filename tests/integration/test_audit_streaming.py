"""The streaming hourly report on the real Kafka audit topic (Structured Streaming through
spark-sql-kafka, ``availableNow`` triggers): the first run reports the events the real
AuditSink wrote, into the report store; a second run on the same checkpoint reads only what
came since -- it hands over only the window that changed -- and the store then holds both
windows with the right counts (exact copies of a record are not counted twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.audit import AuditEvent, AuditSubscription, AuditType, HourlyRow
from reports import migrate
from reports.store import ReportStore
from segments.audit import AuditSink
from segments.config import KafkaClusterConfig
from segments.protocol import Record
from segments.registry import open_store
from tests.support.services import RealServices

pytestmark = pytest.mark.kafka
HOUR = 3_600_000
H0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR


def _events(hour: int, n: int) -> list[AuditEvent]:
    out = []
    for i in range(n):
        at = H0 + hour * HOUR + 1_000 + i
        common = {"message_id": f"h{hour}-{i}", "project": "shop", "topic": "orders"}
        out.append(AuditEvent(type=AuditType.ACCEPTED, at_ms=at, **common))
        out.append(
            AuditEvent(
                type=AuditType.DELIVERED,
                subscription="shop/billing",
                at_ms=at + 10,
                produced_at_ms=at,
                **common,
            )
        )
    return out


async def test_streaming_hourly_report_resumes_from_its_checkpoint(
    real_services: RealServices, unique: str, tmp_path: Path, spark: Any
) -> None:
    from spark.hourly import start_hourly_stream
    from spark.reconcile import subscriptions_frame
    from spark.schema import stream_kafka

    topic = f"it.{unique}.audit"
    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    store = ReportStore.from_url(url)
    subs = subscriptions_frame(
        spark, [AuditSubscription(name="shop/billing", topic_project="shop", topic="orders")]
    )
    handed: list[list[HourlyRow]] = []

    def sink(rows: list[HourlyRow]) -> None:
        handed.append(rows)
        store.upsert_hourly(rows)

    def run_once() -> None:
        events = stream_kafka(spark, real_services.kafka, topic)
        query = start_hourly_stream(
            events, subs, str(tmp_path / "checkpoint"), sink, trigger_s=None
        )
        query.awaitTermination(300)
        assert query.exception() is None

    kafka = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    async with open_store(kafka) as kstore:
        try:
            async with AuditSink(kstore, topic, partitions=2) as audit:
                for e in _events(0, 40):
                    audit.emit(e)
            first = _events(0, 1)[1].to_bytes()
            await kstore.produce(topic, Record(first))  # an exact copy of a delivered event
            run_once()
            assert {r.window_start_ms for batch in handed for r in batch} == {H0}
            handed.clear()
            async with AuditSink(kstore, topic, partitions=2) as audit:
                for e in _events(1, 25):
                    audit.emit(e)
            run_once()
        finally:
            await kstore.delete_topic(topic)
    assert {r.window_start_ms for batch in handed for r in batch} == {H0 + HOUR}
    rows = {r.window_start_ms: r for r in store.hourly(subscription="shop/billing")}
    store.close()
    assert (rows[H0].accepted, rows[H0].delivered) == (40, 40)
    assert (rows[H0 + HOUR].accepted, rows[H0 + HOUR].delivered) == (25, 25)
    assert rows[H0 + HOUR].latency_p99_ms == 10
