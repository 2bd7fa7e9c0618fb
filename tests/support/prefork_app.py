"""A tiny service run by :func:`core.prefork.serve` for tests/unit/core/test_prefork.py:
``/pid`` answers its process id, ``/metrics`` counts its requests (merged over the group).

``python -m tests.support.prefork_app PORT PROCESSES``
"""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from core import metrics_group
from core.prefork import Slot, serve


def make_app(slot: Slot | None) -> Starlette:
    registry = CollectorRegistry()
    served = Counter("served", "requests to /pid", registry=registry)

    async def pid(request: Request) -> Response:
        served.inc()
        return PlainTextResponse(str(os.getpid()))

    async def metrics(request: Request) -> Response:
        body = generate_latest(registry)
        if slot is not None and metrics_group.LOCAL not in request.query_params:
            body = await metrics_group.gather(body, slot)
        return Response(body, media_type="text/plain")

    return Starlette(routes=[Route("/pid", pid), Route("/metrics", metrics)])


if __name__ == "__main__":
    port, processes = int(sys.argv[1]), int(sys.argv[2])
    serve(
        make_app, host="127.0.0.1", port=port, processes=processes, options={"log_level": "warning"}
    )
