"""Adopting an existing Kafka topic (issue 23, item 3) on real ZooKeeper and Kafka: a topic
whose first segment is a legacy topic of a ``read_only`` cluster. Its own producer (plain
confluent-kafka) writes it; a subscription delivers from it, with ids from the legacy header
or from the record's address; httpbus refuses to write it and leaves it in place when the
httpbus topic is deleted; the Spark export names the same ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from control_plane.services.export_plan import plan_timeline
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import KafkaClusterConfig
from segments.registry import open_store
from spark.messages import read_timeline
from tests.support.delivery import delivery_world
from tests.support.services import RealServices
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
COUNT = 12


def _legacy_produce(bootstrap: str, topic: str) -> None:
    """What a team's own Kafka producer writes: every other record with its id header."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(COUNT):
        headers = [("event-id", f"e{i}".encode())] if i % 2 == 0 else []
        producer.produce(topic, f"legacy {i}".encode(), key=f"k{i % 3}", headers=headers)
    assert producer.flush(30) == 0


async def _adopted(
    real: RealServices, legacy: str
) -> tuple[KafkaClusterConfig, KafkaClusterConfig]:
    """Topic ``legacy`` made and written by its own producer; the plain Kafka cluster and the
    same cluster adopting it (read-only, ids from ``event-id``)."""
    plain = KafkaClusterConfig(bootstrap_servers=real.kafka)
    async with open_store(plain) as kafka:
        await kafka.create_topic(legacy, 2, retention_ms=3_600_000)
    _legacy_produce(real.kafka, legacy)
    return plain, plain.model_copy(update={"read_only": True, "id_header": "event-id"})


async def test_an_adopted_kafka_topic_delivers_and_is_never_written(
    real_services: RealServices, unique: str, tmp_path: Path, spark: Any
) -> None:
    legacy = f"legacy-{unique}.orders"
    plain, adopted = await _adopted(real_services, legacy)
    async with delivery_world(
        real_services, unique, tmp_path, "legacy", cluster_config=adopted
    ) as world:
        # Not on a read_only cluster without naming the topic, nor with a wrong count.
        r = await world.cp.post(
            "/v1/projects/shop/topics", json={"name": "bad", "partitions": 2, "cluster": "legacy"}
        )
        assert r.status_code == 422 and "external_topic" in r.text, r.text
        r = await world.cp.post(
            "/v1/projects/shop/topics",
            json={"name": "bad", "partitions": 3, "cluster": "legacy", "external_topic": legacy},
        )
        assert r.status_code == 422 and "partitions" in r.text, r.text
        topic = await world.topic("orders", partitions=2, external_topic=legacy)
        assert topic["segments"][0]["storage_topic"] == legacy
        await world.subscribe("all", "orders", start="earliest")  # the legacy records
        await world.running("all")
        await until(lambda: len(set(world.hook.ids("all"))) >= COUNT, 60, "every legacy record")
        requests = world.hook.on("all")
        bodies = {req.id: req.body for req in requests}
        named = {f"e{i}" for i in range(0, COUNT, 2)}
        assert named <= set(bodies)
        addressed = set(bodies) - named
        assert len(addressed) == COUNT // 2
        assert all(a.startswith(f"{legacy}:") for a in addressed)
        assert sorted(bodies.values()) == sorted(f"legacy {i}".encode() for i in range(COUNT))
        # httpbus never writes it: a publish through httpbus is refused.
        r = await world.producer.post(
            "/v1/projects/shop/topics/orders/produce", content=b"through httpbus"
        )
        assert r.status_code == 422 and "external topic" in r.text, r.text
        # The Spark reader names every message as the subscription got it.
        zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/delivery-{unique}")
        async with open_metastore(zk) as meta, open_store(adopted) as store:
            planned = await plan_timeline(
                Catalog(meta), {"legacy": adopted}, {"legacy": store}, "shop", "orders"
            )
        rows = read_timeline(spark, planned.plan).collect()
        exported = {r["id"]: bytes(r["payload"]) for r in rows}
        assert exported == bodies
        groups = {req.id: req.headers.get("X-Group-Id") for req in requests}
        assert {r["id"]: r["group"] for r in rows} == groups  # the key, on both paths
    # The world deleted its topics: the legacy topic is still there, with every record.
    async with open_store(plain) as kafka:
        assert await kafka.partitions(legacy) == 2
        assert sum((await kafka.end_positions(legacy)).values()) == COUNT
        await kafka.delete_topic(legacy)


async def test_a_cutover_seals_the_external_segment_logically_and_moves_subscribers_on(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    """The cutover off an adopted topic records its ends without touching it; the legacy
    producer's later writes are not delivered, publishes through httpbus are."""
    legacy = f"legacy-{unique}.payments"
    plain, adopted = await _adopted(real_services, legacy)
    async with delivery_world(
        real_services,
        unique,
        tmp_path,
        "legacy",
        cluster_config=adopted,
        extra_clusters={"kafka-main": plain},
    ) as world:
        await world.topic("payments", partitions=2, external_topic=legacy)
        await world.subscribe("all", "payments", start="earliest")  # the legacy records
        await world.running("all")
        await until(lambda: len(set(world.hook.ids("all"))) >= COUNT, 60, "the legacy records")
        r = await world.cp.post(
            "/v1/projects/shop/topics/payments/cutover",
            json={"cluster": "kafka-main", "partitions": 2},
        )
        assert r.status_code == 202, r.text

        async def phase() -> str:
            got = await world.cp.get("/v1/projects/shop/topics/payments/cutover")
            return str(got.json()["phase"])

        phases: list[str] = []

        async def done() -> bool:
            phases.append(await phase())
            return phases[-1] in ("COMPLETE", "ABORTED", "ROLLED_BACK")

        await until(done, 90, "the cutover's end", interval=0.2)
        assert phases[-1] == "COMPLETE", phases
        topic = (await world.cp.get("/v1/projects/shop/topics/payments")).json()
        first = topic["segments"][0]
        assert first["state"] == "sealed" and sum(first["end_positions"].values()) == COUNT
        # The legacy producer writes on (nothing fenced it): not delivered, past the end.
        producer = Producer({"bootstrap.servers": real_services.kafka, "acks": "all"})
        producer.produce(legacy, b"after the cutover", headers=[("event-id", b"late")])
        assert producer.flush(30) == 0
        r = await world.producer.post(
            "/v1/projects/shop/topics/payments/produce",
            content=b"through httpbus",
            headers={"X-Message-Id": "h1"},
        )
        assert r.status_code == 201, r.text
        await until(lambda: "h1" in world.hook.ids("all"), 60, "the httpbus message")
        assert "late" not in world.hook.ids("all")
    async with open_store(plain) as kafka:
        assert sum((await kafka.end_positions(legacy)).values()) == COUNT + 1
        await kafka.delete_topic(legacy)
