"""Honest state: a subscription whose endpoint's circuit is open is not called "active".
The list API carries each subscription's circuit as its workers last published it (from the
metastore alone), and the list and the subscription page say "circuit open"."""

from __future__ import annotations

import json
from pathlib import Path

from metastore import paths
from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.ui_pages import TOKEN, login

API = {"Authorization": f"Bearer {TOKEN}"}


def _status_doc(state: str) -> bytes:
    """What a worker publishes of a subscription (the part this test reads)."""
    return json.dumps({"worker": "w1", "circuit": {"state": state, "rate_per_s": 1.0}}).encode()


async def test_an_open_circuit_is_said_in_the_list_and_on_the_page(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        client = cp.client
        await create_shop(client, headers=API)
        for name in ("calm", "failing"):
            sub = {"name": name, "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/h"}}
            r = await client.post("/v1/projects/shop/subscriptions", json=sub, headers=API)
            assert r.status_code == 201, r.text
        listed = (await client.get("/v1/projects/shop/subscriptions", headers=API)).json()
        assert [s["circuit"] for s in listed["items"]] == [None, None]  # no worker reported

        await cp.meta.create(paths.subscription_status("shop", "calm"), _status_doc("closed"))
        failing = await cp.meta.create(
            paths.subscription_status("shop", "failing"), _status_doc("open")
        )
        listed = (await client.get("/v1/projects/shop/subscriptions", headers=API)).json()
        assert {s["name"]: s["circuit"] for s in listed["items"]} == {
            "calm": "closed",
            "failing": "open",
        }

        await login(client)
        page = (await client.get("/ui/projects/shop/subscriptions")).text
        assert page.count('<span class="sub-state">active</span>') == 1  # calm
        assert ">circuit open</span>" in page
        one = (await client.get("/ui/projects/shop/subscriptions/failing")).text
        assert ">circuit open</span>" in one and 'id="sub-state"' in one

        half = _status_doc("half_open")
        path = paths.subscription_status("shop", "failing")
        await cp.meta.update(path, half, expected_version=failing.version)
        page = (await client.get("/ui/projects/shop/subscriptions")).text
        assert ">circuit half-open</span>" in page
        r = await client.post("/v1/projects/shop/subscriptions/failing/stop", headers=API)
        assert r.status_code == 200, r.text
        page = (await client.get("/ui/projects/shop/subscriptions")).text
        assert page.count('<span class="sub-state">paused</span>') == 1  # paused says paused
