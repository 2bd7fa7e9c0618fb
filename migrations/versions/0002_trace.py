"""The message trace index: one row per audit event (reports.models.TraceEventRow).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_MS = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "trace_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("source", sa.String(64), nullable=False, unique=True),
        sa.Column("message_id", sa.String(256), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
        sa.Column("subscription", sa.String(260), nullable=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("at_ms", _MS, nullable=False),
        sa.Column("group_id", sa.String(256), nullable=True),
        sa.Column("segment", sa.Integer(), nullable=True),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("position", _MS, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=True),
        sa.Column("produced_at_ms", _MS, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_trace_message", "trace_events", ["project", "topic", "message_id"])
    op.create_index("ix_trace_group", "trace_events", ["project", "topic", "group_id", "at_ms"])
    op.create_index("ix_trace_at", "trace_events", ["at_ms"])


def downgrade() -> None:
    op.drop_index("ix_trace_at", "trace_events")
    op.drop_index("ix_trace_group", "trace_events")
    op.drop_index("ix_trace_message", "trace_events")
    op.drop_table("trace_events")
