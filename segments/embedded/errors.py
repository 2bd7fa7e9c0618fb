"""sqlite3 errors translated into the httpbus tree; no sqlite3 exception leaves the backend.

A locked, busy, read-only, full or broken database is ``StorageUnavailable`` (503, retry
later); a blob beyond SQLite's limits is ``TooLarge``; anything else is a bug of ours and
surfaces as an internal ``HttpbusError``.
"""

from __future__ import annotations

import sqlite3

from core.errors import HttpbusError, StorageUnavailable, TooLarge

RETRY_AFTER_S = 1.0


def translate(exc: sqlite3.Error, what: str) -> HttpbusError:
    """The httpbus error for a sqlite3 error raised while doing ``what``."""
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    details = {"backend": "embedded", "sqlite_error": name}
    message = f"embedded store: {what} failed: {exc}"
    if isinstance(exc, sqlite3.DataError) or name == "SQLITE_TOOBIG":
        return TooLarge(message, details=details)
    if isinstance(exc, sqlite3.ProgrammingError | sqlite3.InterfaceError | sqlite3.IntegrityError):
        return HttpbusError(message, details=details)
    return StorageUnavailable(message, details=details, retry_after=RETRY_AFTER_S)


def unavailable(what: str, reason: str) -> StorageUnavailable:
    """A ``StorageUnavailable`` for a failure that is not a sqlite3 error (timeout, closed)."""
    return StorageUnavailable(
        f"embedded store: {what} {reason}",
        details={"backend": "embedded"},
        retry_after=RETRY_AFTER_S,
    )
