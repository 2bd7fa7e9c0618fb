"""``/v1/projects/{project}/subscriptions/{subscription}/resend`` and ``…/recover``: send one
message of the topic to this subscription again, or replay the DLQ entries that failed in a
window (:mod:`control_plane.services.resends`, :mod:`control_plane.services.dead_letters`;
docs/operations.md, "Resend and recover")."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, status
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER
from control_plane.api.deps import AdminDep, ProjectName, SubscriptionName
from control_plane.services import dead_letters, resends
from control_plane.services.operations import SubscriptionOps
from reports.trace import TraceIndex

PREFIX = "/v1/projects/{project}/subscriptions/{subscription}"


class ResendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: str = Field(min_length=1, max_length=256, description="X-Message-Id of it")


class ResendResponse(BaseModel):
    message_id: str
    subscription: str = Field(description="project/name: the only subscription it goes to")
    segment: int = Field(description="where it was read from: segment, partition, position")
    partition: int
    position: int
    trace: str = Field(description="the message's trace: a `resent` event, then its attempts")


class RecoverRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    since: AwareDatetime = Field(description="failed at or after this time (RFC 3339)")
    until: AwareDatetime = Field(description="failed before this time (RFC 3339)")
    limit: int = Field(default=1_000, ge=1, le=10_000, description="entries in this call")


class Recovered(BaseModel):
    recovered: int
    remaining: int = Field(description="entries of the window still in the DLQ: call again")


def router(index: TraceIndex) -> APIRouter:
    """Resend and recover, for owners of the subscription's project."""
    api = APIRouter(prefix=PREFIX, tags=["subscriptions"])

    @api.post("/resend", status_code=status.HTTP_202_ACCEPTED, **OWNER)
    async def resend(
        project: ProjectName,
        subscription: SubscriptionName,
        body: ResendRequest,
        admin: AdminDep,
        request: Request,
    ) -> ResendResponse:
        """Send one message of the topic (found by id in the trace index) to this
        subscription again, through its filter, signing, retries and DLQ; no other
        subscription sees it. 202: it waits in the subscription's replay topic; its trace
        (``trace``) shows the resend and the new attempts. 404 ``not_found`` if the id is
        not in the trace index or the message is no longer stored."""
        ops = SubscriptionOps(admin.catalog, admin.stores, request.app.state.member_id)
        done = await resends.resend(admin, ops, index, project, subscription, body.message_id)
        sub = await admin.catalog.get_subscription(project, subscription)
        return ResendResponse(
            message_id=done.message_id,
            subscription=f"{project}/{subscription}",
            segment=done.segment,
            partition=done.partition,
            position=done.position,
            trace=_trace(sub.topic_project, sub.topic, done.message_id),
        )

    @api.post("/recover", **OWNER)
    async def recover(
        project: ProjectName, subscription: SubscriptionName, body: RecoverRequest, admin: AdminDep
    ) -> Recovered:
        """Replay the dead-lettered messages whose last failure lies in ``[since, until)``,
        oldest first, at most ``limit``, through the normal path with their attempts reset
        (audited ``recovered``); ``remaining`` says how many more of the window are left."""
        since_ms, until_ms = dead_letters.window(body.since, body.until)
        done, remaining = await dead_letters.recover(
            admin, project, subscription, since_ms, until_ms, body.limit
        )
        return Recovered(recovered=done, remaining=remaining)

    return api


def _trace(project: str, topic: str, message_id: str) -> str:
    """The API path of a message's trace (``control_plane.api.trace``)."""
    parts = ("v1", "projects", project, "topics", topic, "messages", message_id)
    return "/" + "/".join(quote(p, safe="") for p in parts)
