"""The header's search box: a message id in any topic the user may see, topics and
subscriptions by name (``GET /v1/search``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import ApiError, NotAvailable, path
from control_plane.ui.deps import ApiDep, SessionDep
from control_plane.ui.render import render
from control_plane.ui.trace_views import trace_url

router = APIRouter()


@router.get("/ui/search")
async def search(request: Request, session: SessionDep, api: ApiDep) -> Response:
    q = request.query_params.get("q", "").strip()[:128]
    found, problem = None, None
    if q:
        try:
            found = await api.get(path("v1", "search"), {"q": q})
        except NotAvailable:
            problem = "Search is not available on this control plane."
        except ApiError as exc:
            if exc.status != 422:
                raise
            problem = exc.message
    if found is not None:
        for hit in found["messages"]:
            hit["url"] = trace_url(hit["project"], hit["topic"], hit["message_id"])
    return render(request, "search.html", session, q=q, found=found, problem=problem)
