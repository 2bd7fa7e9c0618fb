"""The window check of a verified migration on hand-made sides (no server)."""

from __future__ import annotations

from typing import Any

from spark.migration import WindowReport, clean_streak, compare_windows
from spark.plan import HOUR_MS

T0 = 1_790_000_000_000 - 1_790_000_000_000 % HOUR_MS
W = 60_000  # one-minute windows, as a test would configure them
GAP = 5_000


def _side(spark: Any, rows: list[tuple[str, int]]) -> Any:
    frame = spark.createDataFrame(rows, "id string, at long")
    return frame.selectExpr("id", "timestamp_millis(at) as produced_at")


def test_windows_name_missing_late_and_duplicate_ids(spark: Any) -> None:
    legacy = [(f"a{i}", T0 + i) for i in range(5)] + [("a0", T0 + 9)]  # a0 twice
    legacy += [("gone", T0 + 100), ("slow", T0 + 200)]
    bus = [(f"a{i}", T0 + 10 + i) for i in range(5)] + [("slow", T0 + 200 + GAP + 1)]
    bus += [("bus-only", T0 + W + 1)]
    legacy += [(f"b{i}", T0 + 2 * W + i) for i in range(3)]
    bus += [(f"b{i}", T0 + 2 * W + i) for i in range(3)]
    closes = T0 + 3 * W + GAP  # the end of the last window plus the gap
    windows = compare_windows(
        _side(spark, legacy), _side(spark, bus), window_ms=W, gap_ms=GAP, as_of_ms=closes
    )
    first, second, third = windows
    assert (first.start_ms, first.matched, first.late, first.duplicates) == (T0, 6, 1, 1)
    assert first.missing_in_bus_ids == ["gone"] and first.late_ids == ["slow"]
    assert second.missing_in_legacy_ids == ["bus-only"] and second.matched == 0
    assert third.matched == 3 and third.clean
    assert not first.clean and not second.clean
    # The last window is not closed yet when its end plus the gap is still ahead.
    early = compare_windows(
        _side(spark, legacy), _side(spark, bus), window_ms=W, gap_ms=GAP, as_of_ms=closes - 1
    )
    assert not early[-1].closed


def _window(clean: bool, closed: bool = True) -> WindowReport:
    return WindowReport(
        start_ms=0,
        end_ms=1,
        matched=1,
        late=0,
        missing_in_bus=0 if clean else 1,
        missing_in_legacy=0,
        duplicates=0,
        closed=closed,
        missing_in_bus_ids=[],
        missing_in_legacy_ids=[],
        late_ids=[],
    )


def test_the_clean_streak_counts_closed_clean_windows_at_the_end() -> None:
    assert clean_streak([_window(True), _window(False), _window(True), _window(True)]) == 2
    assert clean_streak([_window(True), _window(True), _window(False, closed=False)]) == 2
    assert clean_streak([_window(True), _window(False)]) == 0
    assert clean_streak([]) == 0
