"""The admin API refuses an invalid subscription filter with 422, naming ``filter`` and the
position of the problem, and stores nothing; a valid filter is stored as written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.control_plane import create_shop, embedded_control_plane

SUBS = "/v1/projects/shop/subscriptions"
ENDPOINT = {"url": "http://127.0.0.1:9/hook"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        yield cp.client


async def test_invalid_filter_is_422_with_its_position_and_creates_nothing(
    client: httpx.AsyncClient,
) -> None:
    bad = {"name": "s1", "topic": "orders", "endpoint": ENDPOINT, "filter": 'headers["x"] =='}
    r = await client.post(SUBS, json=bad)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "validation_failed"
    [field] = body["details"]["fields"]
    assert field["field"] == "filter"
    assert "line 1, column 16: syntax error" in field["problem"]
    assert (await client.get(SUBS)).json()["items"] == []
    assert (await client.get(f"{SUBS}/s1")).status_code == 404

    good = {**bad, "filter": 'headers["x-region"] in ["eu", "us"] && group != "test"'}
    r = await client.post(SUBS, json=good)
    assert r.status_code == 201, r.text
    stored = (await client.get(f"{SUBS}/s1")).json()
    assert stored["filter"] == good["filter"]

    # An update is checked the same way and leaves the stored filter alone.
    update = {"endpoint": ENDPOINT, "filter": "nope == 1", "version": stored["version"]}
    r = await client.put(f"{SUBS}/s1", json=update)
    assert r.status_code == 422, r.text
    [field] = r.json()["details"]["fields"]
    assert (
        field["field"] == "filter" and "line 1, column 1: unknown name 'nope'" in field["problem"]
    )
    assert (await client.get(f"{SUBS}/s1")).json()["filter"] == good["filter"]
