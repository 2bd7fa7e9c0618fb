"""Settings of the producer service (read once in ``main()``)."""

from __future__ import annotations

import os
import socket

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from httpbus.core.settings import SettingsBase
from httpbus.metastore.config import EmbeddedMetaStoreConfig, MetaStoreConfig
from httpbus.segments.config import ClusterConfig, EmbeddedClusterConfig


def _embedded_only() -> dict[str, ClusterConfig]:
    return {"embedded": EmbeddedClusterConfig()}


def _member_id() -> str:
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40].strip("-")
    return f"producer-{host or 'host'}-{os.getpid()}"


class AuditConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = Field(default=None, description="None: no audit trail")
    topic: str = "httpbus.audit"
    partitions: int = Field(default=4, ge=1, le=512)


class ProducerSettings(SettingsBase):
    host: str = "127.0.0.1"
    port: int = Field(default=8701, ge=1, le=65_535)
    admin_token: SecretStr | None = Field(default=None, description="may publish anywhere")
    metastore: MetaStoreConfig = EmbeddedMetaStoreConfig()
    clusters: dict[str, ClusterConfig] = Field(default_factory=_embedded_only)
    audit: AuditConfig = AuditConfig()
    member_id: str = Field(default_factory=_member_id, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    max_carried_headers: int = Field(default=64, ge=0, le=1_000)
    unknown_topic_cache_s: float = Field(default=1.0, ge=0, le=60)
