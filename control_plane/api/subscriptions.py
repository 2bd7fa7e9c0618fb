"""``/v1/projects/{project}/subscriptions``."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, status
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from control_plane.api.auth import ADMIN, OWNER, VIEWER, PrincipalDep
from control_plane.api.deps import (
    AdminDep,
    ListQueryDep,
    ProjectName,
    SearchTextsDep,
    SubscriptionName,
    project_page,
)
from control_plane.api.grants import check_consent
from control_plane.api.schemas import (
    DlqCount,
    ListedFailure,
    Page,
    SecretRotate,
    SecretsRevealed,
    SecretsShown,
    SubscriptionCreate,
    SubscriptionCreated,
    SubscriptionListed,
    SubscriptionUpdate,
    SubscriptionView,
)
from control_plane.services.admin import rotate
from control_plane.services.operations import Listed, SeekTarget, SubscriptionOps
from control_plane.services.sample_events import SampleEvents
from core.endpoint_auth import unmasked as unmasked_auth
from core.model import DEFAULT_SECRET_OVERLAP_S, Subscription, utcnow
from core.sample_event import SampleResult
from core.secret_headers import refuse_masked, unmasked

audit_log = logging.getLogger("httpbus.audit")

router = APIRouter(prefix="/v1/projects/{project}/subscriptions", tags=["subscriptions"])


def view(sub: Subscription) -> SubscriptionView:
    """What the API shows of ``sub``: never a signing secret."""
    return SubscriptionView.of(sub, utcnow())


@router.post("", status_code=status.HTTP_201_CREATED, **OWNER)
async def create_subscription(
    project: ProjectName, body: SubscriptionCreate, admin: AdminDep, request: Request
) -> SubscriptionCreated:
    """Create a subscription; the answer shows its signing secret this once. A topic of
    another project (``other/topic``) needs its owner's grant (403 ``grant_required``)."""
    await check_consent(request, project, body.topic)
    sub = await admin.create_subscription(project, body)
    return SubscriptionCreated(**view(sub).model_dump(), signing_secret=sub.signing_secret)


def _ops(request: Request, admin: AdminDep) -> SubscriptionOps:
    return SubscriptionOps(admin.catalog, admin.stores, request.app.state.member_id)


OpsDep = Annotated[SubscriptionOps, Depends(_ops)]


@router.get("", **VIEWER)
async def list_subscriptions(
    project: ProjectName,
    admin: AdminDep,
    ops: OpsDep,
    query: ListQueryDep,
    search: SearchTextsDep,
) -> Page[SubscriptionListed]:
    """A page of the project's subscriptions, each with its circuit's state, what its DLQ
    holds and its last failure, as its workers last published them (no DLQ is read); ``q``
    searches names, descriptions, topics and endpoint URLs; ``next_cursor`` (null on the
    last page) and ``prev_cursor`` ask for the pages around."""

    async def fetch(name: str) -> SubscriptionListed:
        sub = await admin.catalog.get_subscription(project, name)  # NotFound: deleted
        return _row(sub, (await ops.listed([sub]))[0], utcnow())

    async def fetch_many(names: list[str]) -> list[SubscriptionListed]:
        """The page's subscriptions and their workers' figures in two bulk reads."""
        subs = await admin.catalog.get_subscriptions(project, names)
        now = utcnow()
        return [
            _row(sub, found, now) for sub, found in zip(subs, await ops.listed(subs), strict=True)
        ]

    async def describe(names: list[str]) -> dict[str, str]:
        subs = await admin.catalog.describe_subscriptions(project, names)
        return {
            s.name: f"{s.description}\n{s.topic_project}/{s.topic}\n{s.endpoint.url}" for s in subs
        }

    texts = search.of(f"subscriptions/{project}", describe)
    names_of = admin.catalog.list_subscriptions
    return await project_page(admin, project, names_of, query, fetch, texts, fetch_many)


def _row(sub: Subscription, found: Listed, now: datetime) -> SubscriptionListed:
    """A row of the list: the subscription and what its workers last published of it."""
    listed = SubscriptionListed.of(sub, now)
    dlq = DlqCount.model_validate(found.dlq) if found.dlq is not None else None
    failure = found.last_failure
    last = ListedFailure.model_validate(failure) if failure is not None else None
    update = {"circuit": found.circuit, "dlq": dlq, "last_failure": last}
    return listed.model_copy(update=update)


@router.get("/{subscription}", **VIEWER)
async def get_subscription(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> SubscriptionView:
    return view(await admin.catalog.get_subscription(project, subscription))


@router.put("/{subscription}", **OWNER)
async def update_subscription(
    project: ProjectName,
    subscription: SubscriptionName,
    body: SubscriptionUpdate,
    admin: AdminDep,
    search: SearchTextsDep,
) -> SubscriptionView:
    """Replace the settings. A ``signing_secret`` other than the current one rotates to it
    with the default overlap, in the same compare-and-set (``secret:rotate`` sets the
    overlap). An endpoint header sent as read (``********``) keeps its stored value."""
    search.forget(f"subscriptions/{project}", subscription)
    current = await admin.catalog.get_subscription(project, subscription)
    changes = body.model_dump(exclude={"signing_secret"})
    # What was read shows credentials masked: sent back so, they keep the stored value.
    changes["endpoint"]["headers"] = unmasked(body.endpoint.headers, current.endpoint.headers)
    changes["auth"] = unmasked_auth(changes["auth"], current.auth)  # the same for auth
    updated = Subscription.model_validate({**current.model_dump(), **changes})
    if body.signing_secret is not None and body.signing_secret != current.signing_secret:
        updated = rotate(
            updated, body.signing_secret, DEFAULT_SECRET_OVERLAP_S, field="signing_secret"
        )
    admin.check_endpoint(updated)
    refuse_masked(updated.endpoint.headers)
    await admin.prepare_auth(updated)
    return view(await admin.catalog.update_subscription(updated))


@router.delete("/{subscription}", status_code=status.HTTP_204_NO_CONTENT, **OWNER)
async def delete_subscription(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> None:
    await admin.catalog.delete_subscription(project, subscription)


# ------------------------------------------------------------ signing secrets


@router.post("/{subscription}/secret:rotate", **OWNER)
async def rotate_secret(
    project: ProjectName,
    subscription: SubscriptionName,
    admin: AdminDep,
    body: SecretRotate | None = None,
) -> SecretsShown:
    """Sign with a new secret (``secret``, or a generated one) from now on; the current one
    keeps signing beside it for ``overlap_s`` (default 24 h), so every delivery meanwhile
    carries both signatures. The answer shows the new secret this once."""
    wanted = body or SecretRotate()
    sub = await admin.rotate_secret(project, subscription, wanted.secret, wanted.overlap_s)
    return SecretsShown.of(sub, utcnow())


@router.post("/{subscription}/secret:reveal", **ADMIN)
async def reveal_secret(
    project: ProjectName,
    subscription: SubscriptionName,
    admin: AdminDep,
    request: Request,
    principal: PrincipalDep,
) -> SecretsRevealed:
    """Every signing secret in force and the endpoint's credential headers (admin only),
    written to the audit log with who asked."""
    sub = await admin.catalog.get_subscription(project, subscription)
    client = request.client.host if request.client else "-"
    audit_log.warning(
        "signing secret and endpoint credentials revealed: subscription=%s/%s by=%s "
        "client=%s user_agent=%r",
        project,
        subscription,
        principal.label,
        client,
        request.headers.get("user-agent", ""),
    )
    return SecretsRevealed.revealed(sub, utcnow())


# ------------------------------------------------------------ operations


class SeekRequest(BaseModel):
    """Exactly one of ``to`` and ``timestamp``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    to: Literal["earliest", "latest"] | None = None
    timestamp: AwareDatetime | None = Field(default=None, description="RFC 3339, with an offset")

    @model_validator(mode="after")
    def _exactly_one(self) -> SeekRequest:
        if (self.to is None) == (self.timestamp is None):
            raise ValueError('give exactly one of "to" (earliest or latest) and "timestamp"')
        return self


class SeekResponse(BaseModel):
    segment: int
    positions: dict[str, int] = Field(description="per partition, the next position to read")


@router.post("/{subscription}/stop", **OWNER)
async def stop_subscription(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> SubscriptionView:
    """Pause delivery, keeping the position (idempotent)."""
    return view(await ops.set_paused(project, subscription, True))


@router.post("/{subscription}/start", **OWNER)
async def start_subscription(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> SubscriptionView:
    """Resume delivery from the committed position (idempotent)."""
    return view(await ops.set_paused(project, subscription, False))


@router.post("/{subscription}/enable", **OWNER)
async def enable_subscription(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> SubscriptionView:
    """Enable a subscription disabled because its endpoint failed every attempt for
    ``endpoint.disable_after_s``: delivery resumes from the committed position, so every
    message not delivered yet is delivered (idempotent). ``start`` does not do this: it
    ends a pause only."""
    return view(await ops.enable(project, subscription))


@router.post("/{subscription}/seek", **OWNER)
async def seek_subscription(
    project: ProjectName, subscription: SubscriptionName, body: SeekRequest, ops: OpsDep
) -> SeekResponse:
    """Move what the subscription reads next: earliest, latest, or a timestamp."""
    result = await ops.seek(project, subscription, SeekTarget(body.to, body.timestamp))
    return SeekResponse(
        segment=result.segment, positions={str(p): v for p, v in result.positions.items()}
    )


@router.post("/{subscription}/test-event", **OWNER)
async def send_test_event(
    project: ProjectName, subscription: SubscriptionName, request: Request, admin: AdminDep
) -> SampleResult:
    """Send a test event to the endpoint, now: a small JSON body, signed exactly as a
    delivery (the worker holding the subscription sends it through its delivery sender, so the
    endpoint policy and the answer limits apply) and marked ``X-Test: true``. Answers the
    endpoint's status, latency and the start of its answer. Paused and disabled subscriptions
    answer too; 503 ``not_ready`` if no worker holds the subscription."""
    events = SampleEvents(admin.catalog, request.app.state.member_id)
    return await events.send(project, subscription)


@router.get("/{subscription}/status", **VIEWER)
async def subscription_status(
    project: ProjectName,
    subscription: SubscriptionName,
    ops: OpsDep,
    range: Annotated[
        Literal["10m", "1h"], Query(description="how far back ``history`` goes")
    ] = "1h",
) -> dict[str, Any]:
    """Lag per partition, in-flight, rates, totals, the DLQ as stored (size, failed heads,
    sidelined followers, by error), failures by status, the last failure with the endpoint's
    answer, and the last ``range`` in 10-second buckets (delivered, failed, filtered,
    dead-lettered, lag)."""
    return await ops.status(project, subscription, range_s=RANGES[range])


RANGES = {"10m": 600, "1h": 3_600}
