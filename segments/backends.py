"""What every service opens first: its metastore, a store per configured cluster, and the
audit sink, all closed with the service's exit stack.

The producer and the worker open them the same way in their lifespan::

    async with AsyncExitStack() as stack:
        backends = await open_backends(stack, settings, metastore=given, stores=given_stores)
        writer = SegmentWriter(backends.stores, ...)
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import NamedTuple, Protocol

from metastore.config import EmbeddedMetaStoreConfig, ZooKeeperConfig, open_metastore
from metastore.protocol import MetaStore

from .audit import AuditSink, open_audit
from .config import AuditConfig, ClusterConfig
from .protocol import SegmentStore
from .registry import open_stores


class BackendSettings(Protocol):
    """The shared settings a service opens its backends from (``core.settings.SHARED``)."""

    @property
    def metastore(self) -> ZooKeeperConfig | EmbeddedMetaStoreConfig: ...

    @property
    def clusters(self) -> Mapping[str, ClusterConfig]: ...

    @property
    def audit(self) -> AuditConfig: ...


class Backends(NamedTuple):
    meta: MetaStore
    stores: dict[str, SegmentStore]
    audit: AuditSink | None  # None when the audit trail names no cluster


async def open_backends(
    stack: AsyncExitStack,
    settings: BackendSettings,
    *,
    metastore: MetaStore | None = None,
    stores: Mapping[str, SegmentStore] | None = None,
) -> Backends:
    """Open what ``settings`` name, closed with ``stack``; a ``metastore`` or ``stores`` given
    (already started by the caller, as tests do) are used as they are."""
    meta = metastore
    if meta is None:
        meta = await stack.enter_async_context(open_metastore(settings.metastore))
    opened = await open_stores(stack, settings.clusters, stores)
    audit = await open_audit(stack, opened, settings.audit)
    return Backends(meta, opened, audit)
