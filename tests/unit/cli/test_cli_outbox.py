"""``httpbus outbox run``: what it says before any JVM starts (the relay itself is tested on
real servers: tests/integration/test_outbox_debezium.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import cli
from cli.kit import EXIT_NOT_AVAILABLE, EXIT_USAGE
from tests.support.cli import one_line_error


def test_without_the_extra_it_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    config = tmp_path / "relay.yaml"
    config.write_text("project: p\n")
    result = CliRunner().invoke(cli, ["outbox", "run", "--config", str(config)])
    one_line_error(result, EXIT_NOT_AVAILABLE, "pip install 'httpbus[outbox]'")


def test_a_settings_file_with_mistakes_names_each_field(tmp_path: Path) -> None:
    config = tmp_path / "relay.yaml"
    config.write_text(
        "project: p\ntopic: a topic\ndatabase:\n  dbname: shop\n  slot: Bad-Slot\n"
        f"offsets_file: {tmp_path / 'offsets.dat'}\n"
    )
    result = CliRunner().invoke(cli, ["outbox", "run", "--config", str(config)])
    one_line_error(result, EXIT_USAGE, "topic:", "database.slot:", str(config))


def test_a_missing_settings_file_is_a_usage_error(tmp_path: Path) -> None:
    argv = ["outbox", "run", "--config", str(tmp_path / "no.yaml")]
    result = CliRunner().invoke(cli, argv, env={"COLUMNS": "200"})  # the path on one line
    assert result.exit_code == EXIT_USAGE and "does not exist" in result.stderr
