"""A verified migration's check windows, every one (reports.models.MigrationWindowRow).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa

from migrations.schema import MS, Table, counts, create, drop, project_and_topic, serial_id

revision = "0005"
down_revision = "0004"

MIGRATION_WINDOWS = Table(
    "migration_windows",
    lambda: [
        serial_id(),
        sa.Column("migration_id", sa.String(64), nullable=False),
        *project_and_topic(),
        sa.Column("start_ms", MS(), nullable=False),
        sa.Column("end_ms", MS(), nullable=False),
        *counts("matched", "late", "missing_in_bus", "missing_in_legacy", "duplicates"),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("clean", sa.Boolean(), nullable=False),
        sa.Column("ids", sa.Text(), nullable=False),
        sa.Column("checked_at_ms", MS(), nullable=False),
        sa.UniqueConstraint("migration_id", "start_ms", name="uq_migration_window"),
    ],
    {"ix_migration_windows_topic": ["project", "topic", "start_ms"]},
)


def upgrade() -> None:
    create(MIGRATION_WINDOWS)


def downgrade() -> None:
    drop(MIGRATION_WINDOWS)
