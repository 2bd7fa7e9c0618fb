"""Principals and consent: users (argon2 password hashes), API tokens (SHA-256), the roles
of each, and the grants by which a topic's owner lets another project subscribe.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(12), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column(
            "user", sa.String(64), sa.ForeignKey("users.name", ondelete="CASCADE"), nullable=True
        ),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_api_tokens_user", "api_tokens", ["user"])
    op.create_table(
        "role_grants",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.UniqueConstraint("principal", "role", "project", name="uq_role_grant"),
    )
    op.create_index("ix_role_grants_project", "role_grants", ["project"])
    op.create_table(
        "topic_grants",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
        sa.Column("grantee", sa.String(128), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("project", "topic", "grantee", name="uq_topic_grant"),
    )


def downgrade() -> None:
    op.drop_table("topic_grants")
    op.drop_index("ix_role_grants_project", "role_grants")
    op.drop_table("role_grants")
    op.drop_index("ix_api_tokens_user", "api_tokens")
    op.drop_table("api_tokens")
    op.drop_table("users")
