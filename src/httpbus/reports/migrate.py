"""Run the Alembic migrations of ``httpbus.migrations`` on a database URL.

The migrations are found by package (``httpbus:migrations``), so this works wherever httpbus is
installed, with no ``alembic.ini``; the same scripts run with the ``alembic`` command through
the repository's ``alembic.ini``.
"""

from __future__ import annotations

import io

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from .store import engine_url, make_engine

SCRIPT_LOCATION = "httpbus:migrations"


def alembic_config(url: str, output: io.StringIO | None = None) -> Config:
    config = Config(output_buffer=output)
    config.set_main_option("script_location", SCRIPT_LOCATION)
    # ConfigParser interpolation: a % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", engine_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    make_engine(url).dispose()  # creates a SQLite file's folder
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database is at (None: never migrated)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision of the migrations."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    revision = script.get_current_head()
    assert revision is not None
    return revision
