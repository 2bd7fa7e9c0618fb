"""The Parquet export on hand-made messages (no server): hours, each id once, re-runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cli import cli
from spark.export import export_parquet
from spark.messages import RAW_SCHEMA, messages
from spark.plan import HOUR_MS, whole_hours

T0 = 1_790_000_000_000 - 1_790_000_000_000 % HOUR_MS  # the start of an hour


def _frame(spark: Any, rows: list[tuple[str, int, int, int]]) -> Any:
    """(id, produced_at_ms, segment, position) -> a frame of messages."""
    raw = [
        (
            seg,
            f"t.{seg}",
            0,
            pos,
            at,
            [("x-message-id", mid.encode())],
            f"{mid}@{seg}".encode(),
            None,
        )
        for mid, at, seg, pos in rows
    ]
    return messages(spark.createDataFrame(raw, RAW_SCHEMA), "x-message-id")


def test_windows_widen_to_whole_hours() -> None:
    assert whole_hours(T0 + 5, T0 + HOUR_MS + 1) == (T0, T0 + 2 * HOUR_MS)
    assert whole_hours(T0, T0 + HOUR_MS) == (T0, T0 + HOUR_MS)
    assert whole_hours(None, None) == (None, None)


def test_each_id_once_per_hour_the_first_copy_in_the_timeline(spark: Any, tmp_path: Path) -> None:
    rows = [
        ("a", T0 + 1, 1, 0),
        ("b", T0 + 2, 1, 1),
        ("a", T0 + 3, 2, 0),  # a retried copy in the next segment: dropped
        ("a", T0 + HOUR_MS, 2, 1),  # the same id in another hour: its own partition
        ("c", T0 - 1, 1, 2),  # before the window
    ]
    out = str(tmp_path / "out")
    result = export_parquet(_frame(spark, rows), out, since_ms=T0 + 10)
    assert result.since_ms == T0 and result.messages == 3 and result.duplicates == 1
    back = spark.read.parquet(out).collect()
    assert sorted((r["id"], r["hour"], bytes(r["payload"])) for r in back) == sorted(
        [
            ("a", (T0 // HOUR_MS) % 24, b"a@1"),
            ("b", (T0 // HOUR_MS) % 24, b"b@1"),
            ("a", (T0 // HOUR_MS + 1) % 24, b"a@2"),
        ]
    )
    # A re-run over the second hour only leaves the first as it was, and keeps one copy.
    again = export_parquet(_frame(spark, rows), out, since_ms=T0 + HOUR_MS)
    assert again.messages == 1
    assert spark.read.parquet(out).count() == 3


def test_the_cli_refuses_an_unknown_format(tmp_path: Path) -> None:
    args = ["export", "shop", "orders", "--to", str(tmp_path), "--format", "csv"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "parquet" in result.output


def test_the_spark_submit_entry_point_runs_a_plan(spark: Any, tmp_path: Path) -> None:
    from spark.export import ExportResult, main
    from spark.plan import TimelinePlan

    plan = tmp_path / "plan.json"
    plan.write_text(TimelinePlan(project="p", topic="t", segments=[]).model_dump_json())
    out, result = tmp_path / "out", tmp_path / "result.json"
    args = ["--plan", str(plan), "--to", str(out), "--since", "2026-11-24T10:30:00"]
    assert main([*args, "--out", str(result)]) == 0
    done = ExportResult.model_validate_json(result.read_text())
    assert done.messages == 0 and done.since_ms == 1_795_514_400_000  # 10:00 UTC, whole hour
    assert (out / "_httpbus_export.json").is_file()
