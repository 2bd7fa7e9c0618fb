"""The CLI's rooms (cli/__init__.py's docstring): API clients talk to the control plane
through ``control_plane.client`` only; local jobs and service starters may open the stores
and start the services; no module imports pyspark (the ``httpbus[spark]`` extra) before a
command runs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import cli
from tests.support.layout import ROOT

CLI = ROOT / "cli"
API_CLIENTS = {
    "kit",
    "catalog",
    "grant_request",
    "project",
    "quota",
    "topic",
    "topic_schema",
    "topic_grant",
    "topic_archive",
    "sub_replay",
    "audit_reports",
    "cutover",
    "failover",
    "migration",
    "sub",
    "signing_keys",
    "token",
    "user",
    "dlq",
    "trace",
    "tail",
    "overview",
    "produce",
}
LOCAL_JOBS = {"local", "audit", "export", "migration_check", "db"}
STARTERS = {"dev", "run", "supervisor", "outbox"}
ASSEMBLY = {"__init__", "__main__", "lazy"}
OURS = {
    "core",
    "metastore",
    "segments",
    "circuit_breaker",
    "control_plane",
    "producer_api",
    "delivery_workers",
    "spark",
    "reports",
    "migrations",
    "outbox_relay",
}
# Importing these does not import pyspark (plain pydantic models of the plan).
SPARK_WITHOUT_PYSPARK = {"spark.plan"}


def _imports(path: Path, *, top_level_only: bool = False) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_every_module_has_a_room() -> None:
    modules = {p.stem for p in CLI.glob("*.py")}
    rooms = [API_CLIENTS, LOCAL_JOBS, STARTERS, ASSEMBLY]
    assert modules == set().union(*rooms), "put a new cli module in a room (here and in cli/)"
    for room in rooms[:3]:
        for module in room - {"kit", "local", "supervisor"}:
            assert f"``{module}``" in (cli.__doc__ or ""), f"cli/__init__.py names {module}"


def test_api_clients_talk_through_the_client_only() -> None:
    bad = []
    for module in sorted(API_CLIENTS):
        for name in _imports(CLI / f"{module}.py"):
            top = name.split(".")[0]
            if top == "cli" and name.split(".")[1:2] and name.split(".")[1] not in API_CLIENTS:
                bad.append(f"cli/{module}.py imports {name} (not an API client)")
            elif top in OURS and name != "control_plane.client":
                bad.append(f"cli/{module}.py imports {name}: use control_plane.client")
    assert not bad, "\n".join(bad)


def test_no_module_imports_pyspark_before_a_command_runs() -> None:
    bad = [
        f"cli/{path.name} imports {name} at the top"
        for path in sorted(CLI.glob("*.py"))
        for name in _imports(path, top_level_only=True)
        if name.split(".")[0] == "pyspark"
        or (name.split(".")[0] == "spark" and name not in SPARK_WITHOUT_PYSPARK)
    ]
    assert not bad, "\n".join(bad)


def test_importing_the_cli_imports_no_pyspark() -> None:
    """Every command of the CLI is built (``cli.cli``) in a fresh interpreter without pyspark
    among the modules loaded."""
    probe = "import sys, cli; print(sorted(m for m in sys.modules if m.startswith('pyspark')))"
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]", found.stdout
