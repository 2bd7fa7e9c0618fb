"""The migrations and the report store on a real PostgreSQL (Debian's package, started by
scripts/realservices): up to head matches the typed models exactly, down to base leaves no
table, up again works; a run and its findings round-trip through psycopg 3."""

from __future__ import annotations

import pytest

from core.audit import Finding, FindingKind, Reconciliation, SubscriptionTally
from reports.store import ReportStore
from tests.support.migrations import check_up_down_up

pytestmark = pytest.mark.postgres


def test_postgres_up_down_up(postgres_database: str) -> None:
    check_up_down_up(postgres_database)


def test_store_round_trip_on_postgres(postgres_database: str) -> None:
    from reports import migrate

    migrate.upgrade(postgres_database)
    store = ReportStore.from_url(postgres_database)
    try:
        result = Reconciliation(
            since_ms=0,
            until_ms=1,
            as_of_ms=2,
            horizon_ms=3,
            tallies=[SubscriptionTally(subscription="p/s", expected=5_000_000_000, lost=1)],
            findings=[Finding(kind=FindingKind.LOST, subscription="p/s", message_id="m1")],
        )
        run_id = store.save_reconciliation(
            result, mode="batch", source="t", started_at_ms=1_700_000_000_000, duration_ms=1
        )
        run = store.run(run_id)
        assert run is not None
        assert (run.expected, run.lost) == (5_000_000_000, 1)  # BIGINT, not INTEGER
        assert [f.message_id for f in run.findings] == ["m1"]
    finally:
        store.close()
