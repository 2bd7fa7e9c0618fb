"""The CLI imports lazily (cli/lazy.py): ``httpbus --version`` answers in a fresh
interpreter without importing any command module or the heavy libraries behind them (it took
about 1.5 s when the root imported every command); a command's module is imported when that
command runs; ``--help`` still lists every command, in the order eager registration gave."""

from __future__ import annotations

import json
import subprocess
import sys

import typer
from typer.testing import CliRunner

import cli
from core.version import VERSION
from tests.support.layout import ROOT

# What --version must not wait for: the libraries the command modules import, and the
# command modules themselves (anything of ours beyond the root and core.version).
HEAVY = {
    "httpx",
    "pydantic",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "kazoo",
    "pyspark",
    "confluent_kafka",
    "pulsar",
    "uvicorn",
    "rich",
    "control_plane",
    "segments",
    "metastore",
    "reports",
    "spark",
    "producer_api",
    "delivery_workers",
}
ROOT_MODULES = {"cli", "cli.lazy", "cli.__main__", "core", "core.version"}

PROBE = """
import json, runpy, sys
sys.argv = ["httpbus", *ARGS]
try:
    runpy.run_module("cli", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY
                or (m.split(".")[0] in ("cli", "core") and m not in ROOT_MODULES))
print(json.dumps(loaded), file=sys.stderr)
"""


def _run(*args: str) -> tuple[str, list[str]]:
    """What ``httpbus args`` prints, and the heavy modules it imported, in a fresh interpreter."""
    code = (
        f"ARGS = {list(args)!r}; HEAVY = {sorted(HEAVY)!r}; ROOT_MODULES = {sorted(ROOT_MODULES)!r}"
        + PROBE
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def test_version_imports_no_command_and_no_heavy_library() -> None:
    out, loaded = _run("--version")
    assert out.strip() == VERSION
    assert loaded == []


def test_a_command_imports_its_own_module_only_when_it_runs() -> None:
    _, loaded = _run("token", "--help")
    assert "cli.token" in loaded and "cli.kit" in loaded
    assert not {"cli.sub", "cli.topic", "cli.audit", "cli.dev", "fastapi"} & set(loaded)


def test_the_root_group_is_built_without_loading_a_command() -> None:
    group = typer.main.get_command(cli.cli)
    assert isinstance(group, typer.core.TyperGroup)
    assert list(group.commands) == [entry.name for entry in cli.COMMANDS]
    assert "nosuch" not in group.commands and group.get_command(typer.Context(group), "x") is None


def test_help_lists_every_command_in_order() -> None:
    shown = CliRunner().invoke(cli.cli, ["--help"], env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    at = [shown.output.index(f"│ {entry.name} ") for entry in cli.COMMANDS]
    assert at == sorted(at), shown.output


def test_a_sub_app_registration_happens_once_however_often_the_root_is_built() -> None:
    runner = CliRunner()
    for _ in range(3):
        shown = runner.invoke(cli.cli, ["topic", "migration", "--help"], env={"COLUMNS": "120"})
        assert shown.exit_code == 0, shown.output
        assert shown.output.count("│ check ") == 1, shown.output
    from cli import migration, migration_check

    checks = [c for c in migration.app.registered_commands if c.callback is migration_check.check]
    assert len(checks) == 1
