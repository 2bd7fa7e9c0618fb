"""The web control plane, served by the control plane at ``/ui/``.

Server-rendered pages (Jinja2) with a little plain JavaScript and one vendored chart
library (uPlot); no build step. Every page needs a session, made by logging in as a user
(name and password) or with the admin token; a page shows only what the user's roles allow
and hides the buttons they may not use. The pages call the admin API of the same process
through the same REST client as the CLI (:mod:`control_plane.client`), with the session's
cookie, so they follow its contract and its role checks, and show "not available" for a
route this control plane does not serve.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from control_plane.client import ApiError, NotAvailable, Unreachable
from control_plane.ui import (
    audit_views,
    auth_views,
    catalog_views,
    cutover_views,
    dlq_views,
    migration_views,
    overview_views,
    search_views,
    sub_views,
    topic_catalog_views,
    trace_views,
    user_views,
)
from control_plane.ui.deps import page_principal
from control_plane.ui.render import HERE, render
from control_plane.ui.revocation import RevokedSessions
from control_plane.ui.session import (
    CsrfRejected,
    LoginRequired,
    Signer,
    current_session,
    session_identity,
)
from control_plane.ui.throttle import LoginThrottle

__all__ = ["install", "login_answer", "session_identity"]

ROUTERS = (
    auth_views,
    overview_views,
    catalog_views,
    cutover_views,
    migration_views,
    sub_views,
    dlq_views,
    audit_views,
    trace_views,
    search_views,
    topic_catalog_views,
    user_views,
)


def install(
    app: FastAPI,
    admin_token: str,
    clusters: Sequence[str],
    default_cluster: str | None,
    *,
    public_url: str | None = None,
) -> None:
    """Serve the UI at ``/ui/`` on ``app`` (its admin API must be mounted on the same app).
    Logouts stay in this process until ``app.state.ui_revoked.attach(metastore)``."""
    app.state.ui_signer = Signer(admin_token)
    app.state.ui_revoked = RevokedSessions()
    app.state.ui_throttle = LoginThrottle()
    app.state.ui_secure = bool(public_url and public_url.lower().startswith("https://"))
    app.state.ui_clusters = list(clusters)
    app.state.ui_default_cluster = default_cluster
    app.mount("/ui/static", StaticFiles(directory=str(HERE / "static")), name="ui-static")
    for module in ROUTERS:
        app.include_router(
            module.router, include_in_schema=False, dependencies=[Depends(page_principal)]
        )
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(CsrfRejected, _csrf_rejected)
    app.add_exception_handler(ApiError, _api_error)


async def _login_required(request: Request, exc: Exception) -> Response:
    return await login_answer(request)


async def login_answer(request: Request) -> Response:
    """What a page answers a caller without a session: JSON 401 for the pages' polling,
    else a redirect to the login form that comes back here."""
    if request.url.path.endswith(".json") or request.url.path.endswith("/live"):
        return JSONResponse({"code": "unauthorized", "message": "log in again"}, 401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return Response(status_code=303, headers={"Location": f"/ui/login?next={quote(target)}"})


async def _csrf_rejected(request: Request, exc: Exception) -> Response:
    message = "This form is stale or did not come from this site; reload the page and try again."
    return render(
        request, "error.html", current_session(request), 403, title="Refused", message=message
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    """An API error no page handled itself: a page that says what happened."""
    assert isinstance(exc, ApiError)
    if isinstance(exc, NotAvailable):
        status, title = 404, "Not available"
    elif isinstance(exc, Unreachable) or exc.status >= 500:
        status, title = 502, "The control plane failed"
    elif exc.status == 404:
        status, title = 404, "Not found"
    else:
        status, title = exc.status, "Refused"
    return render(
        request, "error.html", current_session(request), status, title=title, message=exc.message
    )
