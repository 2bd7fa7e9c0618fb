"""The tables of the relational store as SQLAlchemy 2 typed models.

Times are integers of milliseconds since the epoch, like the audit events: no time zone
ambiguity between SQLite and PostgreSQL. The migration ``0001`` creates exactly these tables
(a unit test compares them).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class ReconciliationRunRow(Base):
    """One run of the reconciliation and its totals."""

    __tablename__ = "reconciliation_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    duration_ms: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(256))
    since_ms: Mapped[int] = mapped_column(BigInteger)
    until_ms: Mapped[int] = mapped_column(BigInteger)
    as_of_ms: Mapped[int] = mapped_column(BigInteger)
    horizon_ms: Mapped[int] = mapped_column(BigInteger)
    events: Mapped[int] = mapped_column(BigInteger)
    expected: Mapped[int] = mapped_column(BigInteger)
    lost: Mapped[int] = mapped_column(BigInteger)
    late: Mapped[int] = mapped_column(BigInteger)
    pending: Mapped[int] = mapped_column(BigInteger)
    duplicates: Mapped[int] = mapped_column(BigInteger)
    unaccepted: Mapped[int] = mapped_column(BigInteger)
    tallies: Mapped[str] = mapped_column(Text, doc="JSON: the per-subscription counts")

    findings: Mapped[list[FindingRow]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="FindingRow.id"
    )


class FindingRow(Base):
    """A message a reconciliation named: lost, late or delivered more than once."""

    __tablename__ = "reconciliation_findings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(
        ForeignKey("reconciliation_runs.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    subscription: Mapped[str | None] = mapped_column(String(300))
    message_id: Mapped[str] = mapped_column(String(300))
    accepted_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    terminal_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    count: Mapped[int] = mapped_column(Integer, default=1)

    run: Mapped[ReconciliationRunRow] = relationship(back_populates="findings")


class HourlyReportRow(Base):
    """One subscription in one window (upserted: streaming mode rewrites open windows)."""

    __tablename__ = "hourly_reports"
    __table_args__ = (
        UniqueConstraint("subscription", "window_start_ms", name="uq_hourly_sub_window"),
        Index("ix_hourly_window", "window_start_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    subscription: Mapped[str] = mapped_column(String(300))
    window_start_ms: Mapped[int] = mapped_column(BigInteger)
    window_end_ms: Mapped[int] = mapped_column(BigInteger)
    accepted: Mapped[int] = mapped_column(BigInteger)
    attempted: Mapped[int] = mapped_column(BigInteger)
    delivered: Mapped[int] = mapped_column(BigInteger)
    filtered: Mapped[int] = mapped_column(BigInteger)
    retried: Mapped[int] = mapped_column(BigInteger)
    dead_lettered: Mapped[int] = mapped_column(BigInteger)
    failed_attempts: Mapped[int] = mapped_column(BigInteger)
    latency_p50_ms: Mapped[float | None] = mapped_column(Float)
    latency_p95_ms: Mapped[float | None] = mapped_column(Float)
    latency_p99_ms: Mapped[float | None] = mapped_column(Float)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)


class CutoverVerificationRow(Base):
    """The verification of one cutover boundary, with its findings as JSON."""

    __tablename__ = "cutover_verifications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    verified_at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    project: Mapped[str] = mapped_column(String(128))
    topic: Mapped[str] = mapped_column(String(128))
    from_segment: Mapped[int] = mapped_column(Integer)
    to_segment: Mapped[int] = mapped_column(Integer)
    sealed_at_ms: Mapped[int] = mapped_column(BigInteger)
    old_segment_messages: Mapped[int] = mapped_column(BigInteger)
    new_segment_messages: Mapped[int] = mapped_column(BigInteger)
    groups_across: Mapped[int] = mapped_column(BigInteger)
    ok: Mapped[bool] = mapped_column()
    findings: Mapped[str] = mapped_column(Text, doc="JSON list of findings")


class ProduceTokenRow(Base):
    """A produce token (mirrors ``core.model.ProduceToken``: only the SHA-256 is kept). Not
    used yet: tokens live in the metastore; this table is where they move to."""

    __tablename__ = "produce_tokens"
    __table_args__ = (Index("ix_tokens_project", "project"),)

    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    project: Mapped[str] = mapped_column(String(128))
    topics: Mapped[str] = mapped_column(Text, doc="JSON list of topic names or '*'")
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class TraceEventRow(Base):
    """One audit event, indexed for the message trace (``reports.trace``): keyed by where it
    sits in the audit topic (``source``: partition, position, index in the record), so an
    event read twice is stored once. Pruned by ``at_ms`` after the retention."""

    __tablename__ = "trace_events"
    __table_args__ = (
        Index("ix_trace_message", "project", "topic", "message_id"),
        Index("ix_trace_group", "project", "topic", "group_id", "at_ms"),
        Index("ix_trace_at", "at_ms"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    source: Mapped[str] = mapped_column(String(64), unique=True)
    message_id: Mapped[str] = mapped_column(String(256))
    project: Mapped[str] = mapped_column(String(128))
    topic: Mapped[str] = mapped_column(String(128))
    subscription: Mapped[str | None] = mapped_column(String(260))
    type: Mapped[str] = mapped_column(String(32))
    at_ms: Mapped[int] = mapped_column(BigInteger)
    group_id: Mapped[str | None] = mapped_column(String(256))
    segment: Mapped[int | None] = mapped_column(Integer)
    partition: Mapped[int | None] = mapped_column(Integer)
    position: Mapped[int | None] = mapped_column(BigInteger)
    attempt: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[int | None] = mapped_column(Integer)
    size: Mapped[int | None] = mapped_column(Integer)
    produced_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    answer: Mapped[str | None] = mapped_column(Text)
    level_ms: Mapped[int | None] = mapped_column(BigInteger)
    headers: Mapped[str | None] = mapped_column(Text)  # JSON of the accepted event's headers


class UserRow(Base):
    """A person who logs in to the UI (and owns API tokens): only an argon2 hash of the
    password is kept."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    password_hash: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class ApiTokenRow(Base):
    """An API token of the admin API: a user's (acting as that user) or a machine's (with
    roles of its own). Only the SHA-256 of the token is kept."""

    __tablename__ = "api_tokens"
    __table_args__ = (Index("ix_api_tokens_user", "user"),)

    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str | None] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"))
    description: Mapped[str] = mapped_column(Text, default="")
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class RoleGrantRow(Base):
    """One role of one principal (``user:<name>`` or ``token:<id>``); ``project`` is empty
    for ``admin``. Deleted with the user or token by the store."""

    __tablename__ = "role_grants"
    __table_args__ = (
        UniqueConstraint("principal", "role", "project", name="uq_role_grant"),
        Index("ix_role_grants_project", "project"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    principal: Mapped[str] = mapped_column(String(80))
    role: Mapped[str] = mapped_column(String(16))
    project: Mapped[str] = mapped_column(String(128))


class TopicGrantRow(Base):
    """Consent of a topic's owner: subscriptions of project ``grantee`` may read the topic."""

    __tablename__ = "topic_grants"
    __table_args__ = (UniqueConstraint("project", "topic", "grantee", name="uq_topic_grant"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(String(128))
    topic: Mapped[str] = mapped_column(String(128))
    grantee: Mapped[str] = mapped_column(String(128))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class MigrationWindowRow(Base):
    """One tumbling window of a verified migration's check (``core.migration.MigrationWindow``),
    rewritten by every round while it is open; the metastore keeps the newest 200 windows for
    the leader's decision, this table every one (``reports.migration_windows``)."""

    __tablename__ = "migration_windows"
    __table_args__ = (
        UniqueConstraint("migration_id", "start_ms", name="uq_migration_window"),
        Index("ix_migration_windows_topic", "project", "topic", "start_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    migration_id: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(128))
    topic: Mapped[str] = mapped_column(String(128))
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    matched: Mapped[int] = mapped_column(BigInteger)
    late: Mapped[int] = mapped_column(BigInteger)
    missing_in_bus: Mapped[int] = mapped_column(BigInteger)
    missing_in_legacy: Mapped[int] = mapped_column(BigInteger)
    duplicates: Mapped[int] = mapped_column(BigInteger)
    closed: Mapped[bool] = mapped_column()
    clean: Mapped[bool] = mapped_column()
    ids: Mapped[str] = mapped_column(Text, doc="JSON: the ids named per finding (20 at most)")
    checked_at_ms: Mapped[int] = mapped_column(BigInteger)
