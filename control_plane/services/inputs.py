"""What the services take: the inputs of creating a topic, a subscription, a verified
migration. The admin API accepts them as request bodies (``control_plane.api.schemas``
re-uses them), so a service never imports the HTTP layer that calls it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from core.model import (
    Partitions,
    StartAt,
    SubscriptionSettings,
    TopicSettings,
    utcnow,
    window_seconds,
)
from core.names import Name
from core.shards import MAX_SHARDS
from core.signing import check_new_secret


def secret_field(description: str) -> Any:
    """An optional signing secret in a request body ('whsec_' and base64)."""
    return Field(default=None, min_length=24, max_length=256, description=description)


def secret_decodes(cls: type, secret: str | None) -> str | None:
    """A secret that does not decode, lacks ``whsec_`` or has a key of zeros is refused here
    (422 naming the field), not at every delivery."""
    if secret is not None:
        check_new_secret(secret)  # ValueError says what a secret is
    return secret


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


class SubscriptionCreate(SubscriptionSettings):
    name: Name
    topic: str = Field(
        description="'topic' in this project, or 'project/topic'",
        pattern=r"^([A-Za-z0-9][A-Za-z0-9_-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
    )
    signing_secret: str | None = secret_field(
        "'whsec_' and base64 (Standard Webhooks); generated when absent"
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=MAX_SHARDS,
        description="workers that share the delivery (see docs/shards.md); fixed at creation",
    )

    start: StartAt = Field(
        default="latest",
        description="where it begins: 'latest' (only what is published after it exists), "
        "'earliest' (the topic's whole retained backlog) or an RFC 3339 time (the first "
        "message stored at or after it); used once, at its first start (docs/receiving.md)",
    )

    _secret_decodes = field_validator("signing_secret")(secret_decodes)

    @field_validator("start", mode="wrap")
    @classmethod
    def _start(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> StartAt:
        """One problem named ``start`` (not one per member of the union)."""
        try:
            start: StartAt = handler(value)
        except ValidationError:
            raise ValueError(
                f"{str(value)[:40]!r}: 'latest', 'earliest' or an RFC 3339 time with an offset"
            ) from None
        # A time ahead would let through what is published until then: 'latest' says it.
        if isinstance(start, datetime) and start > utcnow():
            raise ValueError("a start time must not lie in the future; use 'latest'")
        return start


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
