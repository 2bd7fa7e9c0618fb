"""The message trace shows each attempt's latency and the start of the endpoint's answer,
the delay level a retried message waits in, and the headers a message was accepted with.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

_COLUMNS = (
    ("latency_ms", sa.Float()),
    ("answer", sa.Text()),
    ("level_ms", sa.BigInteger()),
    ("headers", sa.Text()),
)


def upgrade() -> None:
    with op.batch_alter_table("trace_events") as table:
        for name, kind in _COLUMNS:
            table.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trace_events") as table:
        for name, _ in reversed(_COLUMNS):
            table.drop_column(name)
