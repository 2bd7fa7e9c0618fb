"""``httpbus export`` on real ZooKeeper, Kafka and Pulsar with Spark local: a topic whose first
segment is on Kafka, sealed, and whose second is on Pulsar (made through the catalog as a
cutover's commit makes them), exported to Parquet, read back: every message once, its payload
and headers byte for byte, in the hour of its ``produced_at``; a re-run changes nothing and a
``--since`` run rewrites only the hours it covers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli import cli
from core import envelope
from core.model import Project, SegmentState, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.maven import spark_jars
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from tests.support.services import RealServices
from tests.support.world import segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar]
HOUR_MS = 3_600_000
RETENTION_MS = 7 * 24 * HOUR_MS
PER_SEGMENT = 120


def _record(i: int, produced_at_ms: int) -> Record:
    group = f"g{i % 5}".encode()
    headers = (
        (envelope.MESSAGE_ID, f"m{i:04d}".encode()),
        (envelope.GROUP_ID, group),
        (envelope.PRODUCED_AT, str(produced_at_ms).encode()),
        ("x-binary", bytes([i % 256, 0, 10, 13])),
    )
    payload = bytes(range(i % 256)) + f"#{i}".encode()
    return Record(payload, key=group, headers=headers, timestamp_ms=produced_at_ms)


async def _produce(store: SegmentStore, name: str, records: list[Record]) -> None:
    for start in range(0, len(records), 40):
        done = await store.produce_many(name, records[start : start + 40])
        assert not [r for r in done if isinstance(r, Exception)]


async def _topic_on_kafka_then_pulsar(
    real: RealServices, zk: ZooKeeperConfig, unique: str, records: list[Record]
) -> None:
    """Segment 1 on Kafka (sealed) then segment 2 on Pulsar (active): the first half of
    ``records`` in each, and one copy of a Kafka message again in Pulsar (a producer's retry
    that straddled the cutover)."""
    kafka_cfg = KafkaClusterConfig(bootstrap_servers=real.kafka)
    pulsar_cfg = PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin)
    s1 = segment("kafka-main", storage=f"it.{unique}.orders.1", partitions=2)
    s2 = segment(
        "pulsar-main", 2, SegmentState.PENDING, storage=f"it.{unique}.orders.2", partitions=3
    )
    half = len(records) // 2
    async with (
        open_metastore(zk) as meta,
        open_store(kafka_cfg) as kafka,
        open_store(pulsar_cfg) as pulsar,
    ):
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await kafka.create_topic(s1.storage_topic, s1.partitions, retention_ms=RETENTION_MS)
        await catalog.create_topic(Topic(project="shop", name="orders", grouped=True), s1)
        await _produce(kafka, s1.storage_topic, records[:half])
        ends = await kafka.seal(s1.storage_topic, settle_s=0.2)
        await pulsar.create_topic(s2.storage_topic, s2.partitions, retention_ms=RETENTION_MS)
        await catalog.add_segment("shop", "orders", s2)
        topic = await catalog.get_topic("shop", "orders")
        sealed = s1.model_copy(update={"state": SegmentState.SEALED, "end_positions": ends})
        await catalog.commit_segment_switch(
            topic, sealed, s2.model_copy(update={"state": SegmentState.ACTIVE})
        )
        await _produce(pulsar, s2.storage_topic, records[half:] + [records[3]])


def _config(tmp_path: Path, real: RealServices, zk: ZooKeeperConfig) -> Path:
    path = tmp_path / "cp.yaml"
    settings = {
        "metastore": zk.model_dump(),
        "clusters": {
            "kafka-main": {"backend": "kafka", "bootstrap_servers": real.kafka},
            "pulsar-main": {
                "backend": "pulsar",
                "service_url": real.pulsar,
                "admin_url": real.pulsar_admin,
            },
        },
        "default_cluster": "kafka-main",
        "spark_jars": spark_jars(DEFAULT_CACHE),
    }
    path.write_text(yaml.safe_dump(settings))
    return path


async def _export(config: Path, out: Path, *extra: str) -> str:
    args = ["export", "shop", "orders", "--to", str(out), "--config", str(config), *extra]
    # In a thread: the CLI runs its own event loop (asyncio.run).
    result = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert result.exit_code == 0, result.output
    return result.output


def _files(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*.parquet")}


async def test_a_kafka_then_pulsar_topic_exports_every_message_once_byte_for_byte(
    real_services: RealServices, unique: str, tmp_path: Path, spark: Any
) -> None:
    now = int(time.time() * 1000)
    hour = now - now % HOUR_MS
    # Two hours of messages: the previous hour and the current one, interleaved in both
    # segments (producers' clocks differ), so every hour has messages of both backends.
    times = [hour - HOUR_MS + 1_000 + i if i % 2 else hour + i for i in range(2 * PER_SEGMENT)]
    records = [_record(i, t) for i, t in enumerate(times)]
    zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/export-{unique}")
    await _topic_on_kafka_then_pulsar(real_services, zk, unique, records)
    config = _config(tmp_path, real_services, zk)
    out = tmp_path / "orders"

    output = await _export(config, out)
    print(output)
    assert "1 duplicate copies dropped" in output
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == len(records)
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(records)  # every message once
    for rec, t in zip(records, times, strict=True):
        row = by_id[envelope.header(rec.headers, envelope.MESSAGE_ID)]
        assert bytes(row["payload"]) == rec.value
        assert [(h["name"], bytes(h["value"])) for h in row["headers"]] == list(rec.headers)
        assert int(row["produced_at"].timestamp() * 1000) == t
        assert row["hour"] == (t // HOUR_MS) % 24
        assert row["group"] == rec.key.decode()  # type: ignore[union-attr]
    # The retried copy is written once: the first in the timeline, in the Kafka segment.
    assert by_id["m0003"]["segment"] == 1
    assert {r["segment"] for r in rows} == {1, 2}
    assert (out / "_httpbus_export.json").is_file()

    # A re-run replaces the same hours with the same messages: still each once.
    before = _files(out)
    await _export(config, out)
    assert spark.read.parquet(str(out)).count() == len(records)
    after = _files(out)
    # A run from the current hour on rewrites only that hour; the previous one is untouched.
    await _export(config, out, "--since", "1s")
    last = _files(out)
    previous = [f for f in after if f"hour={(hour // HOUR_MS - 1) % 24}/" in f]
    assert previous and all(last[f] == after[f] for f in previous)
    current = [f for f in last if f"hour={(hour // HOUR_MS) % 24}/" in f]
    assert current and all(last[f] != after.get(f) for f in current)  # replaced
    assert spark.read.parquet(str(out)).count() == len(records)
    assert all(after[f] != before.get(f) for f in after)  # the full re-run replaced every hour


async def _cutover_to_kafka(
    real: RealServices, zk: ZooKeeperConfig, unique: str, records: list[Record]
) -> None:
    """Seal the Pulsar segment 2 (terminated) and move the produce pointer to a new Kafka
    segment 3 holding ``records``, as a cutover's commit does."""
    kafka_cfg = KafkaClusterConfig(bootstrap_servers=real.kafka)
    pulsar_cfg = PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin)
    s3 = segment(
        "kafka-main", 3, SegmentState.PENDING, storage=f"it.{unique}.orders.3", partitions=1
    )
    async with (
        open_metastore(zk) as meta,
        open_store(kafka_cfg) as kafka,
        open_store(pulsar_cfg) as pulsar,
    ):
        catalog = Catalog(meta)
        topic = await catalog.get_topic("shop", "orders")
        s2 = topic.segment(2)
        assert s2 is not None
        ends = await pulsar.seal(s2.storage_topic)
        await kafka.create_topic(s3.storage_topic, s3.partitions, retention_ms=RETENTION_MS)
        await catalog.add_segment("shop", "orders", s3)
        sealed = s2.model_copy(update={"state": SegmentState.SEALED, "end_positions": ends})
        await catalog.commit_segment_switch(
            topic, sealed, s3.model_copy(update={"state": SegmentState.ACTIVE})
        )
        await _produce(kafka, s3.storage_topic, records)


async def test_a_followed_export_moves_on_to_the_next_segment_and_keeps_each_message_once(
    real_services: RealServices, unique: str, tmp_path: Path, spark: Any
) -> None:
    now = int(time.time() * 1000)
    hour = now - now % HOUR_MS
    old = [_record(i, hour - HOUR_MS + 1_000 + i) for i in range(40)]
    zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/export-f-{unique}")
    await _topic_on_kafka_then_pulsar(real_services, zk, unique, old)
    config = _config(tmp_path, real_services, zk)
    out = tmp_path / "orders"
    follow = ["--follow", "--rounds", "1", "--every", "1s"]

    await _export(config, out, *follow)  # the first round: everything, then the checkpoint
    assert spark.read.parquet(str(out)).count() == len(old)
    assert (out / "_httpbus_export_checkpoint.json").is_file()
    before = _files(out)
    # A cutover from Pulsar to a new Kafka segment, with messages of the current hour.
    new = [_record(i, hour + i) for i in range(1000, 1030)]
    await _cutover_to_kafka(real_services, zk, unique, new)

    output = await _export(config, out, *follow)
    print(output)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r["id"] for r in rows) == sorted(
        envelope.header(r.headers, envelope.MESSAGE_ID) or "" for r in old + new
    )
    assert {r["segment"] for r in rows} == {1, 2, 3}
    assert all(
        bytes(r["payload"]) == rec.value
        for r, rec in zip(
            sorted((r for r in rows if r["segment"] == 3), key=lambda r: r["position"]),
            new,
            strict=True,
        )
    )
    # Only the current hour was rewritten: the new messages' earliest produced_at is in it.
    previous = [f for f in before if f"hour={(hour // HOUR_MS - 1) % 24}/" in f]
    after = _files(out)
    assert previous and all(after.get(f) == before[f] for f in previous)
    # A round with nothing new writes nothing.
    again = await _export(config, out, *follow)
    assert "nothing new" in again and _files(out) == after
