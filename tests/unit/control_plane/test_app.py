import httpx

from httpbus import __version__
from httpbus.control_plane.app import create_app


async def test_healthz_readyz_and_openapi_answer() -> None:
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://cp") as client:
        health = await client.get("/healthz")
        assert health.json() == {"status": "ok", "service": "control-plane", "version": __version__}
        assert (await client.get("/readyz")).status_code == 200
        assert "/healthz" in (await client.get("/openapi.json")).json()["paths"]
