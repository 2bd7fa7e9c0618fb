"""librdkafka settings of the Kafka backend, derived once from :class:`KafkaClusterConfig`.

The operator's ``client`` settings (security, SASL, …) go to every client; the settings the
guarantees rest on (``acks=all``, idempotence, the message timeout) are ours and win.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Self

from ..config import KafkaClusterConfig

CLIENT_LOGGER = "segments.kafka.client"
"""librdkafka logs through this ``logging.Logger``, so the application controls it."""

READER_GROUP = "httpbus.reader"
"""The ``group.id`` librdkafka wants on a consumer; readers never join it nor commit to it."""

SEAL_GROUP = "__httpbus_seal"
"""The consumer group whose committed offsets record the end positions of sealed topics."""

MAX_FUTURE_TIMESTAMP_MS = 3_600_000
"""``message.timestamp.after.max.ms`` of our topics: the broker refuses records stamped more
than an hour ahead. The seal's probe relies on it (see ``store``)."""


@dataclass(frozen=True)
class KafkaSettings:
    """Everything the backend needs to know about one Kafka cluster."""

    bootstrap_servers: str
    produce_timeout_s: float = 10.0
    replication_factor: int = 1
    min_insync_replicas: int = 1
    linger_ms: int = 5
    client: dict[str, str] = field(default_factory=dict)
    # Consumers kept open for reads, one per (topic, partition), least recently used evicted.
    reader_cache_size: int = 64
    reader_threads: int = 32
    # Added to the produce timeout before the seal reads the final end positions (see store).
    seal_slack_s: float = 0.5
    # If set, the seal waits only this long after the fence is in force (see store, "Short
    # settle"): what a cutover's pause needs, with a narrower guarantee.
    fence_settle_s: float | None = None

    @classmethod
    def from_config(cls, config: KafkaClusterConfig) -> Self:
        """The settings of a configured ``kafka`` cluster."""
        return cls(
            bootstrap_servers=config.bootstrap_servers,
            produce_timeout_s=config.produce_timeout_s,
            replication_factor=config.replication_factor,
            min_insync_replicas=config.min_insync_replicas,
            linger_ms=config.linger_ms,
            client=dict(config.client),
            fence_settle_s=config.fence_settle_s,
        )

    @property
    def settle_s(self) -> float:
        """How long a seal waits after the fence is in force, before it reads the ends."""
        if self.fence_settle_s is not None:
            return self.fence_settle_s
        return self.produce_timeout_s + self.seal_slack_s

    @property
    def timeout_ms(self) -> int:
        return max(1, int(self.produce_timeout_s * 1000))

    def _base(self) -> dict[str, Any]:
        return {
            **self.client,
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger(CLIENT_LOGGER),
        }

    def producer(self) -> dict[str, Any]:
        """The durable producer: acks from every in-sync replica, idempotent (no duplicates,
        order kept per partition across retries), giving up after the produce timeout."""
        return {
            "linger.ms": self.linger_ms,
            "topic.metadata.propagation.max.ms": min(self.timeout_ms, 3_000),
            **self._base(),
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": self.timeout_ms,
            "request.timeout.ms": self.timeout_ms,
            "allow.auto.create.topics": False,
        }

    def probe(self) -> dict[str, Any]:
        """The seal's probe producer: not idempotent (a refused probe must not bump the epoch
        of the durable producer), no retries (the probe loop retries)."""
        return {
            **self._base(),
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 0,
            "message.timeout.ms": min(self.timeout_ms, 5_000),
            "allow.auto.create.topics": False,
        }

    def consumer(self) -> dict[str, Any]:
        """A reader: assigned partitions only, no group membership, no commits, and an error
        (not a silent jump) when asked for a position outside the log."""
        return {
            "fetch.wait.max.ms": 100,
            **self._base(),
            "group.id": READER_GROUP,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": False,
            "allow.auto.create.topics": False,
        }

    def follower(self) -> dict[str, Any]:
        """The consumer every followed partition shares (.follow): an idle fetch request
        every 25 ms per broker, whatever the number of partitions. A partition assigned
        gets its first messages about two of them later (~50 ms; 100 ms at 50, 345 at 200)."""
        return {**self.consumer(), "fetch.wait.max.ms": 25}

    def admin(self) -> dict[str, Any]:
        return {**self._base(), "socket.timeout.ms": max(self.timeout_ms, 10_000)}

    def topic_config(self, retention_ms: int) -> dict[str, str]:
        """The configs every storage topic is created with (``retention_ms <= 0``: forever,
        as on the embedded store)."""
        return {
            "retention.ms": str(retention_ms if retention_ms > 0 else -1),
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": "false",
            "message.timestamp.type": "CreateTime",
            "message.timestamp.after.max.ms": str(MAX_FUTURE_TIMESTAMP_MS),
        }
