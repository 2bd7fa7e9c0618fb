"""A verified migration's windows in the migrated report database: saved with their ids,
replaced by a later round's verdict of the same window, read back per migration and from a
start, oldest first (tests/support/migrations.py checks the table against the model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.migration import Migration, MigrationWindow
from reports import migrate
from reports.migration_windows import MigrationWindows

W = 60_000


@pytest.fixture
def history(tmp_path: Path) -> Iterator[MigrationWindows]:
    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    opened = MigrationWindows.from_url(url)
    yield opened
    opened.close()


def _migration(mid: str, topic: str = "orders") -> Migration:
    return Migration(
        id=mid,
        project="shop",
        topic=topic,
        cluster="kafka-main",
        partitions=2,
        window_s=60,
        session_gap_s=5,
        clean_windows=2,
        guard_s=600,
        external_segment=1,
        shadow_segment=2,
        legacy_start={0: 0, 1: 0},
    )


def _window(i: int, *, missing: list[str] | None = None, closed: bool = True) -> MigrationWindow:
    return MigrationWindow(
        start_ms=i * W,
        end_ms=(i + 1) * W,
        matched=10 + i,
        late=0,
        missing_in_bus=len(missing or []),
        missing_in_legacy=0,
        duplicates=0,
        closed=closed,
        missing_in_bus_ids=missing or [],
    )


def test_windows_round_trip_and_a_later_verdict_replaces_the_earlier(
    history: MigrationWindows,
) -> None:
    m, other = _migration("m1"), _migration("m2", topic="payments")
    history.save(m, [_window(0, missing=["e1", "e2"]), _window(1, closed=False)], 1)
    history.save(other, [_window(0)], 1)
    history.save(m, [_window(1), _window(2)], 2)  # window 1 closed now
    found = history.history("shop", "orders", "m1")
    assert [w.start_ms for w in found] == [0, W, 2 * W]
    assert found[0].missing_in_bus_ids == ["e1", "e2"] and not found[0].clean
    assert found[1].closed and found[1].clean
    assert [w.start_ms for w in history.history("shop", "orders", "m1", since_ms=W)] == [W, 2 * W]
    assert len(history.history("shop", "orders", "m1", limit=1)) == 1
    assert history.history("shop", "orders", "m2") == []  # another topic's migration
    assert [w.matched for w in history.history("shop", "payments", "m2")] == [10]
