"""Run the Alembic migrations of ``migrations`` on a database URL.

The migrations are found as the installed top-level package ``migrations`` (located, not
imported: ``reports`` imports only ``core``), so this works wherever httpbus is installed, with
no ``alembic.ini``.
"""

from __future__ import annotations

import importlib.util
import io

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from .store import engine_url, make_engine


def script_location() -> str:
    """The folder of the ``migrations`` package (Alembic's ``env.py`` and ``versions/``)."""
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the migrations package is not installed with httpbus")
    return str(spec.submodule_search_locations[0])


def alembic_config(url: str, output: io.StringIO | None = None) -> Config:
    config = Config(output_buffer=output)
    config.set_main_option("script_location", script_location())
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
