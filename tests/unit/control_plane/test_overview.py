"""``GET /v1/overview``: the five on-call answers in one request, read in bulk from what the
workers publish and the catalog holds, filtered to the caller's projects; and the
subscription status's honest numbers (the DLQ as stored, failures by status, the last
failure) from a worker's published figures and a DLQ written by the DLQ's own codec."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from control_plane.services.dead_letters import summarize
from core.envelope import GROUP_ID, encode
from core.model import Disabled, SegmentState
from metastore import paths
from segments.protocol import Stored
from segments.subscription.retry_meta import RetryMeta
from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane
from tests.support.ui_pages import login
from tests.support.until import until

ENDPOINT = "http://127.0.0.1:9/h"


def _doc(**figures: Any) -> bytes:
    """A worker's published status document (the fields the overview reads)."""
    now = int(time.time()) // 10 * 10
    doc = {
        "worker": "w1",
        "in_flight": 0,
        "rates": {"delivered_per_s": 5.0, "failed_per_s": 0.0, "filtered_per_s": 0.0},
        "totals": {"delivered": 50},
        "circuit": {"state": "closed", "rate_per_s": 100.0},
        "lag": 0,
        "oldest_unacked_ms": None,
        "history": [[now - 20, 50, 0, 0, 0, 0]],
    } | figures
    return json.dumps(doc).encode()


async def _sub(cp: ControlPlane, project: str, name: str) -> None:
    body = {"name": name, "topic": "orders", "endpoint": {"url": ENDPOINT}}
    r = await cp.client.post(f"/v1/projects/{project}/subscriptions", json=body)
    assert r.status_code == 201, r.text


async def _user_headers(client: httpx.AsyncClient, name: str, roles: list[str]) -> dict[str, str]:
    body = {"name": name, "password": "pw-" + name * 3, "roles": roles}
    assert (await client.post("/v1/users", json=body)).status_code == 201
    r = await client.post("/v1/tokens", json={"user": name})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def test_the_overview_answers_the_five_questions_for_what_the_caller_may_see(
    tmp_path: Path,
) -> None:
    async with embedded_control_plane(tmp_path, database_url=f"sqlite:///{tmp_path}/r.db") as cp:
        client = cp.client
        await create_shop(client)
        assert (await client.post("/v1/projects", json={"name": "lab"})).status_code == 201
        topic = {"name": "orders", "partitions": 1}
        assert (await client.post("/v1/projects/lab/topics", json=topic)).status_code == 201
        for name in ("calm", "failing", "behind", "dead", "off"):
            await _sub(cp, "shop", name)
        await _sub(cp, "lab", "hidden")
        now_ms = int(time.time() * 1000)
        bucket = int(time.time()) // 10 * 10
        docs = {
            "calm": _doc(),
            "failing": _doc(
                circuit={"state": "open", "rate_per_s": 1.0},
                rates={"delivered_per_s": 0.0, "failed_per_s": 3.0, "filtered_per_s": 0.0},
                failures={"500": 40},
                last_failure={"at_ms": now_ms, "status": 500, "error": "HTTP 500: boom"},
            ),
            "behind": _doc(lag=1234, oldest_unacked_ms=now_ms - 600_000),
            "dead": _doc(history=[[bucket - 30, 0, 6, 0, 961, 0]]),
        }
        for name, doc in docs.items():
            await cp.meta.create(paths.subscription_status("shop", name), doc)
        await cp.meta.create(
            paths.subscription_status("lab", "hidden"),
            _doc(circuit={"state": "open", "rate_per_s": 1.0}, lag=99_999),
        )
        off = await cp.catalog.get_subscription("shop", "off")
        since = datetime.now(UTC) - timedelta(hours=2)
        disabled = Disabled(failing_since=since, disabled_at=since, last_error="HTTP 503")
        await cp.catalog.update_subscription(off.model_copy(update={"disabled": disabled}))
        cutover = {"phase": "switch", "from_segment": 1, "to_segment": 2, "cluster": "embedded"}
        await cp.meta.create(paths.cutover("shop", "orders"), json.dumps(cutover).encode())
        await cp.meta.create(paths.active_cutover("shop", "orders"), b"")
        # A failover left lab/orders's segment unsealed on a cluster that does not answer
        # (not configured here, so the failover leader leaves it be).
        left = await cp.catalog.get_segment("lab", "orders", 1)
        away = {"state": SegmentState.UNSEALED, "cluster": "kafka-away"}
        await cp.catalog.update_segment("lab", "orders", left.model_copy(update=away))
        await cp.meta.create(paths.unsealed_segment("lab", "orders", 1), b"")

        r = await client.get("/v1/overview")
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["projects"] == ["lab", "shop"] and seen["subscriptions"] == 6
        failing = [(f["project"], f["subscription"], f["circuit"]) for f in seen["failing"]]
        assert failing == [("shop", "failing", "open"), ("lab", "hidden", "open")]  # worst first
        shop_failing = next(f for f in seen["failing"] if f["subscription"] == "failing")
        assert shop_failing["failures"] == {"500": 40}
        assert shop_failing["last_failure"]["error"] == "HTTP 500: boom"
        assert [(x["subscription"], x["lag"]) for x in seen["lag"]] == [
            ("hidden", 99_999),
            ("behind", 1234),
        ]
        assert seen["oldest_unacked"][0]["subscription"] == "behind"
        assert [(d["subscription"], d["last_hour"]) for d in seen["dlq_growing"]] == [("dead", 961)]
        assert [(d["subscription"], d["last_error"]) for d in seen["disabled"]] == [
            ("off", "HTTP 503")
        ]
        moving = seen["in_flight"]
        assert [(c["project"], c["topic"], c["phase"]) for c in moving["cutovers"]] == [
            ("shop", "orders", "switch")
        ]
        assert moving["failovers"] == [{"project": "lab", "topic": "orders", "segment": 1}]
        assert seen["rates"]["delivered_per_s"] == 20.0  # 4 shop + 1 lab docs at 5/s, less 0
        assert len(seen["history"]) == 360
        assert sum(b["dead_lettered"] for b in seen["history"]) == 961
        assert "audit" in seen  # an admin sees the audit's findings (none run yet: null)

        # A second overview measures the publish rate from the end positions' growth.
        assert seen["rates"]["published_per_s"] is None

        async def measured() -> bool:
            again = (await client.get("/v1/overview")).json()
            return again["rates"]["published_per_s"] is not None

        await until(measured, 10, "a publish rate from two overviews", interval=0.2)

        await _home_page_says_it(cp)

        viewer = await _user_headers(client, "vic", ["viewer:shop"])
        mine = (await client.get("/v1/overview", headers=viewer)).json()
        assert mine["projects"] == ["shop"] and mine["subscriptions"] == 5
        assert all(row["project"] == "shop" for row in mine["failing"] + mine["lag"])
        assert mine["in_flight"]["failovers"] == [] and mine["audit"] is None
        nobody = await _user_headers(client, "otto", [])
        empty = (await client.get("/v1/overview", headers=nobody)).json()
        assert empty["projects"] == [] and empty["failing"] == []
        assert (await client.get("/v1/overview", headers={"Authorization": ""})).status_code == 401


async def _home_page_says_it(cp: ControlPlane) -> None:
    """The UI's home page shows each answer in its section, each a link to its page, and
    draws the hour and the lags as SVG; the page makes one API request."""
    assert cp.app is not None
    transport = httpx.ASGITransport(app=cp.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as browser:
        await login(browser)
        r = await browser.get("/ui/")
        assert r.status_code == 200, r.text[:500]
        html = r.text

    def section(name: str) -> str:
        return html.split(f'<section id="{name}">')[1].split("</section>")[0]

    failing = section("failing")
    assert "/ui/projects/shop/subscriptions/failing" in failing and "circuit open" in failing
    assert "HTTP 500: boom" in failing and "<code>500</code> × 40" in failing
    assert "/ui/projects/shop/subscriptions/behind" in section("lag")
    assert 'id="lag-chart"' in html and 'id="hour-chart"' in html and "<polyline" in html
    growing = section("dlq-growing")
    assert "/ui/projects/shop/subscriptions/dead/dlq" in growing and ">961<" in growing
    assert "/ui/projects/shop/subscriptions/off" in section("disabled")
    assert "/ui/projects/shop/topics/orders/cutover" in section("moving")
    assert "segment 1 left unsealed" in section("moving")


def _entry(position: int, group: str, attempts: int, status: int | None, error: str) -> Stored:
    meta = RetryMeta(
        origin=f"1:0:{position}",
        topic="shop/orders",
        attempts=attempts,
        last_status=status,
        last_error=error,
        last_failed_ms=1_000 + position,
    )
    headers = (*meta.headers(), (GROUP_ID, encode(group)))
    return Stored(0, position, 0, b"{}", None, headers)


def test_a_dlq_summary_counts_sidelined_followers_apart_and_groups_heads_by_error() -> None:
    heads = [_entry(i, f"g{i}", 3, 500, "HTTP 500: boom") for i in range(6)]
    heads.append(_entry(6, "g6", 1, 400, "HTTP 400: bad"))
    followers = [
        _entry(7 + i, f"g{i % 6}", 0, None, f"group g{i % 6} is sidelined") for i in range(955)
    ]
    found = summarize(heads + followers)
    assert (found.size, found.failed_heads, found.sidelined) == (962, 7, 955)
    groups = [(g.sidelined, g.status, g.count) for g in found.groups]
    assert groups == [(False, 500, 6), (False, 400, 1), (True, None, 955)]
