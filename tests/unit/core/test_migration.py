"""The verified migration's decisions (core.migration) and where readers begin after its
switch or rollback (control_plane.leaders.migration_starts), on hand-made windows and tails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from control_plane.leaders.migration_starts import (
    MAX_SKIP_CHARS,
    capped,
    rollback_starts,
    switch_starts,
)
from core.migration import (
    MAX_WINDOWS,
    READ_MARGIN_MS,
    Migration,
    MigrationState,
    MigrationWindow,
    Move,
    merge_windows,
    next_move,
    read_from_ms,
)
from tests.support.migration_docs import migration, window

T0 = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)
W = 10_000
T0_MS = int(T0.timestamp() * 1000)


def _w(i: int, *, closed: bool = True, missing: int = 0, late: int = 0) -> MigrationWindow:
    return window(T0_MS + i * W, W, closed=closed, missing=[f"m{i}"] * missing, late=late)


def _m(windows: list[MigrationWindow], **fields: object) -> Migration:
    base = {"window_s": W // 1000, "session_gap_s": 2, "guard_s": 30}
    return migration(windows, **{**base, **fields})


def test_the_switch_waits_for_n_closed_clean_windows_after_a_dirty_one() -> None:
    assert next_move(_m([_w(0, missing=2), _w(1)])) is Move.NONE
    assert next_move(_m([_w(0, missing=2), _w(1), _w(2, closed=False)])) is Move.NONE
    assert next_move(_m([_w(0, missing=2), _w(1), _w(2)])) is Move.SWITCH
    assert next_move(_m([_w(0), _w(1, late=1), _w(2)])) is Move.NONE  # late is dirty too
    abandoned = _m([_w(0), _w(1)], state=MigrationState.ABANDONED)
    assert next_move(abandoned) is Move.NONE and abandoned.finished


def test_guard_rolls_back_on_a_dirty_window_and_completes_once_judged_clean() -> None:
    switched = T0 + timedelta(milliseconds=3 * W)
    guard = {"state": MigrationState.GUARD, "switched_at": switched}
    before = [_w(0, missing=1), _w(1), _w(2)]  # dirty before the switch: not the guard's
    assert next_move(_m([*before, _w(3), _w(4, closed=False)], **guard)) is Move.NONE
    assert next_move(_m([*before, _w(3), _w(4, missing=1)], **guard)) is Move.ROLLBACK
    after_guard = 3 + 30_000 // W + 1  # a dirty window past the guard period is not its
    windows = [*before, *(_w(i) for i in range(3, after_guard)), _w(after_guard, missing=1)]
    settled = switched + timedelta(seconds=30 + W // 1000 + 2)
    assert next_move(_m(windows, **guard, checked_at=settled)) is Move.COMPLETE
    early = settled - timedelta(seconds=1)
    assert next_move(_m(windows, **guard, checked_at=early)) is Move.NONE


def test_merge_keeps_closed_verdicts_caps_and_bounds() -> None:
    stored = merge_windows((), [_w(0), _w(1, closed=False)], rerun=False)
    merged = merge_windows(stored, [_w(0, missing=1), _w(1, missing=1)], rerun=False)
    assert merged[0].clean and merged[1].missing_in_bus == 1
    assert merge_windows(merged, [_w(0, missing=1)], rerun=True) == (_w(0, missing=1),)
    many = merge_windows((), [_w(i) for i in range(MAX_WINDOWS + 1)], rerun=False)
    assert len(many) == MAX_WINDOWS and many[0].start_ms == T0_MS + W


def test_switch_starts_after_the_last_id_the_legacy_side_carried() -> None:
    # Partition 0: 10..13 in the tail; 10, 11, 12 reached the legacy side up to E, 13 not.
    # Partition 1: 5 matched, 6 not, 7 matched (its legacy copy came first): begin at 6,
    # so 6 (legacy copy after E) is not lost; 7 was delivered from the legacy side: skipped.
    shadow = [(0, 10, "a"), (0, 11, "b"), (0, 12, "c"), (0, 13, "d")]
    shadow += [(1, 5, "x"), (1, 6, "y"), (1, 7, "z")]
    starts, skip = switch_starts(shadow, {"a", "b", "c", "x", "z"}, {0: 10, 1: 5})
    assert starts == {0: 13, 1: 6} and skip == {"z"}
    # Nothing of a partition's tail reached the legacy side: from its tail's start.
    assert switch_starts([(0, 4, "q")], set(), {0: 4, 1: 9}) == ({0: 4, 1: 9}, set())


def test_rollback_starts_at_the_first_loss_or_the_end() -> None:
    legacy = [(0, 20, "a"), (0, 21, "lost"), (0, 22, "b"), (1, 7, "c")]
    starts, skip = rollback_starts(legacy, {"a", "b", "c"}, {0: 23, 1: 8})
    assert starts == {0: 21, 1: 8} and skip == {"b"}  # after the loss, delivered already


def test_the_skip_list_is_capped_and_what_does_not_fit_is_counted() -> None:
    ids = {f"id-{n:05d}" for n in range(MAX_SKIP_CHARS // 8)}  # 11 characters as JSON
    kept, over = capped(ids)
    assert kept == tuple(sorted(ids))[: len(kept)] and over == len(ids) - len(kept) > 0
    assert sum(len(mid) + 3 for mid in kept) <= MAX_SKIP_CHARS
    assert capped({"b", "a"}) == (("a", "b"), 0)


def test_an_incremental_round_reads_from_the_first_open_window_less_two_gaps() -> None:
    closed = [_w(i) for i in range(3)]
    assert read_from_ms([], 5_000) is None  # nothing stored: from the beginning
    assert read_from_ms([_w(0, closed=False)], 5_000) is None  # nothing final yet
    opened = [*closed, _w(3, closed=False), _w(4, closed=False)]
    assert read_from_ms(opened, 5_000) == T0_MS + 3 * W - 2 * 5_000 - READ_MARGIN_MS
    # Every stored window closed: from the end of the last one.
    assert read_from_ms(closed, 5_000) == T0_MS + 3 * W - 2 * 5_000 - READ_MARGIN_MS
    assert read_from_ms([_w(0)], 10**13) == 0  # never before the epoch
