"""``/v1/projects/{p}/quota``: set by an admin, read with usage; creates past it are 409."""

from __future__ import annotations

from pathlib import Path

from tests.support.control_plane import create_shop, embedded_control_plane


async def test_set_then_read_the_quota_with_its_usage(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        r = await cp.client.get("/v1/projects/shop/quota")
        assert r.status_code == 200, r.text
        assert r.json()["quota"]["max_topics"] is None and r.json()["topics"] == 1
        body = {"messages_per_second": 50, "bytes_per_second": 65536, "max_topics": 1}
        r = await cp.client.put("/v1/projects/shop/quota", json=body)
        assert r.status_code == 200, r.text
        shown = r.json()
        assert shown["quota"] == {**body, "max_subscriptions": None}
        assert (shown["topics"], shown["subscriptions"], shown["producers"]) == (1, 0, 0)
        r = await cp.client.post("/v1/projects/shop/topics", json={"name": "more"})
        assert r.status_code == 409, r.text
        assert r.json()["code"] == "quota_exceeded"
        assert "max_topics" in r.json()["message"]


async def test_a_quota_is_validated_and_needs_a_project(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        r = await cp.client.put("/v1/projects/shop/quota", json={"messages_per_second": -1})
        assert r.status_code == 422, r.text
        r = await cp.client.put("/v1/projects/shop/quota", json={"max_topic": 3})
        assert r.status_code == 422, r.text  # a misspelt field is not silently unlimited
        r = await cp.client.put("/v1/projects/ghost/quota", json={})
        assert r.status_code == 404, r.text
