"""Settings of the producer service (read once in ``main()``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from core.http_server import HttpServerLimits
from core.prefork import Processes
from core.settings import (
    SettingsBase,
    listen_host,
    listen_port,
    member_id_field,
    processes_field,
    seconds,
)
from metastore.config import EmbeddedMetaStoreConfig, MetaStoreConfig
from metastore.dedupe import DedupeConfig
from segments.config import AuditConfig, ClusterConfig, embedded_only


class ProducerSettings(SettingsBase):
    section: ClassVar[str] = "producer"  # of a deployment file (core.settings)
    host: str = listen_host()
    port: int = listen_port(8701, "the produce API")
    admin_token: SecretStr | None = Field(default=None, description="may publish anywhere")
    metastore: MetaStoreConfig = EmbeddedMetaStoreConfig()
    clusters: dict[str, ClusterConfig] = Field(default_factory=embedded_only)
    audit: AuditConfig = AuditConfig()
    dedupe: DedupeConfig | None = Field(
        default=None,
        description="where the ids of topics with a dedupe_window live (PostgreSQL in "
        "production); none set: beside an embedded metastore, else no idempotent publish",
    )
    processes: Processes = processes_field()
    member_id: str = member_id_field(
        "producer", "its name among the producers of a cutover (unique per process)"
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
    body_timeout_s: float = seconds(30.0, 600, "the most a produce request's body may take (408)")
    http_server: HttpServerLimits = HttpServerLimits()
    unknown_topic_cache_s: float = Field(
        default=1.0, ge=0, le=60, description="how long a 404 for a topic is remembered"
    )
    cutover_hold_timeout_s: float = seconds(
        5.0, 120, "longest a request waits through a cutover switch"
    )
    failover_report_interval_s: float = seconds(
        1.0, 60, "how often it reports its write figures per segment (failover detection)"
    )
    failover_stall_s: float = seconds(
        1.0, 60, "a write unanswered this long counts as failing (failover detection)"
    )
