"""Open a ``SegmentStore`` for a cluster config without the base importing any backend.

Each backend package exposes ``create_store(config) -> SegmentStore``; the registry finds it
by the config's ``backend`` name at run time, the way SQLAlchemy finds a dialect. So the
base stays free of backend imports and a deployment loads only the clients it uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import cast

from .config import ClusterConfig, is_read_only
from .external import ExternalStore
from .protocol import SegmentStore


def open_store(config: ClusterConfig) -> SegmentStore:
    """A new, not yet started store for ``config`` (``async with`` it, or call ``start``);
    a ``read_only`` Kafka cluster's store is wrapped read-only (:mod:`.external`)."""
    backend = importlib.import_module(f"{__package__}.{config.backend}")
    store = cast(SegmentStore, backend.create_store(config))
    if is_read_only(config):
        return cast(SegmentStore, ExternalStore(store, id_header=config.id_header))
    return store


async def open_stores(
    stack: AsyncExitStack,
    clusters: Mapping[str, ClusterConfig],
    given: Mapping[str, SegmentStore] | None = None,
) -> dict[str, SegmentStore]:
    """A started store per configured cluster, closed with ``stack``; the ``given`` ones
    (already started by the caller, as tests do) are used as they are."""
    opened = dict(given or {})
    for name, config in clusters.items():
        if name not in opened:
            opened[name] = await stack.enter_async_context(open_store(config))
    return opened
