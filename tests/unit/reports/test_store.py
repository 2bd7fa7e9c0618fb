"""The report store on a migrated SQLite file: a reconciliation run is stored with its findings
and read back (newest first, findings by id), an hourly row is replaced by the next version of
its window (streaming upserts), filters by project, subscription and time hold, cutover checks
keep their findings; a broken database answers StorageUnavailable, not a driver error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.audit import (
    AuditCutover,
    CutoverCheck,
    Finding,
    FindingKind,
    HourlyRow,
    Reconciliation,
    SubscriptionTally,
)
from core.errors import StorageUnavailable
from reports import migrate
from reports.store import ReportStore


@pytest.fixture
def store(tmp_path: Path) -> ReportStore:
    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    opened = ReportStore.from_url(url)
    yield opened  # type: ignore[misc]
    opened.close()


def _result(lost: list[str]) -> Reconciliation:
    return Reconciliation(
        since_ms=0,
        until_ms=10,
        as_of_ms=20,
        horizon_ms=5,
        events=99,
        unaccepted=1,
        tallies=[SubscriptionTally(subscription="p/s", expected=10, lost=len(lost), duplicates=2)],
        findings=[Finding(kind=FindingKind.LOST, subscription="p/s", message_id=m) for m in lost]
        + [Finding(kind=FindingKind.DUPLICATE, subscription="p/s", message_id="d", count=3)],
    )


def test_runs_round_trip(store: ReportStore) -> None:
    first = store.save_reconciliation(
        _result(["a"]), mode="batch", source="x", started_at_ms=1, duration_ms=2
    )
    second = store.save_reconciliation(
        _result(["b", "c"]), mode="batch", source="x", started_at_ms=3, duration_ms=4
    )
    assert [r.id for r in store.runs()] == [second, first]
    run = store.run(second)
    assert run is not None
    assert (run.expected, run.lost, run.duplicates, run.unaccepted, run.events) == (10, 2, 2, 1, 99)
    assert [(f.kind, f.message_id, f.count) for f in run.findings] == [
        ("lost", "b", 1),
        ("lost", "c", 1),
        ("duplicate", "d", 3),
    ]
    assert json.loads(run.tallies)[0]["subscription"] == "p/s"
    assert store.run(12345) is None


def _row(sub: str, start: int, delivered: int) -> HourlyRow:
    return HourlyRow(
        window_start_ms=start,
        window_end_ms=start + 3_600_000,
        subscription=sub,
        delivered=delivered,
    )


def test_hourly_upsert_and_filters(store: ReportStore) -> None:
    store.upsert_hourly([_row("p/a", 0, 1), _row("q/b", 0, 5)])
    store.upsert_hourly([_row("p/a", 0, 7), _row("p/a", 3_600_000, 2)])
    rows = store.hourly()
    assert [(r.subscription, r.window_start_ms, r.delivered) for r in rows] == [
        ("p/a", 0, 7),
        ("q/b", 0, 5),
        ("p/a", 3_600_000, 2),
    ]
    assert [r.subscription for r in store.hourly(project="q")] == ["q/b"]
    assert [r.window_start_ms for r in store.hourly(subscription="p/a", since_ms=1)] == [3_600_000]


def test_cutover_checks(store: ReportStore) -> None:
    cut = AuditCutover(project="p", topic="t", from_segment=1, to_segment=2, sealed_at_ms=5)
    bad = Finding(kind=FindingKind.ORDER, subscription="p/s", message_id="m", detail="late")
    store.save_cutovers([CutoverCheck(cutover=cut), CutoverCheck(cutover=cut, findings=[bad])])
    newest, oldest = store.cutovers()
    assert (newest.ok, oldest.ok) == (False, True)
    assert json.loads(newest.findings)[0]["message_id"] == "m"


def test_database_errors_are_storage_unavailable(tmp_path: Path) -> None:
    unmigrated = ReportStore.from_url(f"sqlite:///{tmp_path}/empty.db")
    with pytest.raises(StorageUnavailable, match="report database"):
        unmigrated.runs()
    unmigrated.close()
