"""Client settings of the Pulsar backend, derived once from :class:`PulsarClusterConfig`.

Also the naming of storage topics: a storage topic ``name`` is the partitioned persistent
topic ``persistent://<tenant>/<namespace>/<name>``; partition ``i`` is its own topic
``<name>-partition-<i>``, which this backend produces to and reads from directly (the
partition is chosen by :func:`segments.protocol.partition_for`, never by the client).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pulsar

from segments.config import PulsarClusterConfig

CLIENT_LOG_LEVEL = pulsar.LoggerLevel.Warn
"""The C++ client logs warnings and errors to the console. Not to a Python
``logging.Logger``: the client's threads still log while the interpreter shuts down, and
the process then aborts ("terminate called without an active exception")."""


@dataclass(frozen=True)
class PulsarSettings:
    """Everything the backend needs to know about one Pulsar cluster."""

    service_url: str
    admin_url: str
    tenant: str
    namespace: str
    produce_timeout_s: float
    batching: bool = True
    admin_token: str | None = None
    # Our producers never build a batch larger than this; positions rely on it (< 4096).
    batching_max_messages: int = 1000
    batching_max_delay_ms: int = 1
    max_pending_messages: int = 10_000
    reader_cache_size: int = 256
    admin_timeout_s: float = 30.0

    @classmethod
    def from_config(cls, config: PulsarClusterConfig) -> PulsarSettings:
        return cls(
            service_url=config.service_url,
            admin_url=config.admin_url.rstrip("/"),
            tenant=config.tenant,
            namespace=config.namespace,
            produce_timeout_s=config.produce_timeout_s,
            batching=config.batching,
            admin_token=config.admin_token,
            admin_timeout_s=max(config.produce_timeout_s, 30.0),
        )

    def topic_url(self, name: str) -> str:
        """The fully qualified partitioned topic of storage topic ``name``."""
        return f"persistent://{self.tenant}/{self.namespace}/{name}"

    def partition_url(self, name: str, partition: int) -> str:
        """The fully qualified topic of one partition."""
        return self.topic_url(partition_name(name, partition))

    def partition_prefix(self, name: str) -> str:
        """What the URL of every partition of ``name`` (and of no other topic) starts with."""
        return f"{self.topic_url(name)}-partition-"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of ``pulsar.Client``: every client wait bounded by the produce
        timeout, and a quiet console logger."""
        return {
            "operation_timeout_seconds": max(1, math.ceil(self.produce_timeout_s)),
            "connection_timeout_ms": max(100, int(self.produce_timeout_s * 1000)),
            "logger": pulsar.ConsoleLogger(CLIENT_LOG_LEVEL),
        }

    def producer_options(self) -> dict[str, Any]:
        """Keyword arguments of ``create_producer`` for a partition topic."""
        return {
            "send_timeout_millis": max(1, int(self.produce_timeout_s * 1000)),
            "batching_enabled": self.batching,
            "batching_max_messages": self.batching_max_messages,
            "batching_max_publish_delay_ms": self.batching_max_delay_ms,
            "max_pending_messages": self.max_pending_messages,
            "block_if_queue_full": False,  # blocking would stall the event loop thread
        }


def partition_name(name: str, partition: int) -> str:
    """The local name of one partition topic, as Pulsar names them."""
    return f"{name}-partition-{partition}"
