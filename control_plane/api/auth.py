"""Bearer-token authentication of the admin API (constant-time comparison)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from core.errors import Unauthorized


def admin_guard(token: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency that admits only ``Authorization: Bearer <token>``."""
    expected = token.encode()

    async def guard(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise Unauthorized("send the admin token as 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(given.strip().encode(), expected):
            raise Unauthorized("the bearer token is not valid")

    return guard
