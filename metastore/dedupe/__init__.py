"""Idempotent publish: the message ids a topic accepted within its dedupe window, shared by
every producer process (docs/producing.md, "Idempotent publish").

Per-message state never touches the metastore (ZooKeeper carries no per-message work): the
ids live in a table built for it, PostgreSQL in production (:mod:`.postgres`) and SQLite for
``httpbus dev`` (:mod:`.embedded`), two backends of one shape (:class:`DedupeTable`) under
one algorithm (:mod:`.claims`). Only the producers' membership is read from the metastore,
at most once a second (:mod:`.liveness`).
"""

from .config import (
    DedupeConfig,
    EmbeddedDedupeConfig,
    PostgresDedupeConfig,
    default_dedupe,
    open_dedupe,
)
from .protocol import PRODUCERS, Claim, DedupeStore, Original

__all__ = [
    "PRODUCERS",
    "Claim",
    "DedupeConfig",
    "DedupeStore",
    "EmbeddedDedupeConfig",
    "Original",
    "PostgresDedupeConfig",
    "default_dedupe",
    "open_dedupe",
]
