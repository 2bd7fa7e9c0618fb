"""Typed configuration of the storage clusters, one model per backend.

A deployment names its clusters (``kafka-main``, ``pulsar-main``, ``embedded``) and each
segment says which one it lives on. These models are plain data: the backends read them,
the base never imports a backend.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Cluster(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    produce_timeout_s: float = Field(
        default=10.0, gt=0, le=300, description="a produce not acknowledged by then fails (503)"
    )


class KafkaClusterConfig(_Cluster):
    backend: Literal["kafka"] = "kafka"
    bootstrap_servers: str = "127.0.0.1:9092"
    # Production: replication 3, min ISR 2 (acks=all then survives one broker down).
    replication_factor: int = Field(default=1, ge=1, le=10)
    min_insync_replicas: int = Field(default=1, ge=1, le=10)
    linger_ms: int = Field(default=1, ge=0, le=1_000)
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


class PulsarClusterConfig(_Cluster):
    backend: Literal["pulsar"] = "pulsar"
    service_url: str = "pulsar://127.0.0.1:6650"
    admin_url: str = "http://127.0.0.1:8080"
    tenant: str = "public"
    namespace: str = "default"
    batching: bool = True
    admin_token: str | None = None


class EmbeddedClusterConfig(_Cluster):
    backend: Literal["embedded"] = "embedded"
    path: str = Field(default=".httpbus/segments.db", description="the SQLite file")


ClusterConfig = Annotated[
    KafkaClusterConfig | PulsarClusterConfig | EmbeddedClusterConfig,
    Field(discriminator="backend"),
]


class AuditConfig(BaseModel):
    """Where a service appends its audit events; no cluster, no audit trail."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str | None = Field(default=None, description="None: no audit trail")
    topic: str = "httpbus.audit"
    partitions: int = Field(default=4, ge=1, le=512)
