"""``ReportStore``: write the audit jobs' results, read them back for the API and the CLI.

Synchronous (SQLAlchemy's ORM): callers on an event loop run it in a thread (the control plane's
routes are plain ``def``, which FastAPI runs in its thread pool). Database errors become
``StorageUnavailable`` here, at the boundary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self, TypeVar

from sqlalchemy import Engine, create_engine, delete, event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, selectinload, sessionmaker

from core.audit import CutoverCheck, HourlyRow, Reconciliation
from core.errors import StorageUnavailable

from .models import (
    CutoverVerificationRow,
    FindingRow,
    HourlyReportRow,
    ReconciliationRunRow,
)

T = TypeVar("T")


def engine_url(url: str) -> str:
    """``url`` with the driver SQLAlchemy should use: psycopg 3 for a plain ``postgresql://``
    (libpq's form, as ``psql`` takes it)."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str) -> Engine:
    """An engine for ``url``; a SQLite file's folder is created, and SQLite enforces foreign
    keys (it does not by default)."""
    parsed = make_url(engine_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, pool_pre_ping=True)
    if parsed.get_backend_name() == "sqlite":

        @event.listens_for(engine, "connect")
        def _fk_on(conn: object, record: object) -> None:
            cursor = conn.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

    return engine


@contextmanager
def database_errors(what: str) -> Iterator[None]:
    """SQLAlchemy's errors as ``StorageUnavailable`` naming ``what`` failed."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise StorageUnavailable(
            f"{what} failed (is it migrated? httpbus db upgrade): {exc}"
        ) from exc


class Tables:
    """The base of a group of tables in the relational store at ``engine``: opened from a
    database URL (:func:`make_engine`), closed by disposing of the engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(make_engine(url))

    def close(self) -> None:
        self.engine.dispose()


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReportStore(Tables):
    """The reports in the relational store at ``engine`` (schema from ``httpbus db upgrade``)."""

    def __init__(self, engine: Engine, clock_ms: Callable[[], int] = _now_ms) -> None:
        super().__init__(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._clock_ms = clock_ms

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with database_errors("the report database"), self._sessions.begin() as session:
            yield session

    # ------------------------------------------------------------ writes
    def save_reconciliation(
        self,
        result: Reconciliation,
        *,
        mode: str,
        source: str,
        started_at_ms: int,
        duration_ms: int,
    ) -> int:
        """Store a run and its findings; its id."""
        run = ReconciliationRunRow(
            started_at_ms=started_at_ms,
            duration_ms=duration_ms,
            mode=mode,
            source=source,
            since_ms=result.since_ms,
            until_ms=result.until_ms,
            as_of_ms=result.as_of_ms,
            horizon_ms=result.horizon_ms,
            events=result.events,
            expected=result.total("expected"),
            lost=result.total("lost"),
            late=result.total("late"),
            pending=result.total("pending"),
            duplicates=result.total("duplicates"),
            unaccepted=result.unaccepted,
            tallies=json.dumps([t.model_dump() for t in result.tallies]),
            findings=[
                FindingRow(
                    kind=f.kind.value,
                    subscription=f.subscription,
                    message_id=f.message_id,
                    accepted_at_ms=f.accepted_at_ms,
                    terminal_at_ms=f.terminal_at_ms,
                    count=f.count,
                )
                for f in result.findings
            ],
        )
        with self._session() as session:
            session.add(run)
            session.flush()
            return run.id

    def upsert_hourly(self, rows: Sequence[HourlyRow]) -> None:
        """Insert or replace the rows of their (subscription, window)."""
        if not rows:
            return
        now = self._clock_ms()
        with self._session() as session:
            for row in rows:
                session.execute(
                    delete(HourlyReportRow).where(
                        HourlyReportRow.subscription == row.subscription,
                        HourlyReportRow.window_start_ms == row.window_start_ms,
                    )
                )
            session.flush()
            session.add_all(HourlyReportRow(**row.model_dump(), updated_at_ms=now) for row in rows)

    def save_cutovers(self, checks: Sequence[CutoverCheck]) -> None:
        now = self._clock_ms()
        with self._session() as session:
            session.add_all(
                CutoverVerificationRow(
                    verified_at_ms=now,
                    project=c.cutover.project,
                    topic=c.cutover.topic,
                    from_segment=c.cutover.from_segment,
                    to_segment=c.cutover.to_segment,
                    sealed_at_ms=c.cutover.sealed_at_ms,
                    old_segment_messages=c.old_segment_messages,
                    new_segment_messages=c.new_segment_messages,
                    groups_across=c.groups_across,
                    ok=c.ok,
                    findings=json.dumps([f.model_dump(mode="json") for f in c.findings]),
                )
                for c in checks
            )

    # ------------------------------------------------------------ reads
    def runs(self, limit: int = 20, before: int | None = None) -> list[ReconciliationRunRow]:
        """The latest runs, newest first (without their findings); with ``before``, the
        latest of those older than run ``before``."""
        query = select(ReconciliationRunRow).order_by(ReconciliationRunRow.id.desc()).limit(limit)
        if before is not None:
            query = query.where(ReconciliationRunRow.id < before)
        with self._session() as session:
            return list(session.scalars(query))

    def run(self, run_id: int) -> ReconciliationRunRow | None:
        """One run with its findings loaded."""
        query = (
            select(ReconciliationRunRow)
            .where(ReconciliationRunRow.id == run_id)
            .options(selectinload(ReconciliationRunRow.findings))
        )
        with self._session() as session:
            return session.scalars(query).one_or_none()

    def hourly(
        self,
        *,
        subscription: str | None = None,
        project: str | None = None,
        since_ms: int | None = None,
        limit: int = 1000,
    ) -> list[HourlyReportRow]:
        """Report rows, oldest window first; ``project`` keeps the subscriptions of a project
        (``project/…``)."""
        query = select(HourlyReportRow)
        if subscription is not None:
            query = query.where(HourlyReportRow.subscription == subscription)
        if project is not None:
            query = query.where(HourlyReportRow.subscription.startswith(f"{project}/"))
        if since_ms is not None:
            query = query.where(HourlyReportRow.window_start_ms >= since_ms)
        query = query.order_by(HourlyReportRow.window_start_ms, HourlyReportRow.subscription)
        with self._session() as session:
            return list(session.scalars(query.limit(limit)))

    def cutovers(self, limit: int = 100, before: int | None = None) -> list[CutoverVerificationRow]:
        """The latest cutover verifications, newest first; with ``before``, the latest of
        those older than verification ``before``."""
        query = (
            select(CutoverVerificationRow).order_by(CutoverVerificationRow.id.desc()).limit(limit)
        )
        if before is not None:
            query = query.where(CutoverVerificationRow.id < before)
        with self._session() as session:
            return list(session.scalars(query))
