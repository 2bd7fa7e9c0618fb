"""The report tables: reconciliation runs and findings, hourly reports, cutover verifications,
produce tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from migrations.schema import MS, Table, counts, create, drop, project_and_topic, serial_id

revision = "0001"
down_revision = None

RECONCILIATION_RUNS = Table(
    "reconciliation_runs",
    lambda: [
        serial_id(),
        sa.Column("started_at_ms", MS(), nullable=False),
        sa.Column("duration_ms", MS(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("since_ms", MS(), nullable=False),
        sa.Column("until_ms", MS(), nullable=False),
        sa.Column("as_of_ms", MS(), nullable=False),
        sa.Column("horizon_ms", MS(), nullable=False),
        *counts("events", "expected", "lost", "late", "pending", "duplicates", "unaccepted"),
        sa.Column("tallies", sa.Text(), nullable=False),
    ],
    {"ix_reconciliation_runs_started_at_ms": ["started_at_ms"]},
)
RECONCILIATION_FINDINGS = Table(
    "reconciliation_findings",
    lambda: [
        serial_id(),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("reconciliation_runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("subscription", sa.String(300), nullable=True),
        sa.Column("message_id", sa.String(300), nullable=False),
        sa.Column("accepted_at_ms", MS(), nullable=True),
        sa.Column("terminal_at_ms", MS(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
    ],
    {"ix_reconciliation_findings_run_id": ["run_id"]},
)
HOURLY_REPORTS = Table(
    "hourly_reports",
    lambda: [
        serial_id(),
        sa.Column("subscription", sa.String(300), nullable=False),
        sa.Column("window_start_ms", MS(), nullable=False),
        sa.Column("window_end_ms", MS(), nullable=False),
        *counts(
            "accepted",
            "attempted",
            "delivered",
            "filtered",
            "retried",
            "dead_lettered",
            "failed_attempts",
        ),
        sa.Column("latency_p50_ms", sa.Float(), nullable=True),
        sa.Column("latency_p95_ms", sa.Float(), nullable=True),
        sa.Column("latency_p99_ms", sa.Float(), nullable=True),
        sa.Column("updated_at_ms", MS(), nullable=False),
        sa.UniqueConstraint("subscription", "window_start_ms", name="uq_hourly_sub_window"),
    ],
    {"ix_hourly_window": ["window_start_ms"]},
)
CUTOVER_VERIFICATIONS = Table(
    "cutover_verifications",
    lambda: [
        serial_id(),
        sa.Column("verified_at_ms", MS(), nullable=False),
        *project_and_topic(),
        sa.Column("from_segment", sa.Integer(), nullable=False),
        sa.Column("to_segment", sa.Integer(), nullable=False),
        sa.Column("sealed_at_ms", MS(), nullable=False),
        *counts("old_segment_messages", "new_segment_messages", "groups_across"),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("findings", sa.Text(), nullable=False),
    ],
    {"ix_cutover_verifications_verified_at_ms": ["verified_at_ms"]},
)
PRODUCE_TOKENS = Table(
    "produce_tokens",
    lambda: [
        sa.Column("id", sa.String(12), primary_key=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topics", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at_ms", MS(), nullable=False),
    ],
    {"ix_tokens_project": ["project"]},
)
TABLES = (
    RECONCILIATION_RUNS,
    RECONCILIATION_FINDINGS,
    HOURLY_REPORTS,
    CUTOVER_VERIFICATIONS,
    PRODUCE_TOKENS,
)


def upgrade() -> None:
    create(*TABLES)


def downgrade() -> None:
    drop(*TABLES)
