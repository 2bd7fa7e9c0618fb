"""The audit read API on a migrated SQLite store: runs newest first with summaries, one run with
its lost / late / duplicate ids, hourly rows filtered by project, subscription and time with the
failure rate, cutovers with their findings; 401 without the token, 404 for an unknown run,
422 naming the field for a bad ``since`` or a bare subscription name without its project."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from control_plane.api import audit as audit_api
from control_plane.api.auth import Authenticator
from control_plane.services import listing
from core import http_errors
from core.audit import (
    AuditCutover,
    CutoverCheck,
    Finding,
    FindingKind,
    HourlyRow,
    Reconciliation,
    SubscriptionTally,
)
from reports import migrate
from reports.principals import PrincipalStore
from reports.store import ReportStore

TOKEN = "t" * 32
H = {"Authorization": f"Bearer {TOKEN}"}
HOUR = 3_600_000


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    store = ReportStore.from_url(url)
    rec = Reconciliation(
        since_ms=0,
        until_ms=HOUR,
        as_of_ms=2 * HOUR,
        horizon_ms=60_000,
        events=10,
        tallies=[SubscriptionTally(subscription="shop/billing", expected=5, lost=1, duplicates=1)],
        findings=[
            Finding(kind=FindingKind.LOST, subscription="shop/billing", message_id="m1"),
            Finding(kind=FindingKind.LATE, subscription="shop/billing", message_id="m2"),
            Finding(
                kind=FindingKind.DUPLICATE, subscription="shop/billing", message_id="m3", count=2
            ),
        ],
    )
    store.save_reconciliation(rec, mode="batch", source="s", started_at_ms=1, duration_ms=5)
    store.save_reconciliation(rec, mode="batch", source="s", started_at_ms=2, duration_ms=5)
    store.upsert_hourly(
        [
            HourlyRow(
                window_start_ms=0,
                window_end_ms=HOUR,
                subscription="shop/billing",
                attempted=4,
                failed_attempts=1,
                latency_p99_ms=12.0,
            ),
            HourlyRow(window_start_ms=HOUR, window_end_ms=2 * HOUR, subscription="shop/billing"),
            HourlyRow(window_start_ms=0, window_end_ms=HOUR, subscription="other/x"),
        ]
    )
    cut = AuditCutover(project="shop", topic="orders", from_segment=1, to_segment=2, sealed_at_ms=7)
    store.save_cutovers([CutoverCheck(cutover=cut, old_segment_messages=3)])
    store.close()
    app = FastAPI()
    http_errors.install(app)
    app.state.authenticator = Authenticator(TOKEN, PrincipalStore.from_url(url))
    app.include_router(audit_api.router(url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://cp") as opened:
        yield opened


async def test_runs(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/audit/runs")).status_code == 401
    runs = (await client.get("/v1/audit/runs", headers=H)).json()["runs"]
    assert [r["id"] for r in runs] == [2, 1]
    assert (runs[0]["lost"], runs[0]["duplicates"], runs[0]["expected"]) == (1, 1, 5)
    run = (await client.get("/v1/audit/runs/1", headers=H)).json()
    assert [f["message_id"] for f in run["lost"]] == ["m1"]
    assert [f["message_id"] for f in run["late"]] == ["m2"]
    assert [(f["message_id"], f["deliveries"]) for f in run["duplicates"]] == [("m3", 2)]
    assert run["subscriptions"][0]["subscription"] == "shop/billing"
    missing = await client.get("/v1/audit/runs/99", headers=H)
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")


async def test_hourly_and_cutovers(client: httpx.AsyncClient) -> None:
    rows = (await client.get("/v1/audit/hourly", params={"project": "shop"}, headers=H)).json()[
        "rows"
    ]
    assert [r["window_start"] for r in rows] == ["1970-01-01T00:00:00Z", "1970-01-01T01:00:00Z"]
    assert (rows[0]["failure_rate"], rows[0]["latency_ms"]["p99"]) == (0.25, 12.0)
    later = (
        await client.get(
            "/v1/audit/hourly",
            params={"project": "shop", "subscription": "billing", "since": "1970-01-01T00:30:00Z"},
            headers=H,
        )
    ).json()["rows"]
    assert [r["window_start"] for r in later] == ["1970-01-01T01:00:00Z"]
    bad = await client.get("/v1/audit/hourly", params={"since": "yesterday"}, headers=H)
    assert bad.status_code == 422 and "since" in bad.json()["message"]
    bare = await client.get("/v1/audit/hourly", params={"subscription": "billing"}, headers=H)
    assert bare.status_code == 422 and "subscription" in bare.json()["message"]
    (cut,) = (await client.get("/v1/audit/cutovers", headers=H)).json()["cutovers"]
    assert (cut["ok"], cut["old_segment_messages"], cut["findings"]) == (True, 3, [])


async def test_runs_and_cutovers_page_newest_first_by_cursor(client: httpx.AsyncClient) -> None:
    first = (await client.get("/v1/audit/runs", params={"limit": 1}, headers=H)).json()
    assert [r["id"] for r in first["runs"]] == [2] and first["next_cursor"]
    older = {"limit": 1, "cursor": first["next_cursor"]}
    second = (await client.get("/v1/audit/runs", params=older, headers=H)).json()
    assert [r["id"] for r in second["runs"]] == [1] and second["next_cursor"] is None
    whole = (await client.get("/v1/audit/runs", params={"limit": 2}, headers=H)).json()
    assert whole["next_cursor"] is None  # exactly a page: no empty page after it
    cuts = (await client.get("/v1/audit/cutovers", params={"limit": 1}, headers=H)).json()
    assert len(cuts["cutovers"]) == 1 and cuts["next_cursor"] is None
    for bad in ("nonsense", listing.encode_cursor("x"), listing.encode_cursor("1", before=True)):
        for route in ("/v1/audit/runs", "/v1/audit/cutovers"):
            refused = await client.get(route, params={"cursor": bad}, headers=H)
            assert (refused.status_code, refused.json()["code"]) == (400, "malformed"), bad
            assert "cursor" in refused.json()["message"]
