"""Request and response bodies of the admin API (server-managed fields are not accepted)."""

from __future__ import annotations

from datetime import datetime
from typing import Generic, TypeVar

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, field_validator, model_validator

from core.model import (
    DEFAULT_SECRET_OVERLAP_S,
    MAX_SECRET_OVERLAP_S,
    Failover,
    Partitions,
    Pointer,
    Project,
    Segment,
    Subscription,
    SubscriptionBase,
    SubscriptionSettings,
    TopicSettings,
    window_seconds,
)
from core.names import Name
from core.shards import MAX_SHARDS
from core.signing import signing_key

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_NOTIFICATION_URL = (
    "where a notice goes when one of the project's subscriptions is disabled (a signed JSON "
    "POST, docs/operations.md); checked against the endpoint policy"
)


class ProjectCreate(_Body):
    name: Name
    description: str = Field(default="", max_length=1_000)
    notification_url: AnyHttpUrl | None = Field(default=None, description=_NOTIFICATION_URL)


class ProjectUpdate(_Body):
    description: str = Field(default="", max_length=1_000)
    notification_url: AnyHttpUrl | None = Field(
        default=None, description=_NOTIFICATION_URL + "; absent: unchanged, null: none"
    )
    version: int = Field(description="the version you read; a stale one is refused (409)")


class ProjectView(_Body):
    """A project as the API shows it: whether it has a notification secret, never the
    secret."""

    name: Name
    description: str
    notification_url: AnyHttpUrl | None = None
    notification_secret_set: bool = False
    created_at: datetime
    version: int

    @classmethod
    def of(cls, project: Project) -> ProjectView:
        fields = project.model_dump(exclude={"notification_secret"})
        return cls(**fields, notification_secret_set=project.notification_secret is not None)


class ProjectShown(ProjectView):
    """The answer to a create (and to an update that made the project's first notification
    secret): the view and, this once, the secret notices are signed with."""

    notification_secret: str | None = Field(
        default=None, description="shown once: verify notices with it (Standard Webhooks)"
    )


class TopicCreate(TopicSettings):
    name: Name
    grouped: bool = False
    cluster: str | None = Field(default=None, description="storage cluster; default from config")
    partitions: Partitions = 1
    external_topic: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="adopt this existing Kafka topic of a read_only cluster as the first "
        "segment (docs/migrating.md); partitions must be its partition count",
    )


class TopicUpdate(TopicSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")


_SECRETS = {"signing_secret", "signing_secret_rotated_at", "retiring_secrets"}


def _decodes(cls: type, secret: str | None) -> str | None:
    """A secret that does not decode is refused here (422 naming the field), not at every
    delivery."""
    if secret is not None:
        signing_key(secret)  # ValueError says what a secret is
    return secret


class SubscriptionCreate(SubscriptionSettings):
    name: Name
    topic: str = Field(
        description="'topic' in this project, or 'project/topic'",
        pattern=r"^([A-Za-z0-9][A-Za-z0-9_-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
    )
    signing_secret: str | None = Field(
        default=None,
        min_length=24,
        max_length=256,
        description="'whsec_' and base64 (Standard Webhooks); generated when absent",
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=MAX_SHARDS,
        description="workers that share the delivery (see docs/shards.md); fixed at creation",
    )

    _secret_decodes = field_validator("signing_secret")(_decodes)


class SubscriptionUpdate(SubscriptionSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")
    signing_secret: str | None = Field(
        default=None,
        min_length=24,
        max_length=256,
        description="a new secret rotates to it as `secret:rotate` does, with the default "
        f"overlap ({DEFAULT_SECRET_OVERLAP_S} s); the current one or absent: no change",
    )

    _secret_decodes = field_validator("signing_secret")(_decodes)


class SecretRotate(_Body):
    """``POST …/secret:rotate``: both fields are optional, and so is the body."""

    secret: str | None = Field(
        default=None,
        min_length=24,
        max_length=256,
        description="the new secret ('whsec_' and base64); generated when absent",
    )
    overlap_s: int = Field(
        default=DEFAULT_SECRET_OVERLAP_S,
        ge=0,
        le=MAX_SECRET_OVERLAP_S,
        description="seconds during which the current secret keeps signing beside the new one",
    )

    _secret_decodes = field_validator("secret")(_decodes)


class SubscriptionView(SubscriptionBase):
    """A subscription as the API shows it: whether a signing secret is set and since when,
    never the secret (``secret:reveal`` does, audited)."""

    signing_secret_set: bool = True
    signing_secret_rotated_at: datetime | None = None
    previous_secrets_until: datetime | None = Field(
        default=None,
        description="the end of a rotation's overlap: until then earlier secrets sign too",
    )

    @classmethod
    def of(cls, sub: Subscription, at: datetime) -> SubscriptionView:
        """What ``sub`` shows at ``at`` (expired overlaps are not mentioned)."""
        fields = sub.model_dump(exclude=_SECRETS)
        ending = [r.until for r in sub.retiring_secrets if r.until > at]
        return cls(
            **fields,
            signing_secret_rotated_at=sub.signing_secret_rotated_at,
            previous_secrets_until=max(ending, default=None),
        )


class SubscriptionCreated(SubscriptionView):
    """The answer to a create: the view and, this once, the signing secret."""

    signing_secret: str = Field(description="shown once; afterwards only secret:reveal shows it")


class SecretEntry(_Body):
    secret: str
    until: datetime | None = Field(description="when it stops signing; None: the current one")


class SecretsShown(_Body):
    """The answer of ``secret:rotate`` (the new secret, shown once) and ``secret:reveal``."""

    signing_secret: str = Field(description="the current secret, the first that signs")
    signing_secret_rotated_at: datetime | None
    secrets: list[SecretEntry] = Field(description="every secret in force, the current first")
    version: int

    @classmethod
    def of(cls, sub: Subscription, at: datetime) -> SecretsShown:
        entries = [SecretEntry(secret=sub.signing_secret, until=None)]
        entries += [
            SecretEntry(secret=r.secret, until=r.until)
            for r in sub.retiring_secrets
            if r.until > at
        ]
        return cls(
            signing_secret=sub.signing_secret,
            signing_secret_rotated_at=sub.signing_secret_rotated_at,
            secrets=entries,
            version=sub.version,
        )


class Page(_Body, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


class Timeline(_Body):
    project: str
    topic: str
    produce_pointer: Pointer | None
    segments: list[Segment]
    failover: Failover | None = None


MAX_MIGRATION_WINDOW_S = 7 * 86_400
MAX_GUARD_S = 30 * 86_400


def _duration(text: str, field: str, low: int, high: int) -> int:
    seconds = window_seconds(text)
    if not low <= seconds <= high:
        raise ValueError(f"{field} must lie between {low}s and {high}s, not {text!r}")
    return seconds


class MigrationStart(BaseModel):
    """A verified migration of a topic whose active segment is external (docs/migrating.md):
    where its shadow segment goes and how the dual writes are judged."""

    model_config = ConfigDict(extra="forbid")

    cluster: Name = Field(description="the cluster of the shadow segment (one httpbus writes)")
    partitions: Partitions | None = Field(
        default=None, description="of the shadow segment; default: the external segment's"
    )
    window: str = Field(default="1h", max_length=16, description="tumbling window: 90s, 10m, 1h")
    session_gap: str = Field(
        default="5m", max_length=16, description="a match later than this is late (0s: none)"
    )
    clean_windows: int = Field(
        default=3, ge=1, le=1_000, description="closed clean windows in a row before a switch"
    )
    guard: str = Field(
        default="1h", max_length=16, description="after a switch: how long a dirty window undoes it"
    )

    @field_validator("window")
    @classmethod
    def _window(cls, text: str) -> str:
        _duration(text, "window", 1, MAX_MIGRATION_WINDOW_S)
        return text.strip().lower()

    @field_validator("session_gap")
    @classmethod
    def _gap(cls, text: str) -> str:
        _duration(text, "session_gap", 0, MAX_MIGRATION_WINDOW_S)
        return text.strip().lower()

    @field_validator("guard")
    @classmethod
    def _guard(cls, text: str) -> str:
        _duration(text, "guard", 0, MAX_GUARD_S)
        return text.strip().lower()

    @model_validator(mode="after")
    def _gap_within_window(self) -> MigrationStart:
        if window_seconds(self.session_gap) > window_seconds(self.window):
            raise ValueError(
                f"session_gap ({self.session_gap}) must not exceed the window ({self.window})"
            )
        return self
