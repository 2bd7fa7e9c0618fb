"""The admin REST API under ``/v1``: every route needs the admin bearer token."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from . import projects, subscriptions, tokens, topics
from .auth import admin_guard


def router(admin_token: str) -> APIRouter:
    api = APIRouter(dependencies=[Depends(admin_guard(admin_token))])
    for module in (projects, topics, subscriptions, tokens):
        api.include_router(module.router)
    return api
