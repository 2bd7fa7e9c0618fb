"""The layering table of docs/architecture.md, enforced on the packages at the repository's root.

A package imports only what the table allows; nothing imports ``httpbus`` (there is no such
package: the distribution is ``httpbus``, its packages are ``core``, ``segments``, …); the table
here is the table of the doc; and every root package name belongs to the ``httpbus``
distribution alone, so a clash with another installed distribution is caught.
"""

from __future__ import annotations

import ast
import re
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.support.layout import PACKAGES, ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"

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
    "cli": {
        "core",
        "metastore",
        "segments",
        "control_plane",
        "producer_api",
        "delivery_workers",
        "spark",
        "reports",
    },
    "spark": {"core"},
    "migrations": set(),
    "reports": {"core"},
}
BACKENDS = {"kafka", "pulsar", "embedded"}
GONE = "httpbus"  # the old package: the distribution's name, never an import
# Code outside the packages, checked only for imports of the (absent) httpbus package.
OTHER_CODE = ("tests", "bench", "scripts")


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
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


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    rel = path.relative_to(root).parts
    own = rel[0]
    bad: list[str] = []
    for line, name in _imports(path, root):
        parts = name.split(".")
        where = f"{path.relative_to(root)}:{line} imports {name}"
        if parts[0] == GONE:
            bad.append(f"{where}: there is no httpbus package; import {sorted(ALLOWED)} by name")
            continue
        target = parts[0]
        if target not in ALLOWED or own not in ALLOWED:
            continue
        if target != own and target not in ALLOWED[own]:
            allowed = sorted(ALLOWED[own]) or "nothing of ours"
            bad.append(f"{where}: {own} may import only {allowed}")
        if own == "segments" == target and len(parts) > 1 and parts[1] in BACKENDS:
            mine = rel[1] if len(rel) > 2 and rel[1] in BACKENDS else None
            if mine != parts[1]:
                bad.append(f"{where}: the segments base and other backends never import a backend")
    return bad


def _python_files() -> list[Path]:
    return sorted(p for d in (*ALLOWED, *OTHER_CODE) for p in (ROOT / d).rglob("*.py"))


def test_every_package_of_the_table_stands_at_the_root() -> None:
    assert set(ALLOWED) == set(PACKAGES)
    missing = [p for p in ALLOWED if not (ROOT / p / "__init__.py").is_file()]
    assert missing == []
    assert not (ROOT / "src").exists(), "the packages live at the root, not under src/"


def test_no_module_imports_what_the_table_forbids() -> None:
    bad = [v for path in _python_files() for v in _violations(path)]
    assert bad == [], "\n".join(bad)


def test_the_table_is_the_table_of_the_architecture_doc() -> None:
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]*) \|$", ARCHITECTURE.read_text(), re.M)
    documented = {name: set(re.findall(r"`(\w+)`", deps)) for name, deps in rows if name in ALLOWED}
    assert documented == ALLOWED


def test_each_root_package_belongs_to_the_httpbus_distribution_only() -> None:
    owners = packages_distributions()
    wrong = {p: owners.get(p) for p in ALLOWED if set(owners.get(p, [])) != {"httpbus"}}
    assert wrong == {}, f"root package names claimed by other distributions: {wrong}"


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("core/model.py", "from metastore import x", 1),
        ("core/model.py", f"import {GONE}", 1),
        ("tests/unit/x.py", f"from {GONE}.core import model", 1),
        ("producer_api/app.py", "import control_plane.app", 1),
        ("producer_api/app.py", "from ..segments import writer", 0),
        ("segments/reader.py", "from .kafka import store", 1),
        ("segments/kafka/store.py", "from ..pulsar import store", 1),
        ("segments/kafka/store.py", "from .config import KafkaConfig", 0),
        ("delivery_workers/w.py", "from circuit_breaker import Breaker", 0),
        ("control_plane/x.py", "from circuit_breaker import Breaker", 1),
        ("tests/unit/x.py", "from control_plane.app import build", 0),
    ],
)
def test_the_checker_itself(tmp_path: Path, rel: str, source: str, expected: int) -> None:
    target = tmp_path / rel
    target.parent.mkdir(parents=True)
    target.write_text(source + "\n")
    assert len(_violations(target, tmp_path)) == expected
