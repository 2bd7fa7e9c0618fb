"""Settings of the producer service (read once in ``main()``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from core.http_server import HttpServerLimits
from core.prefork import Processes
from core.settings import SettingsBase, default_member_id
from metastore.config import EmbeddedMetaStoreConfig, MetaStoreConfig
from segments.config import AuditConfig, ClusterConfig, EmbeddedClusterConfig


def _embedded_only() -> dict[str, ClusterConfig]:
    return {"embedded": EmbeddedClusterConfig()}


class ProducerSettings(SettingsBase):
    section: ClassVar[str] = "producer"  # of a deployment file (core.settings)
    host: str = Field(default="127.0.0.1", description="the address it listens on")
    port: int = Field(default=8701, ge=1, le=65_535, description="the produce API")
    admin_token: SecretStr | None = Field(default=None, description="may publish anywhere")
    metastore: MetaStoreConfig = EmbeddedMetaStoreConfig()
    clusters: dict[str, ClusterConfig] = Field(default_factory=_embedded_only)
    audit: AuditConfig = AuditConfig()
    processes: Processes = Field(
        default=1,
        description="processes serving the port, each a member of its own (auto: one per core)",
    )
    member_id: str = Field(
        default_factory=lambda: default_member_id("producer"),
        description="its name among the producers of a cutover (unique per process)",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
    )
    max_carried_headers: int = Field(
        default=64, ge=0, le=1_000, description="the most X- headers one message carries (400)"
    )
    max_header_bytes: int = Field(
        default=32 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="the most header bytes of a produce request, and of one message (431)",
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="the most a produce request's body may take (408)"
    )
    http_server: HttpServerLimits = HttpServerLimits()
    unknown_topic_cache_s: float = Field(
        default=1.0, ge=0, le=60, description="how long a 404 for a topic is remembered"
    )
    cutover_hold_timeout_s: float = Field(
        default=5.0, gt=0, le=120, description="longest a request waits through a cutover switch"
    )
    failover_report_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="how often it reports its write figures per segment (failover detection)",
    )
    failover_stall_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="a write unanswered this long counts as failing (failover detection)",
    )
