"""The Alembic migrations on SQLite: upgrade to head creates exactly the tables of the typed
models (Alembic's own comparison finds no difference), downgrade to base removes them all, and
up again works (the migrations are reversible); ``current`` follows."""

from __future__ import annotations

from pathlib import Path

from tests.support.migrations import check_up_down_up


def test_sqlite_up_down_up(tmp_path: Path) -> None:
    check_up_down_up(f"sqlite:///{tmp_path}/sub/reports.db")
