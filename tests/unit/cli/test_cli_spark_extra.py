"""Spark is the optional ``httpbus[spark]`` extra: without pyspark the Spark commands stop
before any work with one line that says how to get it (exit 5), and the rest of the CLI,
``export --plan-out`` included, never imports it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import cli
from cli.kit import EXIT_NOT_AVAILABLE, EXIT_NOT_FOUND, EXIT_USAGE
from tests.support.cli import one_line_error

HOW = "this command runs Spark: pip install 'httpbus[spark]'"


@pytest.fixture
def no_pyspark(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pyspark cannot be imported (None in sys.modules); a settings file on the embedded
    stores in ``tmp_path``, which the commands read."""
    monkeypatch.setitem(sys.modules, "pyspark", None)
    config = tmp_path / "httpbus.yaml"
    config.write_text(
        f"metastore:\n  kind: embedded\n  path: {tmp_path / 'meta.db'}\n"
        f"clusters:\n  embedded:\n    backend: embedded\n    path: {tmp_path / 'segments.db'}\n"
        "default_cluster: embedded\n"
    )
    monkeypatch.setenv("HTTPBUS_CONFIG", str(config))
    return tmp_path


def test_export_without_spark_says_how_to_get_it(no_pyspark: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "shop", "orders", "--to", str(no_pyspark)])
    assert one_line_error(result, EXIT_NOT_AVAILABLE) == f"error: {HOW}"
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "run"],
        ["audit", "job", "--out", "job.json"],
        ["topic", "migration", "check", "shop", "orders"],
    ],
)
def test_every_spark_command_says_how_to_get_it(no_pyspark: Path, args: list[str]) -> None:
    one_line_error(CliRunner().invoke(cli, args), EXIT_NOT_AVAILABLE, HOW)


def test_writing_an_export_plan_needs_no_spark(no_pyspark: Path) -> None:
    """``--plan-out`` only plans (for spark-submit elsewhere): it gets as far as the
    metastore, which does not know the topic."""
    plan = no_pyspark / "plan.json"
    args = ["export", "shop", "orders", "--to", str(no_pyspark), "--plan-out", str(plan)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == EXIT_NOT_FOUND, result.output
    assert "shop" in result.stdout and not plan.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["export", "../x", "orders", "--to", "out", "--plan-out", "plan.json"],
        ["export", "shop", "a/b", "--to", "out", "--plan-out", "plan.json"],
        ["topic", "migration", "check", "shop", "../x"],
    ],
)
def test_a_name_that_is_no_name_is_a_usage_error_not_a_traceback(
    no_pyspark: Path, args: list[str]
) -> None:
    """These commands read the metastore themselves, with no API to refuse a bad name: it
    raised ValueError out of the catalog (issue 38)."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "invalid name" in result.output and "Traceback" not in result.output
