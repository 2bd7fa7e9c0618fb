"""The topic page shows the topic's schema: none, the version in force, or removed."""

from __future__ import annotations

from pathlib import Path

from tests.support.control_plane import embedded_control_plane
from tests.support.ui_pages import TOKEN, login

API = {"Authorization": f"Bearer {TOKEN}"}
SCHEMA_URL = "/v1/projects/shop/topics/orders/schema"


async def test_the_topic_page_shows_the_schema_and_its_version(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        ui = cp.client
        assert (await ui.post("/v1/projects", json={"name": "shop"}, headers=API)).is_success
        r = await ui.post("/v1/projects/shop/topics", json={"name": "orders"}, headers=API)
        assert r.is_success, r.text
        await login(ui, TOKEN)
        page = await ui.get("/ui/projects/shop/topics/orders")
        assert page.status_code == 200 and "No schema: payloads are not validated" in page.text

        for schema in ({"type": "object"}, {"type": ["object", "array"]}):
            r = await ui.put(SCHEMA_URL, json={"schema": schema}, headers=API)
            assert r.is_success, r.text
        page = await ui.get("/ui/projects/shop/topics/orders")
        assert '<strong class="schema-version">2</strong> in force' in page.text
        assert "compatibility backward · versions 1, 2" in page.text
        assert "&#34;array&#34;" in page.text or "&quot;array&quot;" in page.text

        assert (await ui.delete(SCHEMA_URL, headers=API)).status_code == 204
        page = await ui.get("/ui/projects/shop/topics/orders")
        assert "Removed: payloads are not validated (latest version 2)" in page.text
