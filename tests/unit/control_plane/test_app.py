from pathlib import Path

import httpx
import pytest

from cli.dev import dev_settings
from control_plane.app import create_app
from core.version import VERSION


async def test_healthz_readyz_and_openapi_answer(tmp_path: Path) -> None:
    app = create_app(dev_settings(None, tmp_path, "127.0.0.1", 8700))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://cp") as client:
            health = await client.get("/healthz")
            assert health.json() == {
                "status": "ok",
                "service": "control-plane",
                "version": VERSION,
            }
            assert (await client.get("/readyz")).json() == {"status": "ready"}
            paths = (await client.get("/openapi.json")).json()["paths"]
            assert "/v1/projects/{project}/topics/{topic}/segments" in paths


def test_dev_settings_use_the_embedded_backends_in_the_data_dir(tmp_path: Path) -> None:
    settings = dev_settings(None, tmp_path, "127.0.0.1", 8123)
    assert settings.port == 8123 and settings.admin_token is not None
    assert settings.metastore.kind == "embedded"
    assert settings.metastore.path == str(tmp_path / "metastore.db")
    assert settings.clusters["embedded"].backend == "embedded"


async def test_the_report_database_is_migrated_at_start(tmp_path: Path) -> None:
    settings = dev_settings(None, tmp_path, "127.0.0.1", 8700).model_copy(
        update={"database_url": f"sqlite:///{tmp_path}/fresh/reports.db"}
    )
    app = create_app(settings)
    token = settings.admin_token.get_secret_value()  # type: ignore[union-attr]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://cp") as client:
            runs = await client.get("/v1/audit/runs", headers={"Authorization": f"Bearer {token}"})
    assert runs.status_code == 200 and runs.json() == {"runs": [], "next_cursor": None}


def test_dev_keeps_reports_in_its_data_dir_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = dev_settings(None, tmp_path, "127.0.0.1", 8700)
    assert settings.database_url == f"sqlite:///{tmp_path.absolute() / 'reports.db'}"
    monkeypatch.setenv("HTTPBUS_DATABASE_URL", "sqlite:////elsewhere/reports.db")
    settings = dev_settings(None, tmp_path, "127.0.0.1", 8700)
    assert settings.database_url == "sqlite:////elsewhere/reports.db"
