"""Typed configuration of the storage clusters, one model per backend.

A deployment names its clusters (``kafka-main``, ``pulsar-main``, ``embedded``) and each
segment says which one it lives on. These models are plain data: the backends read them,
the base never imports a backend.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field


class _Cluster(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    produce_timeout_s: float = Field(
        default=10.0, gt=0, le=300, description="a produce not acknowledged by then fails (503)"
    )


class KafkaClusterConfig(_Cluster):
    backend: Literal["kafka"] = Field(default="kafka", description="Apache Kafka")
    bootstrap_servers: str = Field(default="127.0.0.1:9092", description="host:port,host:port")
    # Production: replication 3, min ISR 2 (acks=all then survives one broker down).
    replication_factor: int = Field(
        default=1, ge=1, le=10, description="of the topics it creates; production: 3"
    )
    min_insync_replicas: int = Field(
        default=1, ge=1, le=10, description="of the topics it creates; production: 2"
    )
    linger_ms: int = Field(
        default=5,
        ge=0,
        le=1_000,
        description="librdkafka linger.ms: batching against latency. librdkafka sends one "
        "partition per produce request, so the broker's work follows the batches; 5 (librdkafka's "
        "and Kafka 4's default) cut its CPU per message 2.5x at no throughput cost under load "
        "(bench/README.md); a quiet topic's publish waits up to this long",
    )
    fence_settle_s: float | None = Field(
        default=None,
        ge=0,
        le=300,
        description="how long a seal waits after the fence is in force before it reads the "
        "ends; None: the produce timeout (strict, slow). Short keeps a cutover's pause short",
    )
    client: dict[str, str] = Field(
        default_factory=dict, description="extra librdkafka settings, e.g. security.protocol"
    )
    read_only: bool = Field(
        default=False,
        description="an existing cluster whose topics httpbus adopts as external first "
        "segments: read, never written, sealed only logically, never deleted (docs/migrating.md)",
    )
    id_header: str | None = Field(
        default=None,
        description="read_only: the header the legacy producers put a message's id in; none: "
        "'<topic>:<partition>:<offset>'",
    )


class PulsarClusterConfig(_Cluster):
    backend: Literal["pulsar"] = Field(default="pulsar", description="Apache Pulsar")
    service_url: str = Field(default="pulsar://127.0.0.1:6650", description="the binary protocol")
    admin_url: str = Field(default="http://127.0.0.1:8080", description="the admin REST API")
    tenant: str = Field(default="public", description="where its topics are created")
    namespace: str = Field(default="default", description="... in this namespace")
    batching: bool = Field(default=True, description="producer batching")
    admin_token: str | None = Field(default=None, description="token of the admin REST API")


class EmbeddedClusterConfig(_Cluster):
    backend: Literal["embedded"] = Field(
        default="embedded", description="one machine (httpbus dev)"
    )
    path: str = Field(default=".httpbus/segments.db", description="the SQLite file")


ClusterConfig = Annotated[
    KafkaClusterConfig | PulsarClusterConfig | EmbeddedClusterConfig,
    Field(discriminator="backend"),
]


class AuditConfig(BaseModel):
    """Where a service appends its audit events; no cluster, no audit trail."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = Field(default=None, description="None: no audit trail")
    topic: str = Field(default="httpbus.audit", description="the audit topic")
    partitions: int = Field(default=4, ge=1, le=512, description="when it is created")


def embedded_only() -> dict[str, ClusterConfig]:
    """The clusters of a service that names none: one embedded cluster, ``embedded``."""
    return {"embedded": EmbeddedClusterConfig()}


def is_read_only(config: ClusterConfig | None) -> TypeGuard[KafkaClusterConfig]:
    """Whether ``config`` is an adopted cluster whose topics are external segments
    (segments.external): read, never written by httpbus."""
    return isinstance(config, KafkaClusterConfig) and config.read_only
