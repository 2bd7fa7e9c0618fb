"""A verified migration's windows in the migrated report database: saved with their ids,
replaced by a later round's verdict of the same window, read back per migration and from a
start, oldest first (tests/support/migrations.py checks the table against the model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.migration import MigrationWindow
from reports import migrate
from reports.migration_windows import MigrationWindows
from tests.support.migration_docs import migration, window

W = 60_000


@pytest.fixture
def history(tmp_path: Path) -> Iterator[MigrationWindows]:
    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    opened = MigrationWindows.from_url(url)
    yield opened
    opened.close()


def _window(i: int, *, missing: list[str] | None = None, closed: bool = True) -> MigrationWindow:
    return window(i * W, W, matched=10 + i, missing=missing or [], closed=closed)


def test_windows_round_trip_and_a_later_verdict_replaces_the_earlier(
    history: MigrationWindows,
) -> None:
    m, other = migration(), migration(id="m2", topic="payments")
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
