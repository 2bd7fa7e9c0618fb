"""Request and response bodies of the admin API (server-managed fields are not accepted).
The inputs the services take (``TopicCreate``, ``SubscriptionCreate``, ``MigrationStart``)
are defined in :mod:`control_plane.services.inputs` and accepted here as they are."""

from __future__ import annotations

from datetime import datetime
from typing import Generic, Literal, Self, TypeVar

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, field_validator

from control_plane.services.inputs import (
    MigrationStart,
    SubscriptionCreate,
    TopicCreate,
    secret_decodes,
    secret_field,
)
from core.endpoint_auth import masked as masked_auth
from core.model import (
    DEFAULT_SECRET_OVERLAP_S,
    MAX_SECRET_OVERLAP_S,
    Failover,
    Notifications,
    Pointer,
    Project,
    Segment,
    Subscription,
    SubscriptionBase,
    SubscriptionSettings,
    TopicSettings,
)
from core.names import Name
from core.secret_headers import is_secret, masked

T = TypeVar("T")


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_NOTIFICATION_URL = (
    "where the project's operational events go (`notifications`: by default when one of its "
    "subscriptions is disabled; a signed JSON POST each, docs/operations.md); checked "
    "against the endpoint policy"
)


_NOTIFICATIONS = (
    "which operational events go to the notification URL (subscription.failing, .recovered, "
    ".dead_lettered, .circuit_opened, .circuit_closed, .disabled, .enabled) and their bounds"
)


class ProjectCreate(_Body):
    name: Name
    description: str = Field(default="", max_length=1_000)
    notification_url: AnyHttpUrl | None = Field(default=None, description=_NOTIFICATION_URL)
    notifications: Notifications = Field(default_factory=Notifications, description=_NOTIFICATIONS)


class ProjectUpdate(_Body):
    description: str = Field(default="", max_length=1_000)
    notification_url: AnyHttpUrl | None = Field(
        default=None, description=_NOTIFICATION_URL + "; absent: unchanged, null: none"
    )
    notifications: Notifications | None = Field(
        default=None, description=_NOTIFICATIONS + "; absent: unchanged"
    )
    version: int = Field(description="the version you read; a stale one is refused (409)")


class ProjectView(_Body):
    """A project as the API shows it: whether it has a notification secret, never the
    secret."""

    name: Name
    description: str
    notification_url: AnyHttpUrl | None = None
    notification_secret_set: bool = False
    notifications: Notifications = Field(default_factory=Notifications)
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


class TopicUpdate(TopicSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")


_SECRETS = {"signing_secret", "signing_secret_rotated_at", "retiring_secrets"}


class SubscriptionUpdate(SubscriptionSettings):
    version: int = Field(description="the version you read; a stale one is refused (409)")
    signing_secret: str | None = secret_field(
        "a new secret rotates to it as `secret:rotate` does, with the default "
        f"overlap ({DEFAULT_SECRET_OVERLAP_S} s); the current one or absent: no change",
    )

    _secret_decodes = field_validator("signing_secret")(secret_decodes)


class SecretRotate(_Body):
    """``POST …/secret:rotate``: both fields are optional, and so is the body."""

    secret: str | None = secret_field("the new secret ('whsec_' and base64); generated when absent")
    overlap_s: int = Field(
        default=DEFAULT_SECRET_OVERLAP_S,
        ge=0,
        le=MAX_SECRET_OVERLAP_S,
        description="seconds during which the current secret keeps signing beside the new one",
    )

    _secret_decodes = field_validator("secret")(secret_decodes)


class SubscriptionView(SubscriptionBase):
    """A subscription as the API shows it: whether a signing secret is set and since when,
    never the secret, and its endpoint's credential headers masked (``secret:reveal``
    shows both, audited)."""

    signing_secret_set: bool = True
    signing_secret_rotated_at: datetime | None = None
    previous_secrets_until: datetime | None = Field(
        default=None,
        description="the end of a rotation's overlap: until then earlier secrets sign too",
    )

    @classmethod
    def of(cls, sub: Subscription, at: datetime) -> Self:
        """What ``sub`` shows at ``at`` (expired overlaps are not mentioned)."""
        fields = sub.model_dump(exclude=_SECRETS)
        fields["endpoint"]["headers"] = masked(sub.endpoint.headers)
        fields["auth"] = masked_auth(sub.auth).model_dump()
        ending = [r.until for r in sub.retiring_secrets if r.until > at]
        return cls(
            **fields,
            signing_secret_rotated_at=sub.signing_secret_rotated_at,
            previous_secrets_until=max(ending, default=None),
        )


class DlqCount(_Body):
    """What a subscription's DLQ holds, as its worker counts it (docs/operations.md)."""

    size: int = Field(description="live entries")
    failed_heads: int = Field(description="entries attempted that failed for good")
    sidelined: int = Field(
        description="entries that followed their group's failed head, never attempted"
    )
    counted_by: Literal["worker", "storage"] = Field(
        description="worker: the count its worker publishes; storage: read from the DLQ now"
    )
    live: bool = Field(
        description="true: kept up to date (its worker follows the DLQ, or it was just "
        "read); false: the last count, which its worker could not bring up to date (its "
        "storage away, or the runner restarting)"
    )


class ListedFailure(_Body):
    """The newest failed attempt of a subscription, as a list row shows it."""

    at: datetime | None
    status: int | None = Field(description="the endpoint's HTTP status; null: no answer")
    error: str | None


class SubscriptionListed(SubscriptionView):
    """A row of the subscription list: the view, the state of its circuit and what its DLQ
    holds, so a list does not call a subscription "active" while its endpoint's circuit is
    open or its DLQ fills."""

    circuit: str | None = Field(
        default=None,
        description="the circuit as its worker last reported it: closed, half_open or open; "
        "null before a worker reported",
    )
    dlq: DlqCount | None = Field(
        default=None, description="its DLQ's size as its worker counts it; null before a count"
    )
    last_failure: ListedFailure | None = Field(
        default=None, description="the newest failed attempt its workers saw; null: none"
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


class SecretsRevealed(SecretsShown):
    """The answer of ``secret:reveal``: the signing secrets, and the endpoint's headers that
    every read shows masked."""

    endpoint_headers: dict[str, str] = Field(
        description="the endpoint's credential headers (Authorization, *-Token, *-Key…)"
    )
    auth_secrets: dict[str, str] = Field(
        default_factory=dict,
        description="the write-only fields of auth: client_secret (oauth2_client_credentials) "
        "or client_key (mtls)",
    )

    @classmethod
    def revealed(cls, sub: Subscription, at: datetime) -> SecretsRevealed:
        headers = {k: v for k, v in sub.endpoint.headers.items() if is_secret(k)}
        written = sub.auth.model_dump(include={"client_secret", "client_key"}, exclude_none=True)
        return cls(
            **SecretsShown.of(sub, at).model_dump(), endpoint_headers=headers, auth_secrets=written
        )


class Page(_Body, Generic[T]):
    """A page of a list, by cursor: ``next_cursor`` (null on the last page) and
    ``prev_cursor`` (null on the first) ask for the pages around it."""

    items: list[T]
    total: int = Field(description="how many the list holds, before the search")
    offset: int = Field(description="where the page's first item is in the list")
    limit: int
    next_cursor: str | None = Field(default=None, description="null on the last page")
    prev_cursor: str | None = Field(default=None, description="null on the first page")


class Timeline(_Body):
    project: str
    topic: str
    produce_pointer: Pointer | None
    segments: list[Segment]
    failover: Failover | None = None


__all__ = ["MigrationStart", "SubscriptionCreate", "TopicCreate"]  # inputs of the services
