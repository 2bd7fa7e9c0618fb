"""The relational store: reconciliation runs and their findings, hourly reports, cutover
verifications and (for later) produce tokens, on SQLAlchemy 2 (SQLite by default, PostgreSQL).

Imports only ``core``. Its schema is owned by the Alembic migrations of ``migrations``
(``httpbus db upgrade``); :mod:`.models` is the same schema as typed classes.
"""
