"""The Kafka backend of the segment store (confluent-kafka, acks=all, idempotent)."""

from __future__ import annotations

from ..config import KafkaClusterConfig
from .config import KafkaSettings
from .store import KafkaSegmentStore

__all__ = ["KafkaSegmentStore", "KafkaSettings", "create_store"]


def create_store(config: KafkaClusterConfig) -> KafkaSegmentStore:
    """A new, not yet started store on the Kafka cluster of ``config``."""
    return KafkaSegmentStore(KafkaSettings.from_config(config))
