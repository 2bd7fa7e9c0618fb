"""A verified migration's check windows, every one (reports.models.MigrationWindowRow).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_MS = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "migration_windows",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("migration_id", sa.String(64), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
        sa.Column("start_ms", _MS, nullable=False),
        sa.Column("end_ms", _MS, nullable=False),
        sa.Column("matched", _MS, nullable=False),
        sa.Column("late", _MS, nullable=False),
        sa.Column("missing_in_bus", _MS, nullable=False),
        sa.Column("missing_in_legacy", _MS, nullable=False),
        sa.Column("duplicates", _MS, nullable=False),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("clean", sa.Boolean(), nullable=False),
        sa.Column("ids", sa.Text(), nullable=False),
        sa.Column("checked_at_ms", _MS, nullable=False),
        sa.UniqueConstraint("migration_id", "start_ms", name="uq_migration_window"),
    )
    op.create_index(
        "ix_migration_windows_topic", "migration_windows", ["project", "topic", "start_ms"]
    )


def downgrade() -> None:
    op.drop_index("ix_migration_windows_topic", "migration_windows")
    op.drop_table("migration_windows")
