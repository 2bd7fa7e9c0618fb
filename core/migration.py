"""A verified migration of an adopted Kafka topic onto httpbus (issue 23, docs/migrating.md).

A topic whose active segment is *external* (a legacy Kafka topic, :mod:`segments.external`)
gets a migration: an httpbus-owned **shadow segment** on a target cluster, written by
``POST …/produce`` while the legacy producers keep writing the legacy topic with the same ids
(**dual write**). A check (``spark/migration_job.py``) compares both sides in tumbling
windows and stores the reports here; the switch to the shadow segment waits for
``clean_windows`` closed clean windows in a row.

States: ``dual_write`` until an operator abandons it (``abandoned``: the shadow segment is
retired, producers go back to being refused). The automatic switch, its guard period and the
rollback are not built yet (docs/migrating.md says what an operator does meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from .model import Model, Name, Partitions, utcnow

MAX_WINDOWS = 200  # stored per migration: the newest ones
MAX_IDS = 20  # ids stored per finding and window (the counts are exact); a ZooKeeper node
# holds 1 MB: 200 windows x 3 lists x 20 ids of ~40 bytes stay well below it.


class MigrationState(StrEnum):
    """Where a migration is (see the module doc)."""

    DUAL_WRITE = "dual_write"
    ABANDONED = "abandoned"


FINISHED = frozenset({MigrationState.ABANDONED})


class MigrationWindow(Model):
    """One tumbling window of a migration check: ids first seen in ``[start_ms, end_ms)``
    on either side, judged as :func:`spark.migration.compare_windows` says."""

    start_ms: int
    end_ms: int
    matched: int = Field(ge=0)
    late: int = Field(ge=0)
    missing_in_bus: int = Field(ge=0)
    missing_in_legacy: int = Field(ge=0)
    duplicates: int = Field(ge=0)
    closed: bool
    missing_in_bus_ids: list[str] = Field(default_factory=list)
    missing_in_legacy_ids: list[str] = Field(default_factory=list)
    late_ids: list[str] = Field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Closed, with nothing missing on either side and nothing late."""
        return self.closed and not (self.late or self.missing_in_bus or self.missing_in_legacy)

    def capped(self, max_ids: int = MAX_IDS) -> MigrationWindow:
        """The window with at most ``max_ids`` ids per finding (counts unchanged)."""
        return self.model_copy(
            update={
                "missing_in_bus_ids": self.missing_in_bus_ids[:max_ids],
                "missing_in_legacy_ids": self.missing_in_legacy_ids[:max_ids],
                "late_ids": self.late_ids[:max_ids],
            }
        )


def clean_streak(windows: Sequence[MigrationWindow]) -> int:
    """How many closed windows at the end of ``windows`` (oldest first) are clean in a row;
    open windows at the end are skipped, a dirty closed one ends the streak."""
    streak = 0
    for window in reversed(windows):
        if not window.closed:
            continue
        if not window.clean:
            break
        streak += 1
    return streak


def merge_windows(
    stored: Sequence[MigrationWindow], fresh: Sequence[MigrationWindow], *, rerun: bool
) -> tuple[MigrationWindow, ...]:
    """The windows to store after a check round, oldest first, the newest ``MAX_WINDOWS``.

    A closed window's verdict is final: a round keeps the stored one and takes only windows
    that were open or unknown (the switch counts verdicts; a later read must not rewrite the
    history it counted). ``rerun`` (the batch re-run) replaces every window."""
    merged = {w.start_ms: w for w in stored} if not rerun else {}
    for window in fresh:
        kept = merged.get(window.start_ms)
        if kept is None or not kept.closed:
            merged[window.start_ms] = window.capped()
    return tuple(merged[k] for k in sorted(merged)[-MAX_WINDOWS:])


class Migration(Model):
    """A topic's migration, stored at ``paths.migration`` (one per topic: the latest)."""

    id: str = Field(min_length=1, max_length=64)
    project: Name
    topic: Name
    state: MigrationState = MigrationState.DUAL_WRITE
    cluster: Name = Field(description="the target cluster of the shadow segment")
    partitions: Partitions
    window_s: int = Field(ge=1, description="length of a tumbling window, seconds")
    session_gap_s: int = Field(ge=0, description="a match later than this is late, seconds")
    clean_windows: int = Field(ge=1, description="closed clean windows in a row to switch")
    guard_s: int = Field(ge=0, description="after the switch, how long a dirty window rolls back")
    external_segment: int = Field(ge=1, description="the legacy side: the external segment")
    shadow_segment: int = Field(ge=1, description="the httpbus side: the dual-write segment")
    legacy_start: dict[int, int] = Field(
        description="per partition, the legacy topic's end when the migration began: the "
        "check reads the legacy side from there (the shadow segment from its beginning)"
    )
    started_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    checked_at: datetime | None = Field(default=None, description="the last check round")
    windows: tuple[MigrationWindow, ...] = ()
    reason: str | None = Field(default=None, max_length=2_000)

    @property
    def streak(self) -> int:
        """Closed clean windows in a row at the end of the stored ones."""
        return clean_streak(self.windows)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED
