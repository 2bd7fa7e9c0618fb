"""Settings of the control plane (read once in ``main()``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, model_validator

from core.archive import ArchiveStorage
from core.endpoint_policy import EndpointPolicy
from core.http_server import HttpServerLimits
from core.model import MiB
from core.settings import SettingsBase, listen_host, listen_port, member_id_field, seconds
from core.signing_keys import JwtSigning
from metastore.config import EmbeddedMetaStoreConfig, MetaStoreConfig
from segments.config import AuditConfig, ClusterConfig, embedded_only


class ControlPlaneSettings(SettingsBase):
    section: ClassVar[str] = "control_plane"  # of a deployment file (core.settings)
    host: str = listen_host()
    port: int = listen_port(8700, "admin API, UI and /metrics")
    admin_token: SecretStr | None = Field(
        default=None, description="bearer token of the admin API (HTTPBUS_ADMIN_TOKEN)"
    )
    metastore: MetaStoreConfig = EmbeddedMetaStoreConfig()
    http_server: HttpServerLimits = Field(
        default=HttpServerLimits(), description="limits on HTTP clients (docs/deploy.md)"
    )
    max_body_bytes: int = Field(
        default=MiB,
        ge=4 * 1024,
        le=256 * MiB,
        description="the most bytes of a request body (API and UI); more is 413, counted as "
        "it arrives, and only after the caller is known (docs/security.md)",
    )
    clusters: dict[str, ClusterConfig] = Field(default_factory=embedded_only)
    default_cluster: str = Field(
        default="embedded", description="where a new topic goes when its request names no cluster"
    )
    storage_topic_prefix: str = Field(
        default="httpbus",
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="storage topics are <prefix>.<project>.<topic>.s<id>.<nonce>",
    )
    member_id: str = member_id_field(
        "control-plane", "its name in leader elections (unique per process)"
    )
    list_search_cache_s: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description="how long a list search (q=) may use the texts it read before: a "
        "description changed meanwhile may be found by its old text; 0: read them every "
        "search (docs/capacity.md)",
    )
    assign_interval_s: float = seconds(2.0, 300, "how often the leader re-reads the subscriptions")
    assign_join_quiet_s: float = seconds(
        1.0,
        60,
        "members joining are assigned once none joined for this long (at most 10 s after "
        "the first); a member leaving is assigned away at once (docs/capacity.md)",
    )
    cutover_prepare_timeout_s: float = seconds(
        30.0, 3_600, "how long producers may take to open the target"
    )
    cutover_switch_timeout_s: float = seconds(
        5.0, 600, "how long producers may take to drain (then rollback)"
    )
    cutover_complete_timeout_s: float = seconds(
        30.0, 3_600, "how long to wait for producers to see the commit"
    )
    endpoint_policy: EndpointPolicy = Field(
        default_factory=EndpointPolicy,
        description="which endpoint URLs subscriptions may have (docs/security.md)",
    )
    jwt_signing: JwtSigning = Field(
        default_factory=JwtSigning,
        description="the JWTs of subscriptions with auth jwt: issuer, algorithm, key rotation "
        "and its overlap (docs/security.md)",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="the URL people reach this control plane at (behind a proxy); https makes "
        "the UI's cookies Secure even when the proxy talks plain HTTP to us",
    )
    cutover_settle_s: float = Field(
        default=0.05,
        ge=0,
        le=300,
        description="how long a cutover's Kafka seal settles after the fence when every live "
        "producer drained (else the strict wait: the produce timeout) before its final ends "
        "are recorded; consumers wait for them at the boundary, producers do not",
    )
    archive: ArchiveStorage = Field(
        default_factory=ArchiveStorage,
        description="where topics may archive their closed hours (S3-compatible buckets, a "
        "local root) and how often the archiver runs (docs/archive.md)",
    )
    segment_retire_interval_s: float = seconds(
        300.0, 86_400, "how often the leader retires old segments"
    )
    # Automatic failover (docs/failover.md).
    failover_after_s: float = seconds(
        5.0,
        3_600,
        "fail a topic over once writes to its active segment have failed this long "
        "across producers",
    )
    failover_latency_p99_ms: float | None = Field(
        default=None,
        gt=0,
        le=600_000,
        description="fail over when producers' write latency p99 stays above this (ms); "
        "none: the latency trigger is off",
    )
    failover_latency_for_s: float = seconds(
        30.0, 3_600, "how long the p99 must stay above that bound"
    )
    failover_check_interval_s: float = seconds(
        0.5, 60, "how often the leader judges the health reports"
    )
    failover_phase_timeout_s: float = seconds(
        3.0,
        600,
        "how long a failover's PREPARE and SWITCH wait for the producers before "
        "going on without the silent ones",
    )
    failover_seal_retry_s: float = seconds(
        2.0, 600, "how often the leader tries to seal a segment a failover left unsealed"
    )
    # The audit pipeline (docs/audit.md): where the trail is, the report database, Spark.
    audit: AuditConfig = Field(
        default_factory=AuditConfig, description="the audit topic; no cluster: default_cluster"
    )
    database_url: str = Field(
        default="sqlite:///.httpbus/reports.db",
        description="relational store of the audit reports (sqlite:/// or postgresql://)",
    )
    trace_index: bool = Field(
        default=True,
        description="index the audit trail by message id in database_url, for the trace API "
        "(docs/tracing.md); one control plane indexes at a time",
    )
    trace_retention_s: float = seconds(
        7 * 86_400, 90 * 86_400, "how long the trace index keeps an event"
    )
    migrate_reports_on_start: bool = Field(
        default=True,
        description="run the report database's migrations when the control plane starts",
    )
    spark_master: str = Field(
        default="local[*]", description="Spark master of httpbus audit run (local[*], spark://…)"
    )
    spark_jars: list[str] = Field(
        default_factory=list,
        description="jars for spark.jars: the Kafka connector (scripts.realservices fetch)",
    )

    @model_validator(mode="after")
    def _default_cluster_is_configured(self) -> ControlPlaneSettings:
        if self.default_cluster not in self.clusters:
            raise ValueError(
                f"default_cluster {self.default_cluster!r} is not one of the configured "
                f"clusters {sorted(self.clusters)}"
            )
        return self
