"""Principals and consent: users (argon2 password hashes), API tokens (SHA-256), the roles
of each, and the grants by which a topic's owner lets another project subscribe.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa

from migrations.schema import MS, Table, create, drop, project_and_topic, serial_id

revision = "0004"
down_revision = "0003"


USERS = Table(
    "users",
    lambda: [
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("created_at_ms", MS(), nullable=False),
    ],
)
API_TOKENS = Table(
    "api_tokens",
    lambda: [
        sa.Column("id", sa.String(12), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column(
            "user", sa.String(64), sa.ForeignKey("users.name", ondelete="CASCADE"), nullable=True
        ),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at_ms", MS(), nullable=False),
    ],
    {"ix_api_tokens_user": ["user"]},
)
ROLE_GRANTS = Table(
    "role_grants",
    lambda: [
        serial_id(),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.UniqueConstraint("principal", "role", "project", name="uq_role_grant"),
    ],
    {"ix_role_grants_project": ["project"]},
)
TOPIC_GRANTS = Table(
    "topic_grants",
    lambda: [
        serial_id(),
        *project_and_topic(),
        sa.Column("grantee", sa.String(128), nullable=False),
        sa.Column("created_at_ms", MS(), nullable=False),
        sa.UniqueConstraint("project", "topic", "grantee", name="uq_topic_grant"),
    ],
)
TABLES = (USERS, API_TOKENS, ROLE_GRANTS, TOPIC_GRANTS)


def upgrade() -> None:
    create(*TABLES)


def downgrade() -> None:
    drop(*TABLES)
