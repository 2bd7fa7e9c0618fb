"""Settings of the delivery worker service (read once in ``main()``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from core.endpoint_policy import EndpointPolicy
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
from segments.config import AuditConfig, ClusterConfig, embedded_only

from .answer_limits import AnswerLimits


class WorkerSettings(SettingsBase):
    section: ClassVar[str] = "worker"  # of a deployment file (core.settings)
    host: str = listen_host()
    port: int = listen_port(8702, "health and metrics")
    metastore: MetaStoreConfig = EmbeddedMetaStoreConfig()
    clusters: dict[str, ClusterConfig] = Field(default_factory=embedded_only)
    audit: AuditConfig = AuditConfig()
    processes: Processes = processes_field()
    member_id: str = member_id_field(
        "worker", "its name in the group of workers (unique per process)"
    )
    max_connections: int = Field(default=1_000, ge=1, le=100_000, description="to endpoints")
    endpoint_policy: EndpointPolicy = Field(
        default_factory=EndpointPolicy,
        description="which addresses deliveries may go to (docs/security.md); checked at connect",
    )
    answer_limits: AnswerLimits = Field(
        default=AnswerLimits(),
        description="what an endpoint may answer and how long each phase may take "
        "(docs/security.md); more fails the attempt as invalid_response or a timeout",
    )
    # Configs written before there was one sender may still name the others: they start, on
    # the HTTP sender, instead of failing (the field is kept for that reason only).
    sender: Literal["fast", "aiohttp", "httpx"] = Field(
        default="fast",
        description=(
            "the HTTP client pushing deliveries: always fast (HTTP/1.1 on asyncio + httptools, "
            "and HTTP/2 only where `http2` is on and the endpoint selects it); aiohttp and "
            "httpx are accepted from older configs and mean fast, with no HTTP/2 of their own "
            "(they are comparisons in bench/senders.py now)"
        ),
    )
    http2: bool = Field(
        default=False,
        description=(
            "offer HTTP/2 to HTTPS endpoints through ALPN and multiplex deliveries on one "
            "connection where they select it (HTTP/1.1 otherwise, and always for http:// "
            "endpoints: no h2c); off by default: it costs about 3x the CPU per delivery of "
            "HTTP/1.1 keep-alive (bench/senders.py --http2), worth it only where connections "
            "are scarce or far away"
        ),
    )
    commit_every_n: int = Field(
        default=500, ge=1, le=1_000_000, description="commit after this many terminal messages"
    )
    commit_every_s: float = Field(
        default=1.0, ge=0, le=60, description="... or after this long, whichever comes first"
    )
    lock_retry_s: float = seconds(0.5, 60, "how often a subscription's taken lock is tried")
    status_interval_s: float = seconds(1.0, 60, "how often subscription figures are published")
    http_server: HttpServerLimits = Field(
        default=HttpServerLimits(), description="limits on HTTP clients (docs/deploy.md)"
    )
