"""The topic schema routes (control_plane.api.topic_schemas) on the embedded metastore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.control_plane import create_shop, embedded_control_plane

URL = "/v1/projects/shop/topics/orders/schema"
V1: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}},
}


async def test_versions_are_added_checked_listed_and_removed(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        assert (await cp.client.get(URL)).status_code == 404
        r = await cp.client.put(URL, json={"schema": V1, "compatibility": "backward"})
        assert r.status_code == 200, r.text
        assert r.json()["version"] == 1 and r.json()["schema"] == V1

        # The same schema again adds nothing.
        assert (await cp.client.put(URL, json={"schema": V1})).json()["version"] == 1

        # A required property breaks backward: 409 naming the path.
        breaking = {**V1, "required": ["amount"]}
        r = await cp.client.put(URL, json={"schema": breaking})
        assert r.status_code == 409
        body = r.json()
        assert body["code"] == "schema_incompatible"
        assert body["details"]["path"] == "$.amount"
        assert body["details"]["rule"] == "required_added"
        assert "old messages may lack it" in body["message"]

        # A compatible evolution (a wider type) is version 2.
        wider = {**V1, "properties": {"amount": {"type": "number", "minimum": 0}}}
        r = await cp.client.put(URL, json={"schema": wider})
        assert r.status_code == 200 and r.json()["version"] == 2

        # Under none anything goes, and the mode is the one from then on.
        r = await cp.client.put(URL, json={"schema": breaking, "compatibility": "none"})
        assert r.status_code == 200 and r.json()["version"] == 3
        assert r.json()["compatibility"] == "none"

        r = await cp.client.get(f"{URL}/versions")
        assert r.json() == {
            "project": "shop",
            "topic": "orders",
            "active": True,
            "compatibility": "none",
            "latest": 3,
            "versions": [1, 2, 3],
        }
        assert (await cp.client.get(f"{URL}/versions/2")).json()["schema"] == wider
        assert (await cp.client.get(f"{URL}/versions/9")).status_code == 404
        assert (await cp.client.get(URL)).json()["version"] == 3

        assert (await cp.client.delete(URL)).status_code == 204
        assert (await cp.client.get(URL)).status_code == 404
        assert (await cp.client.get(f"{URL}/versions")).json()["active"] is False
        assert (await cp.client.delete(URL)).status_code == 404
        # Put again: the numbering goes on.
        r = await cp.client.put(URL, json={"schema": breaking})
        assert r.json()["version"] == 4


async def test_invalid_schemas_and_unknown_topics_are_refused(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        r = await cp.client.put(URL, json={"schema": {"type": "nonsense"}})
        assert r.status_code == 422 and r.json()["code"] == "validation_failed"
        r = await cp.client.put(URL, json={"schema": V1, "compatibility": "sideways"})
        assert r.status_code == 422
        r = await cp.client.put("/v1/projects/shop/topics/ghost/schema", json={"schema": V1})
        assert r.status_code == 404
        assert (await cp.client.get("/v1/projects/shop/topics/ghost/schema")).status_code == 404


async def test_deleting_the_topic_deletes_its_schema(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        assert (await cp.client.put(URL, json={"schema": V1})).status_code == 200
        r = await cp.client.delete("/v1/projects/shop/topics/orders")
        assert r.status_code == 204, r.text
        r = await cp.client.post("/v1/projects/shop/topics", json={"name": "orders"})
        assert r.status_code == 201, r.text
        assert (await cp.client.get(URL)).status_code == 404
