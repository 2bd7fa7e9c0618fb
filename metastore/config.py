"""Typed configuration of the metastore, and the one function that opens it."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .protocol import MetaStore


class ZooKeeperConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["zookeeper"] = Field(default="zookeeper", description="production")
    hosts: str = Field(default="127.0.0.1:2181", description="host:port,host:port")
    root: str = Field(
        default="/httpbus",
        pattern=r"^/[A-Za-z0-9_./-]*$",
        description="chroot of every httpbus path",
    )
    session_timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="how long a silent process keeps its locks"
    )


class EmbeddedMetaStoreConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["embedded"] = Field(default="embedded", description="one machine (httpbus dev)")
    path: str = Field(default=".httpbus/metastore.db", description="the SQLite file")


MetaStoreConfig = Annotated[ZooKeeperConfig | EmbeddedMetaStoreConfig, Field(discriminator="kind")]


def open_metastore(config: ZooKeeperConfig | EmbeddedMetaStoreConfig) -> MetaStore:
    """A new, not yet started metastore for ``config``."""
    if isinstance(config, ZooKeeperConfig):
        from .zookeeper import ZooKeeperMetaStore

        return ZooKeeperMetaStore(
            config.hosts, root=config.root, session_timeout_s=config.session_timeout_s
        )
    from .embedded import EmbeddedMetaStore

    return EmbeddedMetaStore(config.path)


async def enter_metastore(
    stack: AsyncExitStack,
    config: ZooKeeperConfig | EmbeddedMetaStoreConfig,
    given: MetaStore | None = None,
) -> MetaStore:
    """The ``given`` metastore (already started by the caller, as tests do), else a new one
    for ``config``, started and closed with ``stack`` (the metastore's ``open_stores``)."""
    if given is not None:
        return given
    return await stack.enter_async_context(open_metastore(config))
