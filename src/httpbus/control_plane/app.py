"""The control plane's ASGI application."""

from __future__ import annotations

from fastapi import FastAPI

from httpbus import __version__


def create_app() -> FastAPI:
    """Build the control-plane app; later issues mount ``/v1`` and ``/ui`` on it."""
    app = FastAPI(title="httpbus control plane", version=__version__)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok", "service": "control-plane", "version": __version__}

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> dict[str, str]:
        """Readiness: nothing to wait for yet; the metastore check joins with it."""
        return {"status": "ready"}

    return app
