"""A verified migration of an adopted Kafka topic onto httpbus (issue 23, docs/migrating.md).

A topic whose active segment is *external* (a legacy Kafka topic, :mod:`segments.external`)
gets a migration: an httpbus-owned **shadow segment** on a target cluster, written by
``POST …/produce`` while the legacy producers keep writing the legacy topic with the same ids
(**dual write**). A check (``spark/migration_job.py``) compares both sides in tumbling
windows and stores the reports here; the switch to the shadow segment waits for
``clean_windows`` closed clean windows in a row.

States (the control plane's leader moves them, ``control_plane.leaders.migration_monitor``)::

    dual_write ──(N clean windows)──▶ switching ──(cutover committed)──▶ guard
        │  ▲                            │ (cutover failed: back)            │
        │  └────────────────────────────┘      (guard over, clean)──────────┼──▶ completed
        └──(abandon)──▶ abandoned       rolled_back ◀──(cutover)── rolling_back ◀──(dirty window)

The switch is a coordinated cutover whose new segment is the shadow segment; the external
one is sealed logically at its ends then (``switch_ends``), and readers begin the shadow
segment after what the legacy side carried up to them (``Segment.start_positions``). A dirty
closed window within ``guard_s`` after the switch rolls back: a cutover to a new external
segment on the same legacy topic, starting where the bus side first lost a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from .model import Model, Partitions, utcnow
from .names import Name

MAX_WINDOWS = 200  # stored per migration: the newest ones
MAX_IDS = 20  # ids stored per finding and window (the counts are exact); a ZooKeeper node
# holds 1 MB: 200 windows x 3 lists x 20 ids of ~40 bytes stay well below it.


class MigrationState(StrEnum):
    """Where a migration is (see the module doc)."""

    DUAL_WRITE = "dual_write"
    SWITCHING = "switching"
    GUARD = "guard"
    ROLLING_BACK = "rolling_back"
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"
    ABANDONED = "abandoned"


FINISHED = frozenset(
    {MigrationState.COMPLETED, MigrationState.ROLLED_BACK, MigrationState.ABANDONED}
)


class Move(StrEnum):
    """What the leader does next about a migration (:func:`next_move`)."""

    NONE = "none"
    SWITCH = "switch"
    ROLLBACK = "rollback"
    COMPLETE = "complete"


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


READ_MARGIN_MS = 5_000  # an incremental round reads this much more (clocks, storage time)


def read_from_ms(windows: Sequence[MigrationWindow], gap_ms: int) -> int | None:
    """Where an incremental check round reads both sides from; None: from the beginning.

    A closed window's verdict is final (:func:`merge_windows`), so a round only needs the
    messages of the windows still open. It reads from the first open window (after the last
    window, when every stored one is closed) less twice the session gap and a margin: an id
    first seen in a closed window has its other copy within the gap, so the part of the
    read whose pairs began earlier lies inside closed windows, whose stored verdicts stand.
    """
    if not any(w.closed for w in windows):
        return None
    first_open = next((w.start_ms for w in windows if not w.closed), windows[-1].end_ms)
    return max(0, first_open - 2 * gap_ms - READ_MARGIN_MS)


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
    cutover_id: str | None = Field(default=None, description="the switch's or rollback's")
    switched_at: datetime | None = Field(default=None, description="when E was recorded")
    switch_ends: dict[int, int] | None = Field(
        default=None, description="E: the external segment's ends at the switch"
    )
    shadow_starts: dict[int, int] | None = Field(
        default=None, description="where readers begin the shadow segment after the switch"
    )
    switch_skipped: int | None = Field(
        default=None,
        description="ids the legacy side delivered that readers of the shadow segment pass "
        "over (control_plane.leaders.migration_starts)",
    )
    switch_duplicates: int | None = Field(
        default=None,
        description="messages the switch delivers a second time: skips over the skip list's "
        "cap (control_plane.leaders.migration_starts)",
    )
    rollback_segment: int | None = Field(default=None, description="the new external segment")
    rollback_starts: dict[int, int] | None = Field(
        default=None, description="where readers begin the legacy topic again after a rollback"
    )
    rollback_skipped: int | None = Field(
        default=None,
        description="ids the shadow segment delivered that readers of the legacy topic pass "
        "over after the rollback (after the first loss, or written there late)",
    )
    rollback_duplicates: int | None = Field(
        default=None,
        description="messages the rollback delivers a second time: skips over the skip list's cap",
    )
    finished_at: datetime | None = None

    @property
    def streak(self) -> int:
        """Closed clean windows in a row at the end of the stored ones."""
        return clean_streak(self.windows)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def dirty_in_guard(m: Migration) -> MigrationWindow | None:
    """The first closed dirty window overlapping the guard period after the switch."""
    if m.switched_at is None:
        return None
    start, end = _ms(m.switched_at), _ms(m.switched_at) + m.guard_s * 1000
    return next(
        (
            w
            for w in m.windows
            if w.closed and not w.clean and w.end_ms > start and w.start_ms < end
        ),
        None,
    )


def next_move(m: Migration) -> Move:
    """What the leader does next (the facts are the stored windows, the decision is here):
    switch after ``clean_windows`` closed clean windows in a row; within the guard period
    roll back on a dirty window; complete once a check ran after every window of the guard
    period could close (its end, a window and the gap) with none dirty."""
    if m.state is MigrationState.DUAL_WRITE and m.streak >= m.clean_windows:
        return Move.SWITCH
    if m.state is not MigrationState.GUARD or m.switched_at is None:
        return Move.NONE
    if dirty_in_guard(m) is not None:
        return Move.ROLLBACK
    settled = _ms(m.switched_at) + (m.guard_s + m.window_s + m.session_gap_s) * 1000
    if m.checked_at is not None and _ms(m.checked_at) >= settled:
        return Move.COMPLETE
    return Move.NONE
