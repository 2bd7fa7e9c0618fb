"""The message trace index: one row per audit event (reports.models.TraceEventRow).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa

from migrations.schema import MS, Table, create, drop

revision = "0002"
down_revision = "0001"

TRACE_EVENTS = Table(
    "trace_events",
    lambda: [
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
        sa.Column("at_ms", MS(), nullable=False),
        sa.Column("group_id", sa.String(256), nullable=True),
        sa.Column("segment", sa.Integer(), nullable=True),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("position", MS(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=True),
        sa.Column("produced_at_ms", MS(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    ],
    {
        "ix_trace_message": ["project", "topic", "message_id"],
        "ix_trace_group": ["project", "topic", "group_id", "at_ms"],
        "ix_trace_at": ["at_ms"],
    },
)


def upgrade() -> None:
    create(TRACE_EVENTS)


def downgrade() -> None:
    drop(TRACE_EVENTS)
