"""A report database with something in it, for the tests that read the audit reports through
the API, the CLI or the UI: one reconciliation run of ``shop/s1`` with a lost id and a
duplicate, and the hourly rows and cutover checks a test gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.audit import (
    CutoverCheck,
    Finding,
    FindingKind,
    HourlyRow,
    Reconciliation,
    SubscriptionTally,
)
from reports.store import ReportStore

HOUR_MS = 3_600_000
LOST, DUPLICATE = "m-lost-1", "m7"  # the run's findings: one lost id, one delivered twice


def sample_run() -> Reconciliation:
    """The first hour of ``shop/s1``: 20 expected, 19 delivered, ``LOST`` never delivered,
    ``DUPLICATE`` delivered twice."""
    return Reconciliation(
        since_ms=0,
        until_ms=HOUR_MS,
        as_of_ms=HOUR_MS,
        horizon_ms=60_000,
        events=40,
        tallies=[
            SubscriptionTally(
                subscription="shop/s1", expected=20, delivered=19, lost=1, duplicates=1
            )
        ],
        findings=[
            Finding(kind=FindingKind.LOST, subscription="shop/s1", message_id=LOST),
            Finding(
                kind=FindingKind.DUPLICATE, subscription="shop/s1", message_id=DUPLICATE, count=2
            ),
        ],
    )


def sample_hour(**fields: Any) -> HourlyRow:
    """The hourly row of ``shop/s1`` for that hour: 2 delivered, 1 failed attempt, a p99 of
    41.5 ms; ``fields`` add to it (``attempted=3`` makes a failure rate of 1 in 3)."""
    base: dict[str, Any] = {"delivered": 2, "failed_attempts": 1, "latency_p99_ms": 41.5}
    return HourlyRow(
        window_start_ms=0, window_end_ms=HOUR_MS, subscription="shop/s1", **(base | fields)
    )


def seed_reports(
    url: str, hourly: Sequence[HourlyRow] = (), cutovers: Sequence[CutoverCheck] = ()
) -> int:
    """Store ``hourly``, ``cutovers`` and then :func:`sample_run` (a batch run over files,
    started at the end of the hour, 900 ms long) in the migrated database at ``url``; the
    run's id."""
    store = ReportStore.from_url(url)
    try:
        if hourly:
            store.upsert_hourly(list(hourly))
        if cutovers:
            store.save_cutovers(list(cutovers))
        return store.save_reconciliation(
            sample_run(), mode="batch", source="files", started_at_ms=HOUR_MS, duration_ms=900
        )
    finally:
        store.close()
