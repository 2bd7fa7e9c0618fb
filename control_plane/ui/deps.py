"""What the UI's routes share: the session, the in-process API client, name parameters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Protocol

import httpx
from fastapi import Depends, Path, Request

from control_plane.client import AdminClient, ApiError
from control_plane.ui.session import (
    SESSION_COOKIE,
    LoginRequired,
    Session,
    check_csrf,
    current_session,
    require_session,
)
from core.errors import Unauthorized
from core.principals import Need, Principal
from reports.principals import PrincipalStore


class Authenticating(Protocol):
    """What the UI asks of ``app.state.authenticator`` (the admin API's
    ``Authenticator``): who a request's session stands for, and the principal store a login
    checks. Declared here so that the UI imports nothing of the API but its client."""

    principals: PrincipalStore

    async def resolve(self, request: Request) -> Principal: ...


NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
Name = Annotated[str, Path(pattern=NAME)]


async def _api(request: Request) -> AsyncIterator[AdminClient]:
    """The admin API of this very process, called in-process with the page's session
    cookie, so the API checks the logged-in user's roles: the UI is a client of the same
    contract as the CLI, and sees a route that is not deployed as "not available"."""
    transport = httpx.ASGITransport(app=request.app)
    cookie = request.cookies.get(SESSION_COOKIE, "")
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}"}
    async with AdminClient(
        "http://control-plane", "", transport=transport, headers=headers
    ) as client:
        yield client


async def page_principal(request: Request) -> None:
    """Who is looking at the page (``request.state.principal``, for ``render``'s ``can``):
    the session's user with the roles they hold now. A session whose user is gone must log
    in again."""
    request.state.principal = None
    if current_session(request) is None:
        return  # the login form; every other page refuses without a session anyway
    authenticator: Authenticating = request.app.state.authenticator
    try:
        request.state.principal = await authenticator.resolve(request)
    except Unauthorized:
        raise LoginRequired() from None


async def require_owner(
    request: Request, project: Name, session: Annotated[Session, Depends(require_session)]
) -> None:
    """A form that changes ``project`` is for its owners: anyone else gets the refusal page
    (403), not a form whose save the API would refuse; without a session, the login form
    first."""
    principal: Principal | None = request.state.principal
    if principal is None or not principal.may(Need.OWNER, project):
        raise ApiError(403, "forbidden", f"this needs owner of {project}")


SessionDep = Annotated[Session, Depends(require_session)]
# ``dependencies=[OWNER]`` on a route: only the project's owners (and admins) reach it.
OWNER = Depends(require_owner)
ApiDep = Annotated[AdminClient, Depends(_api)]


async def form_of(request: Request, session: Session) -> dict[str, str]:
    """The posted form as text fields, after checking its CSRF token."""
    form = await request.form()
    check_csrf(session, form.get("csrf"))
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def form_lists(request: Request, session: Session) -> dict[str, list[str]]:
    """The posted form with repeated fields (checkboxes), after checking its CSRF token."""
    form = await request.form()
    check_csrf(session, form.get("csrf"))
    out: dict[str, list[str]] = {}
    for key, value in form.multi_items():
        if isinstance(value, str):
            out.setdefault(key, []).append(value)
    return out


async def _posted(request: Request, session: SessionDep) -> dict[str, str]:
    return await form_of(request, session)


async def _posted_lists(request: Request, session: SessionDep) -> dict[str, list[str]]:
    return await form_lists(request, session)


# A posted form, its CSRF token checked before the view runs (:func:`form_of`,
# :func:`form_lists`).
FormDep = Annotated[dict[str, str], Depends(_posted)]
FormListsDep = Annotated[dict[str, list[str]], Depends(_posted_lists)]
