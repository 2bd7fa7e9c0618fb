"""Request and response bodies of the admin API (server-managed fields are not accepted)."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.model import (
    Partitions,
    Pointer,
    Segment,
    SubscriptionSettings,
    TopicSettings,
)
from core.names import Name
from core.shards import MAX_SHARDS
from core.signing import signing_key

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProjectCreate(_Body):
    name: Name
    description: str = Field(default="", max_length=1_000)


class ProjectUpdate(_Body):
    description: str = Field(default="", max_length=1_000)
    version: int = Field(description="the version you read; a stale one is refused (409)")


class TopicCreate(TopicSettings):
    name: Name
    grouped: bool = False
    cluster: str | None = Field(default=None, description="storage cluster; default from config")
    partitions: Partitions = 1


class TopicUpdate(TopicSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")


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

    @field_validator("signing_secret")
    @classmethod
    def _secret_decodes(cls, secret: str | None) -> str | None:
        """Refused here (422 naming the field), not at every delivery."""
        if secret is not None:
            signing_key(secret)  # ValueError says what a secret is
        return secret


class SubscriptionUpdate(SubscriptionSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")


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
