"""Who is calling the admin API, and the one declarative check every route makes.

:class:`Authenticator` resolves the principal of a request, in this order:

- ``Authorization: Bearer <admin token>``: the static admin token (the bootstrap credential,
  compared in constant time), an ``admin``;
- ``Authorization: Bearer hbk.…``: an API token (``reports.principals``): its user with the
  roles they hold now, or a machine with its own roles;
- the UI's session cookie (the UI calls this API in-process with it): the admin token's
  session, or a user's, with the roles the user holds now (a revoked role ends at once); a
  user's session ends when the user is deleted or their password changes (its stamp is no
  longer theirs), even if a user of the same name is made again.

Anything else is 401. Each route then declares what it needs, once::

    @router.put("/{topic}", **OWNER)

where ``OWNER = Depends(Requirement(Need.OWNER))`` checks the ``{project}`` of the path, so
an owner of one project gets 403 on every other project, whether or not it exists.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from core.errors import Forbidden, Unauthorized
from core.principals import ADMIN_TOKEN, Need, Principal, SessionClaim
from reports.principals import TOKEN_PREFIX, PrincipalStore

# The UI's session of a request: absent (None), the admin token's (user None) or a user's.
# Set by ``control_plane.ui`` (the API never imports the UI).
SessionReader = Callable[[Request], SessionClaim | None]
_CALLER = "httpbus_caller"  # where a request keeps its resolved principal (scope["state"])


class Authenticator:
    """Resolves the principal of a request (see the module's docstring)."""

    def __init__(
        self, admin_token: str, principals: PrincipalStore, sessions: SessionReader | None = None
    ) -> None:
        self._admin_token = admin_token.encode()
        self.principals = principals
        self.sessions = sessions

    async def resolve(self, request: Request) -> Principal:
        """The caller of ``request``, kept on it: resolved once however many ask (the
        request guard before the body is read, then the routes)."""
        state = request.scope.setdefault("state", {})
        known = state.get(_CALLER)
        if known is None:
            known = state[_CALLER] = await self._resolve(request)
        assert isinstance(known, Principal)
        return known

    async def _resolve(self, request: Request) -> Principal:
        header = request.headers.get("authorization")
        if header is not None:
            return await self._bearer(header)
        found = self.sessions(request) if self.sessions is not None else None
        if found is None:
            raise Unauthorized(
                "send the admin token or an API token as 'Authorization: Bearer <token>'"
            )
        user = found.user
        if user is None:
            return ADMIN_TOKEN
        principal = await run_in_threadpool(self.principals.session_principal, user, found.stamp)
        if principal is None:
            raise Unauthorized(
                f"the session of user {user} has ended (the user was deleted or their password "
                "changed); log in again"
            )
        return principal

    async def _bearer(self, header: str) -> Principal:
        scheme, _, given = header.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise Unauthorized("send the token as 'Authorization: Bearer <token>'")
        if hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self._admin_token):
            return ADMIN_TOKEN
        if given.startswith(f"{TOKEN_PREFIX}."):
            principal = await run_in_threadpool(self.principals.token_principal, given)
            if principal is not None:
                return principal
        raise Unauthorized("the bearer token is not valid")


async def resolve_principal(request: Request) -> Principal:
    """The dependency that resolves the caller (cached per request by FastAPI)."""
    authenticator: Authenticator = request.app.state.authenticator
    return await authenticator.resolve(request)


PrincipalDep = Annotated[Principal, Depends(resolve_principal)]


@dataclass(frozen=True)
class Requirement:
    """What a route needs: ``need`` in the project of its path (``{project}``). Used as
    ``Depends(Requirement(Need.OWNER))``; docs/security.md's table is read from these."""

    need: Need

    async def __call__(self, request: Request, principal: PrincipalDep) -> Principal:
        project = request.path_params.get("project")
        if not principal.may(self.need, project):
            raise Forbidden(_refusal(principal, self.need, project))
        return principal


def _refusal(principal: Principal, need: Need, project: str | None) -> str:
    wanted = "admin" if need is Need.ADMIN or project is None else f"{need.value} of {project}"
    held = principal.role_in(project) if project is not None else None
    holds = f"holds {held.value} of {project}" if held is not None else "holds no such role"
    return f"this needs {wanted}; {principal.label} {holds}"


ROLE_KEY = "x-required-role"


def needs(need: Need) -> dict[str, Any]:
    """A route's keyword arguments for ``need``: the check, and the same fact in the OpenAPI
    (``x-required-role``), from which docs/security.md's table is made."""
    return {"dependencies": [Depends(Requirement(need))], "openapi_extra": {ROLE_KEY: need.value}}


def route_table(openapi: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(method, path, need)`` of every admin route (``/v1``) of an OpenAPI document, sorted
    by path: the table of docs/security.md. A route that declares no need shows ``MISSING``."""
    rows = []
    for path, item in openapi["paths"].items():
        if path.startswith("/v1/"):
            for method, operation in item.items():
                rows.append((method.upper(), path, operation.get(ROLE_KEY, "MISSING")))
    return sorted(rows, key=lambda r: (r[1], r[0]))


ANY = needs(Need.ANY)
VIEWER = needs(Need.VIEWER)
OWNER = needs(Need.OWNER)
ADMIN = needs(Need.ADMIN)
