"""``MigrationWindows``: every window a verified migration's check judged, in the relational
store (``core.migration``, docs/migrating.md).

The migration record in the metastore keeps the newest windows the leader decides on
(``core.migration.MAX_WINDOWS``); each check round also writes its windows here
(:meth:`MigrationWindows.save`, replacing a window it judged before, so a re-run's verdicts
win) and the API's ``GET …/migration/windows`` reads the whole history back.

Synchronous, like :class:`~reports.store.ReportStore`: callers on an event loop run it in a
thread. Database errors become ``StorageUnavailable``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import sessionmaker

from core.migration import Migration, MigrationWindow

from .models import MigrationWindowRow
from .store import Tables, database_errors


class MigrationWindows(Tables):
    """The ``migration_windows`` table at ``engine`` (schema from ``httpbus db upgrade``)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    def save(self, m: Migration, windows: Sequence[MigrationWindow], checked_at_ms: int) -> None:
        """Store ``windows`` of ``m``, each replacing the one of its start stored before."""
        if not windows:
            return
        starts = [w.start_ms for w in windows]
        with database_errors("the migration windows"), self._sessions.begin() as session:
            session.execute(
                delete(MigrationWindowRow).where(
                    MigrationWindowRow.migration_id == m.id,
                    MigrationWindowRow.start_ms.in_(starts),
                )
            )
            session.add_all(_row(m, w, checked_at_ms) for w in windows)

    def history(
        self, project: str, topic: str, migration_id: str, *, since_ms: int = 0, limit: int = 1000
    ) -> list[MigrationWindow]:
        """The windows of one migration from ``since_ms``, oldest first."""
        query = (
            select(MigrationWindowRow)
            .where(
                MigrationWindowRow.project == project,
                MigrationWindowRow.topic == topic,
                MigrationWindowRow.migration_id == migration_id,
                MigrationWindowRow.start_ms >= since_ms,
            )
            .order_by(MigrationWindowRow.start_ms)
            .limit(limit)
        )
        with database_errors("the migration windows"), self._sessions.begin() as session:
            return [_window(row) for row in session.scalars(query)]


# The columns that are the window's own fields, as they are.
FIELDS = (
    "start_ms", "end_ms", "matched", "late", "missing_in_bus", "missing_in_legacy", "duplicates",
    "closed",
)  # fmt: skip
IDS = {"missing_in_bus": "missing_in_bus_ids", "missing_in_legacy": "missing_in_legacy_ids",
       "late": "late_ids"}  # fmt: skip


def _row(m: Migration, w: MigrationWindow, checked_at_ms: int) -> MigrationWindowRow:
    ids = {key: getattr(w, field) for key, field in IDS.items()}
    return MigrationWindowRow(
        migration_id=m.id,
        project=m.project,
        topic=m.topic,
        **w.model_dump(include=set(FIELDS)),
        clean=w.clean,
        ids=json.dumps(ids, separators=(",", ":")),
        checked_at_ms=checked_at_ms,
    )


def _window(row: MigrationWindowRow) -> MigrationWindow:
    ids = json.loads(row.ids)
    return MigrationWindow(
        **{name: getattr(row, name) for name in FIELDS},
        **{field: ids[key] for key, field in IDS.items()},
    )
