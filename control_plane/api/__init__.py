"""The admin REST API under ``/v1``: every route declares the role it needs
(:mod:`.auth`; the table is in docs/security.md)."""

from __future__ import annotations

from fastapi import APIRouter

from control_plane.api import (
    grants,
    principals,
    projects,
    quotas,
    subscriptions,
    tokens,
    topic_schemas,
    topics,
)


def router() -> APIRouter:
    api = APIRouter()
    for module in (
        projects,
        quotas,
        topics,
        topic_schemas,
        subscriptions,
        tokens,
        grants,
        principals,
    ):
        api.include_router(module.router)
    return api
