"""The worker's readiness says when its member id was taken by another live process."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from delivery_workers.app import _readyz
from metastore.lease import SessionLease


class _Catalog:
    async def list_projects(self) -> list[str]:
        return []


async def _ask(lease: SessionLease) -> httpx.Response:
    app = Starlette(routes=[Route("/readyz", _readyz)])
    app.state.worker = SimpleNamespace(
        metastore=SimpleNamespace(lease=lease), catalog=_Catalog(), assigned={}
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://w") as c:
        return await c.get("/readyz")


async def test_ready_while_the_lease_is_not_revoked() -> None:
    r = await _ask(SessionLease(10.0))
    assert r.status_code == 200 and r.json()["status"] == "ready"


async def test_a_revoked_lease_is_not_ready_and_says_why() -> None:
    lease = SessionLease(10.0)
    lease.revoke("member /groups/workers/w1 is held by another live process: restart this one")
    r = await _ask(lease)
    assert r.status_code == 503
    assert r.json() == {
        "code": "not_ready",
        "message": "member /groups/workers/w1 is held by another live process: restart this one",
    }
