"""``/v1/projects/{project}/subscriptions``."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, status
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from core.model import Subscription

from ..operations import SeekTarget, SubscriptionOps
from .deps import AdminDep, Limit, Offset, ProjectName, SubscriptionName, merged, page
from .schemas import Page, SubscriptionCreate, SubscriptionUpdate

router = APIRouter(prefix="/v1/projects/{project}/subscriptions", tags=["subscriptions"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_subscription(
    project: ProjectName, body: SubscriptionCreate, admin: AdminDep
) -> Subscription:
    return await admin.create_subscription(project, body)


@router.get("")
async def list_subscriptions(
    project: ProjectName, admin: AdminDep, offset: Offset = 0, limit: Limit = 100
) -> Page[Subscription]:
    await admin.catalog.get_project(project)
    names = await admin.catalog.list_subscriptions(project)
    return await page(names, offset, limit, partial(admin.catalog.get_subscription, project))


@router.get("/{subscription}")
async def get_subscription(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> Subscription:
    return await admin.catalog.get_subscription(project, subscription)


@router.put("/{subscription}")
async def update_subscription(
    project: ProjectName, subscription: SubscriptionName, body: SubscriptionUpdate, admin: AdminDep
) -> Subscription:
    current = await admin.catalog.get_subscription(project, subscription)
    updated = merged(current, body)
    admin.check_endpoint(updated)
    return await admin.catalog.update_subscription(updated)


@router.delete("/{subscription}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_subscription(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> None:
    await admin.catalog.delete_subscription(project, subscription)


# ------------------------------------------------------------ operations


def _ops(request: Request, admin: AdminDep) -> SubscriptionOps:
    return SubscriptionOps(admin.catalog, admin.stores, request.app.state.assigner.member_id)


OpsDep = Annotated[SubscriptionOps, Depends(_ops)]


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


@router.post("/{subscription}/stop")
async def stop_subscription(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> Subscription:
    """Pause delivery, keeping the position (idempotent)."""
    return await ops.set_paused(project, subscription, True)


@router.post("/{subscription}/start")
async def start_subscription(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> Subscription:
    """Resume delivery from the committed position (idempotent)."""
    return await ops.set_paused(project, subscription, False)


@router.post("/{subscription}/seek")
async def seek_subscription(
    project: ProjectName, subscription: SubscriptionName, body: SeekRequest, ops: OpsDep
) -> SeekResponse:
    """Move what the subscription reads next: earliest, latest, or a timestamp."""
    result = await ops.seek(project, subscription, SeekTarget(body.to, body.timestamp))
    return SeekResponse(
        segment=result.segment, positions={str(p): v for p, v in result.positions.items()}
    )


@router.get("/{subscription}/status")
async def subscription_status(
    project: ProjectName, subscription: SubscriptionName, ops: OpsDep
) -> dict[str, Any]:
    """Lag per partition, in-flight, rates, totals and the last hour in 10-second buckets."""
    return await ops.status(project, subscription)
