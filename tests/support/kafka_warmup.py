"""Run as a process by :class:`tests.support.dedicated.DedicatedKafka`: wait until a
fresh broker's producer-id and group coordinators serve (an idempotent write and an offset
commit both succeed). librdkafka can crash a process that meets a coordinator still loading
(seen: a segfault in ``rdk:main`` right after a broker's first start), so this is done in a
throwaway process, never in the test's own.

    python -m tests.support.kafka_warmup 127.0.0.1:9092 60
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "__httpbus_warmup"


def warm(bootstrap: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        try:
            future.result(timeout)
        except KafkaException as exc:  # exists already: fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(TOPIC, b"warm")
    if producer.flush(max(1.0, deadline - time.monotonic())) != 0:
        raise SystemExit("the idempotent write did not complete")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "httpbus-warmup"})
    while True:
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    consumer.close()


if __name__ == "__main__":
    warm(sys.argv[1], float(sys.argv[2]))
