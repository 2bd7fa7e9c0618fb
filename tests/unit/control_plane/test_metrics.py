"""The control plane's /metrics (issue 18): API requests and latency by route template,
the roles this process leads, the cutovers it drives; callers cannot grow the label set."""

from __future__ import annotations

import uuid
from pathlib import Path

from core.audit import Reconciliation, SubscriptionTally
from reports.store import ReportStore
from tests.support.control_plane import embedded_control_plane
from tests.support.until import until


async def test_metrics_show_routes_leaders_and_stay_small(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path) as cp:
        assert (await cp.client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        assert (await cp.client.get("/v1/projects/shop")).status_code == 200
        for _ in range(300):  # random names and paths: one route, one _other
            await cp.client.get(f"/v1/projects/p{uuid.uuid4().hex[:12]}")
            await cp.client.get(f"/nowhere/{uuid.uuid4().hex}")

        async def text() -> str:
            return (await cp.client.get("/metrics")).text

        found = await until(
            lambda: _when(text(), 'httpbus_control_plane_leader{role="assigner"} 1.0'), 10
        )
        assert (
            'httpbus_control_plane_requests_total{method="POST",route="/v1/projects",status="201"}'
            in found
        )
        assert 'route="/v1/projects/{project}",status="404"} 300.0' in found
        assert 'route="_other",status="404"} 300.0' in found
        for role in ("cutover", "failover", "migration", "retirement"):  # each elected alone
            assert f'httpbus_control_plane_leader{{role="{role}"}}' in found
        assert "httpbus_cutovers_active 0.0" in found
        assert "httpbus_control_plane_request_latency_seconds_bucket" in found
        assert len(found) < 40_000, len(found)


async def _when(text: object, needle: str) -> str | None:
    found: str = await text  # type: ignore[misc]
    return found if needle in found else None


async def test_metrics_show_the_newest_audit_run(tmp_path: Path) -> None:
    """What the "audit found losses" alert of the Helm chart reads."""
    url = f"sqlite:///{tmp_path}/reports.db"
    async with embedded_control_plane(tmp_path, database_url=url) as cp:
        before = (await cp.client.get("/metrics")).text
        assert "httpbus_audit_last_run_lost" not in before  # no run yet
        store = ReportStore.from_url(url)
        tally = SubscriptionTally(subscription="shop/billing", expected=9, lost=3, duplicates=2)
        rec = Reconciliation(
            since_ms=0, until_ms=1, as_of_ms=2, horizon_ms=1, events=9, tallies=[tally]
        )
        store.save_reconciliation(rec, mode="batch", source="s", started_at_ms=5_000, duration_ms=1)
        store.close()
        text = (await cp.client.get("/metrics")).text
    assert "httpbus_audit_last_run_lost 3.0" in text
    assert "httpbus_audit_last_run_duplicates 2.0" in text
    assert "httpbus_audit_last_run_timestamp_seconds 5.0" in text
