"""``TraceIndex``: the audit trail indexed by message id, for "where is my message?".

The control plane's trace indexer (``control_plane.leaders.trace_indexer``) reads the audit topic
and calls :meth:`TraceIndex.insert` with batches of events, each named by where it sits in
the topic (``partition:position:index``): a batch read twice (after a restart, before its
position was committed) inserts nothing new. :meth:`TraceIndex.message` and
:meth:`TraceIndex.group` read it back for the API; :meth:`TraceIndex.prune` drops what is
older than the retention.

Synchronous, like :class:`~reports.store.ReportStore`: callers on an event loop run it in a
thread. Database errors become ``StorageUnavailable``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from core.audit import AuditEvent

from .models import TraceEventRow
from .store import Tables, database_errors

ERROR_CHARS = 500  # an event's error is kept up to this many characters
_TABLE: Table = TraceEventRow.__table__  # type: ignore[assignment]  # a Table, typed FromClause


@dataclass(frozen=True, slots=True)
class SourcedEvent:
    """An audit event and where it sits in the audit topic."""

    source: str  # "partition:position:index"
    event: AuditEvent

    def row(self) -> dict[str, Any]:
        e = self.event
        return {
            "source": self.source,
            "message_id": e.message_id[:256],
            "project": e.project[:128],
            "topic": e.topic[:128],
            "subscription": e.subscription,
            "type": e.type.value,
            "at_ms": e.at_ms,
            "group_id": e.group,
            "segment": e.segment,
            "partition": e.partition,
            "position": e.position,
            "attempt": e.attempt,
            "status": e.status,
            "size": e.size,
            "produced_at_ms": e.produced_at_ms,
            "error": e.error[:ERROR_CHARS] if e.error else None,
            "latency_ms": e.latency_ms,
            "answer": e.answer[:ERROR_CHARS] if e.answer else None,
            "level_ms": e.level_ms,
            "headers": json.dumps(e.headers, separators=(",", ":")) if e.headers else None,
        }


class TraceIndex(Tables):
    """The ``trace_events`` table at ``engine`` (schema from ``httpbus db upgrade``)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._dialect = engine.dialect.name

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        with database_errors("the trace index"), self.engine.begin() as conn:
            yield conn

    def insert(self, events: Sequence[SourcedEvent]) -> int:
        """Store ``events`` in one transaction, skipping any already stored (same source);
        how many were offered (events of no message, like a circuit's, are not indexed)."""
        rows = [e.row() for e in events if e.event.message_id]
        if rows:
            with self._connection() as conn:
                conn.execute(self._insert_ignoring_duplicates(), rows)
        return len(rows)

    def _insert_ignoring_duplicates(self) -> Any:
        if self._dialect == "postgresql":
            return postgresql.insert(_TABLE).on_conflict_do_nothing(index_elements=["source"])
        if self._dialect == "sqlite":
            return sqlite.insert(_TABLE).on_conflict_do_nothing(index_elements=["source"])
        return insert(_TABLE).prefix_with("IGNORE")  # MySQL's form

    def message(self, project: str, topic: str, message_id: str) -> list[TraceEventRow]:
        """Every indexed event of one message, oldest first."""
        return self.messages(project, topic, [message_id]).get(message_id, [])

    def messages(
        self, project: str, topic: str, message_ids: Sequence[str]
    ) -> dict[str, list[TraceEventRow]]:
        """Every indexed event of each of ``message_ids`` (one query), oldest first."""
        query = (
            select(TraceEventRow)
            .where(
                TraceEventRow.project == project,
                TraceEventRow.topic == topic,
                TraceEventRow.message_id.in_(message_ids),
            )
            .order_by(TraceEventRow.at_ms, TraceEventRow.id)
        )
        found: dict[str, list[TraceEventRow]] = {}
        with self._connection() as conn:
            for row in conn.execute(query):
                found.setdefault(row.message_id, []).append(TraceEventRow(**row._mapping))
        return found

    def where_is(
        self, message_id: str, projects: Sequence[str] | None, limit: int = 20
    ) -> list[tuple[str, str]]:
        """``(project, topic)`` of every topic of ``projects`` (None: any) that has indexed
        events of ``message_id``; at most ``limit``. The index leads with project and topic,
        so this reads each project's part of it (the header search; no index of its own)."""
        query = select(TraceEventRow.project, TraceEventRow.topic).where(
            TraceEventRow.message_id == message_id
        )
        if projects is not None:
            query = query.where(TraceEventRow.project.in_(list(projects)))
        query = query.distinct().order_by(TraceEventRow.project, TraceEventRow.topic)
        with self._connection() as conn:
            return [(row.project, row.topic) for row in conn.execute(query.limit(limit))]

    def group(self, project: str, topic: str, group: str, limit: int) -> list[str]:
        """The ids of the last ``limit`` messages accepted in ``group``, newest first (the
        group index, read backwards; an id accepted twice is named once)."""
        query = (
            select(TraceEventRow.message_id)
            .where(
                TraceEventRow.project == project,
                TraceEventRow.topic == topic,
                TraceEventRow.group_id == group,
                TraceEventRow.type == "accepted",
            )
            .order_by(TraceEventRow.at_ms.desc(), TraceEventRow.id.desc())
            .limit(2 * limit)
        )
        with self._connection() as conn:
            ids = [row.message_id for row in conn.execute(query)]
        return list(dict.fromkeys(ids))[:limit]

    def prune(self, before_ms: int) -> int:
        """Delete the events older than ``before_ms``; how many."""
        with self._connection() as conn:
            done = conn.execute(delete(_TABLE).where(_TABLE.c.at_ms < before_ms))
            return int(done.rowcount or 0)
