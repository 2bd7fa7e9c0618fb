"""The Pulsar backend of the segment store (pulsar-client and the admin REST API)."""

from __future__ import annotations

from segments.config import PulsarClusterConfig

from .store import PulsarSegmentStore

__all__ = ["PulsarSegmentStore", "create_store"]


def create_store(config: PulsarClusterConfig) -> PulsarSegmentStore:
    """A new, not yet started store for a Pulsar cluster (the registry's entry point)."""
    return PulsarSegmentStore(config)
