"""DESIGN.md's layering table, enforced: a package imports only what the table allows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "httpbus"

# package -> the packages of ours it may import (DESIGN.md, "Layout").
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "metastore": {"core"},
    "segments": {"core", "metastore"},
    "circuit_breaker": set(),
    "producer_api": {"core", "metastore", "segments"},
    "delivery_workers": {"core", "metastore", "segments", "circuit_breaker"},
    # Departure from DESIGN.md's table (fixed): the CLI runs the audit jobs and the API serves
    # the reports, so the control plane imports spark and reports (docs/audit.md).
    "control_plane": {"core", "metastore", "segments", "spark", "reports"},
    "spark": {"core"},
    "migrations": set(),
    "reports": {"core"},
}
BACKENDS = {"kafka", "pulsar", "embedded"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(SRC).parts
    own = rel[0]
    bad: list[str] = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[0] != "httpbus" or len(parts) < 2 or parts[1] not in ALLOWED:
            continue
        target = parts[1]
        where = f"{path.relative_to(SRC.parent)}:{line} imports {name}"
        if target != own and target not in ALLOWED[own]:
            allowed = sorted(ALLOWED[own]) or "nothing of ours"
            bad.append(f"{where}: {own} may import only {allowed}")
        if own == "segments" == target and len(parts) > 2 and parts[2] in BACKENDS:
            mine = rel[1] if len(rel) > 2 and rel[1] in BACKENDS else None
            if mine != parts[2]:
                bad.append(f"{where}: the segments base and other backends never import a backend")
    return bad


def test_every_package_of_the_table_exists() -> None:
    assert {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()} >= set(ALLOWED)


def test_no_package_imports_what_the_table_forbids() -> None:
    bad = [v for path in sorted(SRC.rglob("*.py")) for v in _violations(path)]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("core/model.py", "from httpbus.metastore import x", 1),
        ("producer_api/app.py", "import httpbus.control_plane.app", 1),
        ("producer_api/app.py", "from ..segments import writer", 0),
        ("segments/reader.py", "from .kafka import store", 1),
        ("segments/kafka/store.py", "from ..pulsar import store", 1),
        ("segments/kafka/store.py", "from .config import KafkaConfig", 0),
        ("delivery_workers/w.py", "from httpbus.circuit_breaker import Breaker", 0),
        ("control_plane/x.py", "from httpbus.circuit_breaker import Breaker", 1),
    ],
)
def test_the_checker_itself(
    tmp_path: Path, rel: str, source: str, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "httpbus"
    target = fake / rel
    target.parent.mkdir(parents=True)
    target.write_text(source + "\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", fake)
    assert len(_violations(target)) == expected
