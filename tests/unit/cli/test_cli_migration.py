"""``httpbus topic migration``: refusals exit with the API's code on one line, and a
migration prints its header and its windows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from cli import migration
from tests.support.cli import embedded_control_plane_url, httpbus, one_line_error


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def test_refusals_name_what_to_fix(url: str) -> None:
    httpbus(url, "project", "create", "m1")
    httpbus(url, "topic", "create", "m1", "orders")
    start = ("topic", "migration", "start", "m1", "orders")
    one_line_error(httpbus(url, *start, "--cluster", "embedded"), 1, "422", "external")
    one_line_error(httpbus(url, *start, "--cluster", "nowhere"), 1, "422", "cluster")
    bad = httpbus(url, *start, "--cluster", "embedded", "--window", "1m", "--session-gap", "2m")
    one_line_error(bad, 1, "422", "session_gap")
    one_line_error(httpbus(url, "topic", "migration", "status", "m1", "orders"), 3, "404")
    one_line_error(httpbus(url, "topic", "migration", "abandon", "m1", "orders"), 3, "404")
    one_line_error(httpbus(url, "topic", "migration", "status", "m1", "nope"), 3, "404")
    history = ("topic", "migration", "status", "m1", "orders", "--history")
    one_line_error(httpbus(url, *history), 3, "404")


def test_a_migration_prints_its_windows(capsys: pytest.CaptureFixture[str]) -> None:
    window = {
        "start_ms": 0,
        "matched": 7,
        "missing_in_bus": 2,
        "missing_in_legacy": 0,
        "late": 0,
        "duplicates": 1,
        "closed": True,
        "clean": False,
        "missing_in_bus_ids": ["a", "b"],
        "missing_in_legacy_ids": [],
    }
    shown = {
        "id": "m1",
        "project": "shop",
        "topic": "orders",
        "external_segment": 1,
        "shadow_segment": 2,
        "cluster": "kafka-main",
        "partitions": 2,
        "window_s": 60,
        "session_gap_s": 5,
        "guard_s": 600,
        "state": "dual_write",
        "clean_windows": 3,
        "clean_streak": 0,
        "windows": [window, {**window, "missing_in_bus": 0, "clean": True, "start_ms": 60_000}],
    }
    assert migration.summary(shown).split() == [
        "dual_write", "windows", "2", "(2", "closed)", "clean", "streak", "0/3",
    ]  # fmt: skip
    migration.print_migration(shown)
    out = capsys.readouterr().out
    assert "segment 1 (external) → shadow 2 on kafka-main" in out
    assert "01-01T00" in out and "dirty" in out and "clean" in out and "a, b" in out
    assert "switch:" not in out  # not switched yet
    switched = {**shown, "switch_skipped": 4, "switch_duplicates": 0, "rollback_skipped": 2}
    migration.print_migration(switched)
    out = capsys.readouterr().out
    assert "pass over 4 id(s)" in out and "legacy topic over 2" in out and "twice 0" in out


def test_the_commands_are_listed() -> None:
    r = CliRunner().invoke(migration.app, ["--help"])
    assert r.exit_code == 0
    assert all(c in r.stdout for c in ("start", "status", "check", "abandon"))
