"""The UI's home page: the overview of ``GET /v1/overview`` (one request for the page),
with the last hour and the largest lags drawn as SVG on the server (:mod:`.charts`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import NotAvailable, path
from control_plane.ui.charts import bars, lines
from control_plane.ui.deps import ApiDep, SessionDep
from control_plane.ui.render import render

router = APIRouter()


@router.get("/ui/")
@router.get("/ui")
async def home(request: Request, session: SessionDep, api: ApiDep) -> Response:
    try:
        seen = await api.get(path("v1", "overview"))
    except NotAvailable:
        seen = None
    if seen is None:
        return render(request, "overview.html", session, seen=None)
    hour = lines(seen["history"], ("delivered", "failed", "dead_lettered"))
    lag = bars(
        [
            (
                f"{row['project']}/{row['subscription']}",
                int(row["lag"] or 0),
                f"/ui/projects/{row['project']}/subscriptions/{row['subscription']}",
            )
            for row in seen["lag"]
        ]
    )
    return render(request, "overview.html", session, seen=seen, hour=hour, lag_bars=lag)
