"""The report tables: reconciliation runs and findings, hourly reports, cutover verifications,
produce tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MS = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "reconciliation_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("started_at_ms", _MS, nullable=False),
        sa.Column("duration_ms", _MS, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("since_ms", _MS, nullable=False),
        sa.Column("until_ms", _MS, nullable=False),
        sa.Column("as_of_ms", _MS, nullable=False),
        sa.Column("horizon_ms", _MS, nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in ("events", "expected", "lost", "late", "pending", "duplicates")
        ),
        sa.Column("unaccepted", sa.BigInteger(), nullable=False),
        sa.Column("tallies", sa.Text(), nullable=False),
    )
    op.create_index(
        "ix_reconciliation_runs_started_at_ms", "reconciliation_runs", ["started_at_ms"]
    )
    op.create_table(
        "reconciliation_findings",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("reconciliation_runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("subscription", sa.String(300), nullable=True),
        sa.Column("message_id", sa.String(300), nullable=False),
        sa.Column("accepted_at_ms", _MS, nullable=True),
        sa.Column("terminal_at_ms", _MS, nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
    )
    op.create_index("ix_reconciliation_findings_run_id", "reconciliation_findings", ["run_id"])
    op.create_table(
        "hourly_reports",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("subscription", sa.String(300), nullable=False),
        sa.Column("window_start_ms", _MS, nullable=False),
        sa.Column("window_end_ms", _MS, nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False)
            for name in (
                "accepted",
                "attempted",
                "delivered",
                "filtered",
                "retried",
                "dead_lettered",
                "failed_attempts",
            )
        ),
        sa.Column("latency_p50_ms", sa.Float(), nullable=True),
        sa.Column("latency_p95_ms", sa.Float(), nullable=True),
        sa.Column("latency_p99_ms", sa.Float(), nullable=True),
        sa.Column("updated_at_ms", _MS, nullable=False),
        sa.UniqueConstraint("subscription", "window_start_ms", name="uq_hourly_sub_window"),
    )
    op.create_index("ix_hourly_window", "hourly_reports", ["window_start_ms"])
    op.create_table(
        "cutover_verifications",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("verified_at_ms", _MS, nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
        sa.Column("from_segment", sa.Integer(), nullable=False),
        sa.Column("to_segment", sa.Integer(), nullable=False),
        sa.Column("sealed_at_ms", _MS, nullable=False),
        sa.Column("old_segment_messages", sa.BigInteger(), nullable=False),
        sa.Column("new_segment_messages", sa.BigInteger(), nullable=False),
        sa.Column("groups_across", sa.BigInteger(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("findings", sa.Text(), nullable=False),
    )
    op.create_index(
        "ix_cutover_verifications_verified_at_ms", "cutover_verifications", ["verified_at_ms"]
    )
    op.create_table(
        "produce_tokens",
        sa.Column("id", sa.String(12), primary_key=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topics", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at_ms", _MS, nullable=False),
    )
    op.create_index("ix_tokens_project", "produce_tokens", ["project"])


def downgrade() -> None:
    op.drop_index("ix_tokens_project", "produce_tokens")
    op.drop_table("produce_tokens")
    op.drop_index("ix_cutover_verifications_verified_at_ms", "cutover_verifications")
    op.drop_table("cutover_verifications")
    op.drop_index("ix_hourly_window", "hourly_reports")
    op.drop_table("hourly_reports")
    op.drop_index("ix_reconciliation_findings_run_id", "reconciliation_findings")
    op.drop_table("reconciliation_findings")
    op.drop_index("ix_reconciliation_runs_started_at_ms", "reconciliation_runs")
    op.drop_table("reconciliation_runs")
