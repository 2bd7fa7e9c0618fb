"""``/v1/projects/{project}/subscriptions/{subscription}/replay``: replay a window of the
topic, from its archive and from storage, into this subscription only; and how far it got
(:mod:`control_plane.services.replays`; docs/archive.md)."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import AdminDep, ProjectName, SubscriptionName
from control_plane.services import replays

router = APIRouter(
    prefix="/v1/projects/{project}/subscriptions/{subscription}", tags=["subscriptions"]
)


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: AwareDatetime = Field(description="accepted at or after this time (RFC 3339)")
    until: AwareDatetime = Field(description="accepted before this time (RFC 3339)")
    rate: int = Field(
        default=100, ge=1, le=10_000, description="messages a second handed to the subscription"
    )


class ReplayView(BaseModel):
    id: str
    subscription: str = Field(description="project/name: the only subscription it goes to")
    since: str
    until: str
    rate: int
    state: str = Field(description="pending, running, done or failed")
    total: int | None = Field(description="messages in the window, once collected")
    written: int = Field(description="handed to the subscription so far (it delivers them)")
    from_archive: int
    from_storage: int
    error: str | None
    created: str
    finished: str | None


@router.post("/replay", status_code=status.HTTP_202_ACCEPTED, **OWNER)
async def replay(
    project: ProjectName, subscription: SubscriptionName, body: ReplayRequest, admin: AdminDep
) -> ReplayView:
    """Replay the messages of the topic accepted in ``[since, until)`` — the archived hours
    and what storage still holds — into this subscription only, through its filter, signing,
    retries and DLQ, marked ``X-Replay: true``, in group order, ``rate`` a second. 202: the
    replayer has it (``GET …/replay`` for progress); 409 ``in_use`` while another replay of
    the subscription is open."""
    since_ms = int(body.since.timestamp() * 1000)
    until_ms = int(body.until.timestamp() * 1000)
    started = await replays.start(
        admin.catalog, project, subscription, since_ms, until_ms, body.rate
    )
    return ReplayView.model_validate(started.view())


@router.get("/replay", **VIEWER)
async def replay_status(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> ReplayView:
    """The subscription's latest window replay: its state and how many messages it wrote of
    how many. 404 ``not_found`` if it never had one."""
    found = await replays.status(admin.catalog, project, subscription)
    return ReplayView.model_validate(found.view())
