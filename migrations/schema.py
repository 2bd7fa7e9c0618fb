"""What the revisions share: the columns the tables repeat, and a table written once as a
:class:`Table`, which the upgrade creates with its indexes (:func:`create`) and the downgrade
drops with them in the reverse order (:func:`drop`), so a downgrade cannot forget an index
its upgrade made.

Revisions already applied use these helpers: what they make must never change. A change to a
table is a new revision (with helpers of its own if these no longer fit), never an edit here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from alembic import op

MS = sa.BigInteger  # a time in milliseconds since the epoch, or a duration in milliseconds


def serial_id() -> sa.Column[Any]:
    """The table's own key: an integer the database numbers."""
    return sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True)


def counts(*names: str) -> list[sa.Column[Any]]:
    """A non-null 64-bit counter for each of ``names``."""
    return [sa.Column(name, sa.BigInteger(), nullable=False) for name in names]


def project_and_topic() -> list[sa.Column[Any]]:
    """The topic a row is about: its project and name, as ``core.model`` bounds them."""
    return [
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
    ]


@dataclass(frozen=True)
class Table:
    """A table as a revision creates it: ``columns`` (and constraints) are built anew at
    each upgrade, since a column belongs to the one table it was added to; ``indexes`` maps
    each index's name to its columns, in the order they are created."""

    name: str
    columns: Callable[[], Sequence[sa.schema.SchemaItem]]
    indexes: Mapping[str, Sequence[str]] = field(default_factory=dict)


def create(*tables: Table) -> None:
    """Create ``tables`` in order, each followed by its indexes."""
    for table in tables:
        op.create_table(table.name, *table.columns())
        for index, columns in table.indexes.items():
            op.create_index(index, table.name, list(columns))


def drop(*tables: Table) -> None:
    """Undo :func:`create` of ``tables``: the last first, each index before its table."""
    for table in reversed(tables):
        for index in reversed(list(table.indexes)):
            op.drop_index(index, table.name)
        op.drop_table(table.name)
