"""Who may publish: the admin token anywhere, a produce token to the topics it covers."""

from __future__ import annotations

import hmac

from core import tokens
from core.errors import Forbidden, Unauthorized

from .metadata import TopicCache


class Authorizer:
    def __init__(self, cache: TopicCache, admin_token: str | None) -> None:
        self.cache = cache
        self.admin = admin_token.encode() if admin_token else None

    async def check(self, authorization: str, project: str, topic: str) -> None:
        """Return if the ``Authorization`` header may publish to ``project/topic``; else
        raise 401 or 403."""
        scheme, _, given = authorization.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise Unauthorized("send a produce token as 'Authorization: Bearer <token>'")
        if self.admin is not None and hmac.compare_digest(given.encode(), self.admin):
            return
        ids = tokens.parse(given)
        token = await self.cache.token(*ids) if ids else None
        if token is None or not tokens.verify(token, given):
            raise Unauthorized("the bearer token is not valid")
        if not token.covers(project, topic):
            raise Forbidden(
                f"this token may not publish to {project}/{topic}; it covers "
                f"{', '.join(token.topics)} of project {token.project}"
            )
