"""The ids of idempotent publish (metastore.dedupe.postgres): ``dedupe_ids``, partitioned by
range of ``until_ms``; the producers make and drop its partitions. PostgreSQL only: the
embedded store (httpbus dev) keeps its ids in a SQLite file of its own.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE TABLE dedupe_ids (
            scope text NOT NULL,
            message_id text NOT NULL,
            bucket_ms bigint NOT NULL,
            until_ms bigint NOT NULL,
            at_ms bigint NOT NULL,
            owner text NOT NULL,
            stamp bigint NOT NULL,
            segment integer,
            partition integer,
            position bigint,
            PRIMARY KEY (scope, message_id, bucket_ms, until_ms)
        ) PARTITION BY RANGE (until_ms)
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TABLE dedupe_ids")
