"""The audit page pages its reconciliation runs newest first by the API's cursor: 20 a page,
an "older runs" link while there are older ones, a "newest" link back, and a cursor the API
did not give shown as that table's error, not a crash (issue 35)."""

from __future__ import annotations

import re
from pathlib import Path

from core.audit import Reconciliation, SubscriptionTally
from reports.store import ReportStore
from tests.support.control_plane import browser_control_plane
from tests.support.ui_pages import login


def _link(page: str, rel: str) -> str | None:
    found = re.search(rf'href="([^"]+)" rel="{rel}"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def _run_ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'href="/ui/audit/runs/(\d+)"', page)]


async def test_runs_page_to_the_oldest_and_back(tmp_path: Path) -> None:
    async with browser_control_plane(tmp_path, users={}) as cp:
        store = ReportStore.from_url(f"sqlite:///{tmp_path / 'reports.db'}")
        tally = SubscriptionTally(subscription="shop/billing", expected=1)
        rec = Reconciliation(
            since_ms=0, until_ms=1, as_of_ms=2, horizon_ms=1, events=1, tallies=[tally]
        )
        for started in range(23):
            store.save_reconciliation(
                rec, mode="batch", source="s", started_at_ms=started, duration_ms=1
            )
        store.close()
        await login(cp.client)
        first = (await cp.client.get("/ui/audit")).text
        newest = _run_ids(first)
        assert len(newest) == 20 and newest == sorted(newest, reverse=True)
        assert _link(first, "first") is None
        older = _link(first, "older-runs_cursor")
        assert older is not None
        second = (await cp.client.get(older)).text
        rest = _run_ids(second)
        assert len(rest) == 3 and max(rest) < min(newest)
        assert _link(second, "older-runs_cursor") is None
        back = _link(second, "first")
        assert back is not None and _run_ids((await cp.client.get(back)).text) == newest
        bad = await cp.client.get("/ui/audit", params={"runs_cursor": "nonsense"})
        assert bad.status_code == 200 and "cursor" in bad.text and "Traceback" not in bad.text
