"""The real servers answer through the Python clients the platform uses."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pulsar
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.support.services import RealServices
from tests.support.until import until_sync


@pytest.mark.zookeeper
def test_zookeeper_create_and_read_znode(real_services: RealServices, unique: str) -> None:
    zk = KazooClient(hosts=real_services.zookeeper, timeout=10)
    zk.start(timeout=15)
    try:
        path = f"/smoke/{unique}"
        zk.create(path, b"hello", makepath=True)
        data, stat = zk.get(path)
        assert data == b"hello"
        assert stat.version == 0
    finally:
        zk.stop()
        zk.close()


@pytest.mark.kafka
def test_kafka_produce_acks_all_and_consume(real_services: RealServices, unique: str) -> None:
    topic = f"smoke-{unique}"
    admin = AdminClient({"bootstrap.servers": real_services.kafka})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)

    acks: list[tuple[KafkaError | None, int]] = []
    producer = Producer(
        {"bootstrap.servers": real_services.kafka, "acks": "all", "enable.idempotence": True}
    )
    producer.produce(
        topic,
        key=b"k",
        value=b"hello kafka",
        headers=[("x-a", b"1")],
        on_delivery=lambda e, m: acks.append((e, m.offset())),
    )
    assert producer.flush(30) == 0
    assert acks == [(None, 0)]

    consumer = Consumer(
        {
            "bootstrap.servers": real_services.kafka,
            "group.id": f"g-{unique}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    try:

        def polled() -> Any:
            msg = consumer.poll(1.0)
            return msg if msg is not None and msg.error() is None else None

        msg = until_sync(polled, 60, "the message back from Kafka", interval=0)
        assert (msg.key(), msg.value(), msg.headers()) == (b"k", b"hello kafka", [("x-a", b"1")])
    finally:
        consumer.close()


@pytest.mark.pulsar
def test_pulsar_produce_and_consume(real_services: RealServices, unique: str) -> None:
    topic = f"persistent://public/default/smoke-{unique}"
    url = f"{real_services.pulsar_admin}/admin/v2/persistent/public/default/smoke-{unique}"
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=30) as resp:
        assert resp.status == 204
    with urllib.request.urlopen(
        f"{real_services.pulsar_admin}/admin/v2/persistent/public/default", timeout=30
    ) as resp:
        assert topic in json.loads(resp.read())

    client = pulsar.Client(
        real_services.pulsar, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )
    try:
        consumer = client.subscribe(
            topic, f"s-{unique}", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic)
        producer.send(b"hello pulsar", properties={"x-a": "1"})  # returns once persisted
        msg = consumer.receive(timeout_millis=30_000)
        assert (msg.data(), msg.properties()) == (b"hello pulsar", {"x-a": "1"})
        consumer.acknowledge(msg)
    finally:
        client.close()
