"""The relational report store the control plane reads (audit reports, migration windows,
the trace index, principals): one store per database, and its schema brought up to date at
start."""

from __future__ import annotations

import asyncio
import functools
import logging

from reports import migrate
from reports.store import ReportStore

log = logging.getLogger(__name__)


@functools.cache
def shared_store(database_url: str) -> ReportStore:
    """The report store of ``database_url``, opened on first use, one per process."""
    return ReportStore.from_url(database_url)


async def migrate_reports(url: str) -> None:
    """Bring the report database to the newest schema, so the audit pages work on a fresh
    install. A failure (the database is down, a replica migrating at the same moment) is
    logged, not fatal: the audit routes answer 503 until ``httpbus db upgrade`` succeeds."""
    try:
        await asyncio.to_thread(migrate.upgrade, url)
    except Exception as exc:  # any failure leaves the control plane serving
        log.warning("report database not migrated (%s): %s", url.split("@")[-1], exc)
