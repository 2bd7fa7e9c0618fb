"""``/v1/projects/{project}/subscriptions``."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, status

from httpbus.core.model import Subscription

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
    return await admin.catalog.update_subscription(merged(current, body))


@router.delete("/{subscription}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_subscription(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> None:
    await admin.catalog.delete_subscription(project, subscription)
