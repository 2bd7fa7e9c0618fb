"""The domain model: projects, topics and their segments, subscriptions and their policies.

Models are pydantic, frozen, and validate on construction with messages that say what is
allowed. ``version`` fields are the metastore version an entity was read at; an update is a
compare-and-set against it. They are filled in by the metastore catalog, never stored.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AnyHttpUrl,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .archive import ArchiveSpec
from .cloudevents import DEFAULT_GROUP_ATTRIBUTE, NAME_RULE
from .cloudevents import NAME as ATTRIBUTE_NAME
from .endpoint_auth import EndpointAuth, MtlsAuth, NoAuth
from .errors import SecretInForce, TooManySecrets
from .filters import FilterError, compile_filter
from .names import Name
from .shards import MAX_SHARDS

MAX_PARTITIONS = 512
MiB = 1024 * 1024


def utcnow() -> datetime:
    return datetime.now(UTC)


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Backend(StrEnum):
    KAFKA = "kafka"
    PULSAR = "pulsar"
    EMBEDDED = "embedded"


class SegmentState(StrEnum):
    """PENDING (made for a cutover) → ACTIVE (the produce pointer's) → SEALED → RETIRED.

    A failover (docs/failover.md) leaves the old segment UNSEALED: the produce pointer moved
    on while its cluster could not be reached to fence it; the leader seals it when its cluster
    is back (UNSEALED → SEALED)."""

    PENDING = "pending"
    ACTIVE = "active"
    UNSEALED = "unsealed"
    SEALED = "sealed"
    RETIRED = "retired"


class FailoverMode(StrEnum):
    """How subscriptions read across a failover (docs/failover.md)."""

    ORDERED = "ordered"  # the old segment to its end first: order per group kept
    AVAILABLE = "available"  # the new segment at once, the old one when it returns


Partitions = Annotated[
    int, Field(ge=1, le=MAX_PARTITIONS, description=f"1 to {MAX_PARTITIONS} partitions")
]


class Segment(Model):
    """One storage topic of a topic's timeline; never reused once sealed."""

    id: int = Field(ge=1, description="position in the topic's timeline, from 1")
    cluster: Name
    backend: Backend
    storage_topic: str
    partitions: Partitions
    state: SegmentState = SegmentState.PENDING
    created_at: datetime = Field(default_factory=utcnow)
    sealed_at: datetime | None = None
    end_positions: dict[int, int] | None = Field(
        default=None, description="when sealed: per partition, the position after the last message"
    )
    ends_final: bool = Field(
        default=True,
        description="false while a cutover's Kafka seal settles: the produce pointer has moved "
        "on the fence, and readers wait for the final ends before they pass this segment",
    )
    unsealed_at: datetime | None = Field(
        default=None,
        description="when a failover moved the produce pointer off this segment without "
        "sealing it (its cluster could not be reached); kept once it is sealed later",
    )
    opened_by: str | None = Field(
        default=None,
        max_length=500,
        description="why this segment was opened, when a failover opened it",
    )
    start_positions: dict[int, int] | None = Field(
        default=None,
        description="per partition, where readers begin in this segment (a verified "
        "migration's switch or rollback: what lies before was delivered from the other side); "
        "none: at 0",
    )
    dual_write: bool = Field(
        default=False,
        description="a verified migration's shadow segment: while it is PENDING, producers "
        "write it instead of the external active segment (core.migration)",
    )
    skip_ids: tuple[str, ...] = Field(
        default=(),
        description="a verified migration's switch or rollback: ids the other side delivered "
        "already, which readers of this segment pass over (control_plane.leaders.migration_starts)",
    )
    sealing: bool = Field(
        default=False,
        description="an external segment a cutover is sealing: its ends are being recorded, so "
        "readers hold what they read until the seal shows them (delivery_workers.intake)",
    )

    def start_of(self, partition: int) -> int:
        """Where readers begin in ``partition`` (``start_positions``, else 0)."""
        return (self.start_positions or {}).get(partition, 0)

    @property
    def finished(self) -> bool:
        """Sealed (or retired) with its final ends: readers may move past it."""
        return (
            self.state in (SegmentState.SEALED, SegmentState.RETIRED)
            and self.end_positions is not None
            and self.ends_final
        )


class Pointer(Model):
    """A versioned reference to a segment: the produce pointer or a consume pointer."""

    segment_id: int = Field(ge=1)
    version: int = Field(default=-1, description="metastore version; -1 when not read from it")


class Capacity(Model):
    """What a topic accepts per second before producers get 429."""

    max_qps: int = Field(default=5_000, ge=1, le=1_000_000)
    max_bytes_per_second: int = Field(default=10 * MiB, ge=1024, le=1024 * MiB)


Secret = Annotated[str, Field(min_length=24, max_length=256)]


class NoticeKind(StrEnum):
    """The operational events a project's ``notification_url`` may receive (the ``type`` of
    each notice; docs/operations.md, "Operational events")."""

    FAILING = "subscription.failing"  # every attempt has failed for failing_after_s
    RECOVERED = "subscription.recovered"  # ... and then one succeeded
    DEAD_LETTERED = "subscription.dead_lettered"  # messages exhausted to the DLQ (a count)
    CIRCUIT_OPENED = "subscription.circuit_opened"
    CIRCUIT_CLOSED = "subscription.circuit_closed"
    DISABLED = "subscription.disabled"
    ENABLED = "subscription.enabled"


class Notifications(Model):
    """Which operational events a project wants, and their bounds: ``failing_after_s`` is how
    long every attempt must have failed before ``subscription.failing``; ``interval_s`` is
    the least time between two ``dead_lettered`` notices of one subscription (they carry the
    count in between) and between two ``circuit_opened`` (the openings in between are
    counted in the next)."""

    events: tuple[NoticeKind, ...] = (NoticeKind.DISABLED,)
    failing_after_s: int = Field(default=300, ge=10, le=86_400)
    interval_s: int = Field(default=300, ge=10, le=86_400)

    @field_validator("events")
    @classmethod
    def _distinct(cls, events: tuple[NoticeKind, ...]) -> tuple[NoticeKind, ...]:
        return tuple(sorted(set(events)))

    def wants(self, kind: NoticeKind) -> bool:
        return kind in self.events


class Project(Model):
    """A tenant. ``notification_url`` (optional) receives a signed JSON notice of the
    operational events ``notifications`` names — by default when one of the project's
    subscriptions is disabled (docs/operations.md) — signed with ``notification_secret``
    (made at creation, shown once) as deliveries are signed."""

    name: Name
    description: str = Field(default="", max_length=1_000)
    notification_url: AnyHttpUrl | None = None
    notification_secret: Secret | None = None
    notifications: Notifications = Field(default_factory=Notifications)
    created_at: datetime = Field(default_factory=utcnow)
    version: int = -1


MAX_DEDUPE_WINDOW_S = 24 * 3_600
_WINDOW = re.compile(r"(\d{1,6})(s|m|h|d)")
_WINDOW_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def window_seconds(text: str) -> int:
    """``90s``, ``10m``, ``2h`` or ``1d`` as seconds; ValueError for anything else."""
    match = _WINDOW.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a window such as 90s, 10m, 2h or 1d")
    return int(match[1]) * _WINDOW_UNITS[match[2]]


MAX_FAILOVER_CLUSTERS = 8


class Failover(Model):
    """Standby clusters a topic fails over to when its active segment's cluster is down or
    slow, tried in this order (docs/failover.md)."""

    clusters: tuple[Name, ...] = Field(
        min_length=1,
        max_length=MAX_FAILOVER_CLUSTERS,
        description="standby storage clusters, in the order they are tried",
    )
    mode: FailoverMode = Field(
        default=FailoverMode.ORDERED,
        description="ordered: subscriptions read the old segment to its end before the new "
        "one; available: the new one at once, the old one when its cluster returns",
    )

    @field_validator("clusters")
    @classmethod
    def _distinct(cls, clusters: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(clusters)) != len(clusters):
            raise ValueError("each standby cluster may be named once")
        return clusters


class TopicSettings(Model):
    """What an operator sets on a topic (and may change later)."""

    max_message_bytes: int = Field(default=MiB, ge=1, le=10 * MiB)
    retention_hours: int = Field(default=168, ge=1, le=24 * 365)
    capacity: Capacity = Capacity()
    description: str = Field(default="", max_length=1_000)
    failover: Failover | None = Field(
        default=None, description="standby clusters for automatic failover; null: none"
    )
    dedupe_window: str | None = Field(
        default=None,
        max_length=16,
        description="idempotent publish: a message whose X-Message-Id was accepted within "
        "this window (90s, 10m, 2h, 1d; at most a day) is answered as a duplicate and not "
        "stored again (docs/producing.md); absent: off",
    )

    archive: ArchiveSpec | None = Field(
        default=None,
        description="archive each closed window (an hour) of the topic's messages, every "
        "segment, to s3://bucket/prefix or file:///folder as Parquet (docs/archive.md); "
        "null: no archive",
    )

    cloudevents_group_attribute: str = Field(
        default=DEFAULT_GROUP_ATTRIBUTE,
        max_length=64,
        description="on a grouped topic, the CloudEvents attribute whose value is the group of "
        "an event published in the CloudEvents HTTP binding (partitionkey, subject, or any "
        "extension; docs/producing.md)",
    )

    @field_validator("cloudevents_group_attribute")
    @classmethod
    def _group_attribute(cls, name: str) -> str:
        if ATTRIBUTE_NAME.fullmatch(name) is None:
            raise ValueError(f"a CloudEvents attribute name is {NAME_RULE}")
        if name in ("id", "specversion", "datacontenttype"):
            raise ValueError(f"{name} cannot be the group: name another attribute")
        return name

    @field_validator("dedupe_window")
    @classmethod
    def _window(cls, window: str | None) -> str | None:
        if window is None:
            return None
        seconds = window_seconds(window)
        if not 1 <= seconds <= MAX_DEDUPE_WINDOW_S:
            raise ValueError("the dedupe window must lie between 1s and 1d")
        return window.strip().lower()

    @property
    def dedupe_window_ms(self) -> int | None:
        """The dedupe window in milliseconds, or None when dedupe is off."""
        return None if self.dedupe_window is None else window_seconds(self.dedupe_window) * 1000


class Topic(TopicSettings):
    """A named stream of messages in a project, stored as a timeline of segments."""

    project: Name
    name: Name
    grouped: bool = Field(default=False, description="messages carry a group id; order per group")
    created_at: datetime = Field(default_factory=utcnow)
    segments: tuple[Segment, ...] = ()
    produce_pointer: Pointer | None = None
    version: int = -1

    def segment(self, segment_id: int) -> Segment | None:
        return next((s for s in self.segments if s.id == segment_id), None)

    @property
    def active_segment(self) -> Segment | None:
        return self.segment(self.produce_pointer.segment_id) if self.produce_pointer else None

    @property
    def write_segment(self) -> Segment | None:
        """Where producers write: the active segment, or during a verified migration's dual
        write the shadow segment (``dual_write``), since the active one is external and
        written by its legacy producers (core.migration). The shadow segment is chosen while
        it is PENDING or ACTIVE, not only once the pointer names it: a topic read across the
        switch's commit (segments after it, pointer before) must not send a write to the
        external segment (refused) instead."""
        open_ = (SegmentState.PENDING, SegmentState.ACTIVE)
        shadow = (s for s in self.segments if s.dual_write and s.state in open_)
        return next(shadow, None) or self.active_segment


MAX_TIMEOUT_MS = 15 * 60 * 1000
DEFAULT_DISABLE_AFTER_S = 24 * 3_600
MAX_DISABLE_AFTER_S = 30 * 24 * 3_600


class Endpoint(Model):
    """Where a subscription's messages are pushed."""

    url: AnyHttpUrl
    method: Literal["POST", "PUT"] = "POST"
    timeout_ms: int = Field(
        default=10_000,
        ge=100,
        le=MAX_TIMEOUT_MS,
        description="how long one attempt may take, up to 15 minutes (a slow endpoint holds "
        "its subscription's in-flight slots, never another subscription's)",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="sent with every delivery; credentials (Authorization, Cookie, *-Token, "
        "*-Key, *-Secret…) are shown as ******** and kept when sent back so "
        "(core.secret_headers); secret:reveal shows them",
    )
    disable_after_s: int | None = Field(
        default=DEFAULT_DISABLE_AFTER_S,
        ge=1,
        le=MAX_DISABLE_AFTER_S,
        description="disable the subscription once every attempt has failed for this long "
        "(seconds, default 24 h, at most 30 days); null: never",
    )


DEFAULT_DELAY_LEVELS_MS = (1_000, 5_000, 30_000, 120_000, 600_000, 3_600_000)


class RetryPolicy(Model):
    """How a failed delivery is retried (see ``core.retry`` and DESIGN "Delivery semantics")."""

    max_attempts: int = Field(default=10, ge=1, le=1_000)
    backoff: Literal["fixed", "linear", "exponential"] = "exponential"
    initial_delay_ms: int = Field(default=1_000, ge=0, le=24 * 3_600_000)
    max_delay_ms: int = Field(default=600_000, ge=0, le=24 * 3_600_000)
    multiplier: float = Field(default=2.0, ge=1.0, le=100.0)
    jitter: float = Field(default=0.2, ge=0.0, le=1.0, description="fraction of the delay")
    retry_4xx: bool = Field(default=False, description="retry 4xx other than 408 and 429")
    retry_statuses: tuple[int, ...] | None = Field(
        default=None,
        max_length=200,
        description="HTTP statuses that retry (400 to 599); None: 408, 429 and every 5xx",
    )
    retry_timeouts: bool = Field(default=True, description="retry attempts that timed out")
    retry_connection_errors: bool = Field(
        default=True, description="retry attempts that could not connect or lost the connection"
    )
    delay_levels_ms: tuple[int, ...] = Field(
        default=DEFAULT_DELAY_LEVELS_MS,
        min_length=1,
        max_length=12,
        description="the delay queues (ms, increasing, 10 ms to 24 h): a message that must "
        "wait d goes to the largest level <= d; shorter waits are kept in memory",
    )

    @field_validator("retry_statuses")
    @classmethod
    def _statuses(cls, statuses: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if statuses is not None and any(not 400 <= s <= 599 for s in statuses):
            raise ValueError("retry statuses must be HTTP error statuses from 400 to 599")
        return statuses

    @field_validator("delay_levels_ms")
    @classmethod
    def _levels(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 10 <= level <= 24 * 3_600_000 for level in levels):
            raise ValueError("every delay level must lie between 10 ms and 24 h")
        if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
            raise ValueError("delay levels must be strictly increasing")
        return levels


class CircuitBreakerPolicy(Model):
    """When a subscription's endpoint is failing: the circuit opens once
    ``failure_rate_threshold`` of at least ``min_calls`` calls in the last ``window_seconds``
    failed, then only probes go (``probe_per_second``); after ``cooldown_seconds`` without a
    failure it half-opens and closes after a few successes. While closed, the dispatch rate
    adapts between ``floor_per_second`` and the subscription's ``rate_limit_per_second``."""

    enabled: bool = True
    failure_rate_threshold: float = Field(default=0.5, gt=0.0, le=1.0, description="0 < x <= 1")
    window_seconds: int = Field(default=30, ge=1, le=3_600)
    min_calls: int = Field(default=20, ge=1, le=100_000)
    cooldown_seconds: int = Field(default=10, ge=1, le=3_600)
    probe_per_second: float = Field(default=1.0, gt=0.0, le=100.0)
    floor_per_second: float = Field(default=1.0, gt=0.0, le=100_000.0)

    @model_validator(mode="after")
    def _probe_not_above_floor(self) -> CircuitBreakerPolicy:
        # An open circuit probing faster than a closed one may ever be throttled is nonsense.
        if self.probe_per_second > self.floor_per_second:
            raise ValueError(
                f"probe_per_second ({self.probe_per_second:g}) must not exceed "
                f"floor_per_second ({self.floor_per_second:g})"
            )
        return self


MAX_BATCH_MESSAGES = 1_000
MAX_BATCH_BYTES = 16 * 1024 * 1024


class BatchPolicy(Model):
    """Delivery in batches: one request carries up to ``max_messages`` messages as a JSON
    array (docs/receiving.md, "Batches"), of at most ``max_bytes`` of payload in all (a single
    larger message goes alone), sent when full or ``max_wait_ms`` after its first message was
    ready. The batch is one attempt: the endpoint's answer applies to every message of it."""

    max_messages: int = Field(default=100, ge=1, le=MAX_BATCH_MESSAGES)
    max_bytes: int = Field(default=1024 * 1024, ge=1, le=MAX_BATCH_BYTES)
    max_wait_ms: int = Field(default=100, ge=0, le=60_000)


class DeliveryFormat(StrEnum):
    """How a delivery request carries a message (docs/receiving.md)."""

    RAW = "raw"  # the payload as produced, httpbus's X- headers
    CLOUDEVENTS_BINARY = "cloudevents-binary"  # the payload, the attributes as ce- headers
    CLOUDEVENTS_STRUCTURED = "cloudevents-structured"  # application/cloudevents+json


class SubscriptionSettings(Model):
    """What an operator sets on a subscription (and may change later)."""

    endpoint: Endpoint
    filter: str | None = Field(default=None, max_length=4_096)
    retry: RetryPolicy = RetryPolicy()
    dlq_enabled: bool = True
    max_in_flight: int = Field(default=100, ge=1, le=10_000)
    rate_limit_per_second: float | None = Field(default=None, gt=0.0, le=1_000_000.0)
    circuit_breaker: CircuitBreakerPolicy = CircuitBreakerPolicy()
    delay_ms: int = Field(default=0, ge=0, le=7 * 24 * 3_600_000)
    paused: bool = False
    description: str = Field(default="", max_length=1_000)
    batch: BatchPolicy | None = Field(
        default=None,
        description="deliver up to max_messages messages per request (docs/receiving.md); "
        "absent: one message per request",
    )
    delivery_format: DeliveryFormat = Field(
        default=DeliveryFormat.RAW,
        description="raw: the payload as produced; cloudevents-binary: a CloudEvent with its "
        "attributes as ce- headers; cloudevents-structured: a CloudEvent as "
        "application/cloudevents+json (with batch: application/cloudevents-batch+json)",
    )
    auth: EndpointAuth = Field(
        default_factory=NoAuth,
        description="how deliveries authenticate to the endpoint (type none, "
        "oauth2_client_credentials, jwt or mtls; docs/receiving.md, 'Endpoint "
        "authentication'); client_secret and client_key are shown as ********",
    )

    @model_validator(mode="after")
    def _mtls_over_https(self) -> SubscriptionSettings:
        if isinstance(self.auth, MtlsAuth) and self.endpoint.url.scheme != "https":
            raise ValueError("auth mtls needs an https endpoint URL")
        return self

    @model_validator(mode="after")
    def _binary_is_one_event(self) -> SubscriptionSettings:
        if self.batch is not None and self.delivery_format is DeliveryFormat.CLOUDEVENTS_BINARY:
            raise ValueError(
                "delivery_format cloudevents-binary sends one event per request: use "
                "cloudevents-structured with batch, or no batch"
            )
        return self

    @field_validator("circuit_breaker")
    @classmethod
    def _floor_within_the_rate_limit(
        cls, policy: CircuitBreakerPolicy, info: ValidationInfo
    ) -> CircuitBreakerPolicy:
        limit = info.data.get("rate_limit_per_second")
        if policy.enabled and limit is not None and policy.floor_per_second > limit:
            raise ValueError(
                f"floor_per_second ({policy.floor_per_second:g}) must not exceed "
                f"rate_limit_per_second ({limit:g})"
            )
        return policy

    @field_validator("filter")
    @classmethod
    def _filter_compiles(cls, expression: str | None) -> str | None:
        try:
            compile_filter(expression)
        except FilterError as exc:
            raise ValueError(exc.message) from None
        return expression


DEFAULT_SECRET_OVERLAP_S = 24 * 3_600
MAX_SECRET_OVERLAP_S = 7 * 24 * 3_600
MAX_RETIRING_SECRETS = 4


class Disabled(Model):
    """Why and since when a subscription is disabled: its endpoint failed every attempt
    from ``failing_since`` (the first failure after the last success) until ``disabled_at``,
    longer than ``endpoint.disable_after_s``. Set by the worker that saw it (a
    compare-and-set), cleared by ``POST …/enable``."""

    failing_since: datetime
    disabled_at: datetime
    last_error: str | None = Field(default=None, max_length=500)
    by: str | None = Field(default=None, description="the worker that disabled it")

    def describe(self) -> str:
        """``disabled (endpoint failing since …)``, as status, the UI and the CLI show it."""
        since = self.failing_since.astimezone(UTC).isoformat(timespec="seconds")
        return f"disabled (endpoint failing since {since.replace('+00:00', 'Z')})"


class RetiringSecret(Model):
    """A signing secret a rotation replaced: deliveries are still signed with it (beside the
    current one) until ``until``, so receivers can switch to the new secret meanwhile."""

    secret: Secret
    until: datetime


StartAt = Literal["latest", "earliest"] | AwareDatetime
"""Where a new subscription begins: ``latest`` (what is published after it exists, the
default), ``earliest`` (the oldest retained message of the oldest readable segment) or a time
(the first message stored at or after it)."""


class StartPoint(Model):
    """Where a subscription began, resolved once when it was created: the segment its consume
    pointer was created at and, per partition, the first position it reads there. Readers use
    it only for a partition the subscription never committed (``segments.reader.floor``), so
    once a worker has committed, a restart or a rebalance resumes from the commits, never from
    here again. Later segments are read from their start; earlier ones never."""

    requested: StartAt = Field(description="what the create asked for")
    segment: int = Field(ge=1, description="the segment the subscription began in")
    positions: dict[int, int] = Field(
        default_factory=dict, description="per partition, the first position read there"
    )

    def position(self, segment: int, partition: int) -> int:
        """The first position to read in ``partition`` of ``segment`` when nothing was
        committed there: this start's in its own segment, else 0."""
        return self.positions.get(partition, 0) if segment == self.segment else 0


class SubscriptionBase(SubscriptionSettings):
    """A subscription as anyone may read it: everything but its signing secrets."""

    project: Name
    name: Name
    topic_project: Name
    topic: Name
    shards: int = Field(default=1, ge=1, le=MAX_SHARDS)
    created_at: datetime = Field(default_factory=utcnow)
    disabled: Disabled | None = Field(
        default=None, description="set while the subscription is disabled (failing endpoint)"
    )
    start: StartPoint | None = Field(
        default=None,
        description='where it began (docs/receiving.md, "Where a subscription starts"); '
        "absent on subscriptions created before start positions existed: they began at the "
        "start of their first segment",
    )
    consume_pointer: Pointer | None = None
    version: int = -1


class Subscription(SubscriptionBase):
    """A webhook endpoint that receives every message of a topic that passes its filter.

    Deliveries are signed with ``signing_secret`` and, during a rotation's overlap, with
    every ``retiring_secrets`` entry whose ``until`` has not passed (:meth:`secrets_at`).
    Records stored before rotations existed have neither rotation field and load as never
    rotated."""

    signing_secret: Secret
    signing_secret_rotated_at: datetime | None = None
    retiring_secrets: tuple[RetiringSecret, ...] = Field(
        default=(), max_length=MAX_RETIRING_SECRETS
    )

    def secrets_at(self, epoch_s: float) -> tuple[str, ...]:
        """The secrets that sign a delivery at ``epoch_s``: the current one first."""
        if not self.retiring_secrets:  # the hot path: no rotation under way
            return (self.signing_secret,)
        retiring = (r.secret for r in self.retiring_secrets if r.until.timestamp() > epoch_s)
        return (self.signing_secret, *retiring)

    def rotated(self, secret: str, at: datetime, overlap_s: float) -> Subscription:
        """This subscription signing with ``secret`` from ``at``; the current secret keeps
        signing for ``overlap_s`` more seconds, as do earlier ones still in their overlap.
        :class:`SecretInForce` if ``secret`` signs already, :class:`TooManySecrets` if more
        than :data:`MAX_RETIRING_SECRETS` earlier ones would still be in force."""
        now_s = at.timestamp()
        if secret in self.secrets_at(now_s):
            raise SecretInForce("the new secret must differ from every secret in force")
        kept = tuple(r for r in self.retiring_secrets if r.until.timestamp() > now_s)
        if overlap_s > 0:
            until = datetime.fromtimestamp(now_s + overlap_s, UTC)
            kept = (RetiringSecret(secret=self.signing_secret, until=until), *kept)
        if len(kept) > MAX_RETIRING_SECRETS:
            raise TooManySecrets(
                f"{len(kept)} earlier secrets would still sign: at most "
                f"{MAX_RETIRING_SECRETS}; wait for an overlap to end or rotate with overlap_s 0"
            )
        return self.model_copy(
            update={
                "signing_secret": secret,
                "signing_secret_rotated_at": at,
                "retiring_secrets": kept,
            }
        )


class ProduceToken(Model):
    """A bearer token that may publish to some topics of one project. Only its SHA-256 is
    kept; the token itself is shown once, when it is made."""

    id: str = Field(pattern=r"^[a-f0-9]{12}$")
    project: Name
    topics: tuple[Name | Literal["*"], ...] = Field(default=("*",), min_length=1, max_length=1000)
    sha256: str = Field(pattern=r"^[a-f0-9]{64}$")
    description: str = Field(default="", max_length=1_000)
    created_at: datetime = Field(default_factory=utcnow)

    def covers(self, project: str, topic: str) -> bool:
        return project == self.project and ("*" in self.topics or topic in self.topics)
