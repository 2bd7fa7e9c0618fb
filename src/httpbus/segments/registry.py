"""Open a ``SegmentStore`` for a cluster config without the base importing any backend.

Each backend package exposes ``create_store(config) -> SegmentStore``; the registry finds it
by the config's ``backend`` name at run time, the way SQLAlchemy finds a dialect. So the
base stays free of backend imports and a deployment loads only the clients it uses.
"""

from __future__ import annotations

import importlib
from typing import cast

from .config import ClusterConfig
from .protocol import SegmentStore


def open_store(config: ClusterConfig) -> SegmentStore:
    """A new, not yet started store for ``config`` (``async with`` it, or call ``start``)."""
    backend = importlib.import_module(f"{__package__}.{config.backend}")
    return cast(SegmentStore, backend.create_store(config))
