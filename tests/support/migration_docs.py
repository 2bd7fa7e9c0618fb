"""Hand-made verified migrations (core.migration) for tests: a window as the check would
judge it, and a migration document with defaults a test overrides by name."""

from __future__ import annotations

from collections.abc import Sequence

from core.migration import Migration, MigrationWindow


def window(
    start_ms: int,
    length_ms: int,
    *,
    matched: int = 3,
    missing: Sequence[str] = (),
    late: int = 0,
    closed: bool = True,
) -> MigrationWindow:
    """A window of ``[start_ms, start_ms + length_ms)``; ``missing``: ids the bus lacks."""
    return MigrationWindow(
        start_ms=start_ms,
        end_ms=start_ms + length_ms,
        matched=matched,
        late=late,
        missing_in_bus=len(missing),
        missing_in_legacy=0,
        duplicates=0,
        closed=closed,
        missing_in_bus_ids=list(missing),
    )


def migration(windows: Sequence[MigrationWindow] = (), **fields: object) -> Migration:
    """Migration ``m1`` of shop/orders onto kafka-main, 2 partitions; ``fields`` override."""
    base: dict[str, object] = {
        "id": "m1",
        "project": "shop",
        "topic": "orders",
        "cluster": "kafka-main",
        "partitions": 2,
        "window_s": 60,
        "session_gap_s": 5,
        "clean_windows": 2,
        "guard_s": 600,
        "external_segment": 1,
        "shadow_segment": 2,
        "legacy_start": {0: 0, 1: 0},
        "windows": tuple(windows),
    }
    return Migration.model_validate({**base, **fields})
