"""The embedded backend of the segment store: SQLite in WAL mode, durable, for ``httpbus dev``."""

from __future__ import annotations

from ..config import EmbeddedClusterConfig
from .config import EmbeddedSettings
from .store import EmbeddedSegmentStore

__all__ = ["EmbeddedSegmentStore", "EmbeddedSettings", "create_store"]


def create_store(config: EmbeddedClusterConfig) -> EmbeddedSegmentStore:
    """A new, not yet started store on the SQLite file of ``config``."""
    return EmbeddedSegmentStore(EmbeddedSettings.from_cluster(config))
