"""Typed configuration of the dedupe store, and the one function that opens it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.errors import StorageUnavailable
from core.lifecycle import AsyncResource

from ..config import EmbeddedMetaStoreConfig, ZooKeeperConfig
from ..protocol import MetaStore
from .claims import Claims
from .liveness import Members
from .protocol import Claim, DedupeStore, DedupeTable, Original

_PARTITION_S = Field(
    default=3_600,
    ge=60,
    le=86_400,
    description="the span of until-times one partition holds (rows are dropped a partition at "
    "a time, up to this long after no claim reads them); keep it once chosen",
)


class PostgresDedupeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["postgres"] = Field(default="postgres", description="production")
    url: str = Field(
        description="libpq URL of the database (postgresql://user:pass@host:5432/db); migrated "
        "by httpbus db upgrade, as the report database"
    )
    connections: int = Field(default=4, ge=1, le=64, description="statements in flight at once")
    partition_s: int = _PARTITION_S


class EmbeddedDedupeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["embedded"] = Field(default="embedded", description="one machine (httpbus dev)")
    path: str = Field(default=".httpbus/dedupe.db", description="the SQLite file")
    partition_s: int = _PARTITION_S


DedupeConfig = Annotated[PostgresDedupeConfig | EmbeddedDedupeConfig, Field(discriminator="kind")]


def default_dedupe(
    metastore: ZooKeeperConfig | EmbeddedMetaStoreConfig,
) -> PostgresDedupeConfig | EmbeddedDedupeConfig | None:
    """The dedupe store when none is configured: beside an embedded metastore's file (every
    process of one machine shares it), none beside ZooKeeper (producers on many machines
    need a database they share: ``dedupe.url``)."""
    if isinstance(metastore, EmbeddedMetaStoreConfig):
        return EmbeddedDedupeConfig(path=str(Path(metastore.path).with_name("dedupe.db")))
    return None


def open_dedupe(
    config: PostgresDedupeConfig | EmbeddedDedupeConfig | None,
    meta: MetaStore,
    member_id: str,
    *,
    wait_s: float = 5.0,
) -> DedupeStore:
    """A new, not yet started dedupe store for ``config`` (None: :class:`Unconfigured`)."""
    table: DedupeTable
    if config is None:
        return Unconfigured()
    if isinstance(config, PostgresDedupeConfig):
        from .postgres import PostgresDedupeTable

        table = PostgresDedupeTable(
            config.url, connections=config.connections, partition_s=config.partition_s
        )
    else:
        from .embedded import EmbeddedDedupeTable

        table = EmbeddedDedupeTable(config.path, partition_s=config.partition_s)
    return Claims(table, Members(meta), member_id, wait_s=wait_s)


class Unconfigured(AsyncResource):
    """No dedupe store (a producer on ZooKeeper without ``dedupe``): a publish that needs one
    is refused (503) rather than stored without the promise its topic makes."""

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def claim(
        self, scope: str, message_id: str, window_ms: int, now_ms: int
    ) -> Claim | Original:
        raise StorageUnavailable(
            "this topic has a dedupe_window but this producer has no dedupe store "
            "(producer setting dedupe: {kind: postgres, url: ...})",
            retry_after=30,
        )

    async def record(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        return None

    def record_soon(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        return None

    async def release(self, claim: Claim) -> None:
        return None
