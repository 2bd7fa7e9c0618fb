"""The layering table of docs/architecture.md, enforced on the packages at the repository's root.

A package imports only what the table allows; inside a package, the rows of ``ROWS`` hold (the
control plane's rooms: api → services, leaders → services, ui → client; the CLI a client of the
control plane's API); no module of the product takes part in an import cycle, type-only and
function-level imports included; nothing imports ``httpbus`` (there is no such package: the
distribution is ``httpbus``, its packages are ``core``, ``segments``, …); the tables here are
the tables of the doc; and every root package name belongs to the ``httpbus`` distribution
alone, so a clash with another installed distribution is caught.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Literal

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
        "outbox_relay",
    },
    "spark": {"core"},
    "migrations": set(),
    "reports": {"core"},
    "outbox_relay": {"core"},
}


@dataclass(frozen=True)
class Row:
    """One rule inside the packages: a module under ``importer`` imports ``only`` modules under
    the listed prefixes among the packages those prefixes belong to (the rows of one importer
    add up), or ``never`` one under ``prefix``. A module's imports of its own importer prefix
    are always allowed."""

    importer: str
    verb: Literal["only", "never"]
    prefix: str
    why: str


ONLY: Literal["only"] = "only"
NEVER: Literal["never"] = "never"
# importer prefix -> allowed (only) or forbidden (never) prefix (docs/architecture.md, "Inside
# the packages").
ROWS: tuple[Row, ...] = (
    Row("control_plane.api", ONLY, "control_plane.services", "thin routers over the services"),
    Row("control_plane.api", ONLY, "control_plane.settings", "the settings they are built with"),
    Row("control_plane.services", NEVER, "control_plane.api", "services take their own inputs"),
    Row("control_plane.services", NEVER, "control_plane.ui", "the UI is a client of the API"),
    Row("control_plane.services", NEVER, "control_plane.leaders", "roles read records, not roles"),
    Row("control_plane.services", NEVER, "control_plane.app", "app.py only assembles"),
    Row("control_plane.leaders", ONLY, "control_plane.services", "elected roles use services"),
    Row("control_plane.leaders", ONLY, "control_plane.settings", "the settings they run on"),
    Row("control_plane.ui", ONLY, "control_plane.client", "the web UI is a client of the API"),
    Row("control_plane.client", NEVER, "control_plane", "a leaf: the CLI and the UI import it"),
    Row("control_plane.settings", NEVER, "control_plane", "a leaf: every room reads it"),
    Row("cli", ONLY, "control_plane.client", "the CLI is a client of the control plane's API"),
    Row("cli", ONLY, "control_plane.app", "httpbus dev and httpbus run start the services"),
    Row("cli", ONLY, "control_plane.settings", "the deployment file of dev, run and the jobs"),
    Row("cli", ONLY, "producer_api.app", "httpbus run starts a producer"),
    Row("cli", ONLY, "producer_api.settings", "its deployment file"),
    Row("cli", ONLY, "delivery_workers.app", "httpbus run starts a worker"),
    Row("cli", ONLY, "delivery_workers.settings", "its deployment file"),
    Row("cli", ONLY, "control_plane.services.export_plan", "httpbus export plans locally"),
    Row("cli", ONLY, "control_plane.leaders.migration_check", "the migration check runs locally"),
    Row("cli", ONLY, "control_plane.services.topic_migrations", "and shows what the API shows"),
    Row("cli", ONLY, "spark", "the Spark commands (audit, export) run the jobs in the process"),
    Row("cli", ONLY, "reports", "httpbus db and audit open the report store"),
    Row("cli", ONLY, "outbox_relay.service", "httpbus outbox run starts a relay"),
    Row("cli", ONLY, "outbox_relay.settings", "its settings file"),
)
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


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _row_violations(path: Path, root: Path = ROOT, rows: tuple[Row, ...] = ROWS) -> list[str]:
    """The imports of ``path`` that break a row of ``rows`` (every row whose importer prefix
    holds the module)."""
    module = _module_name(path, root)
    mine = [r for r in rows if _under(module, r.importer)]
    only = [r.prefix for r in mine if r.verb == ONLY]
    scope = {prefix.split(".")[0] for prefix in only}
    bad: list[str] = []
    for line, name in _imports(path, root):
        where = f"{path.relative_to(root)}:{line} imports {name}"
        outside = [r for r in mine if not _under(name, r.importer)]
        for row in outside:
            if row.verb == NEVER and _under(name, row.prefix):
                bad.append(f"{where}: {row.importer} never imports {row.prefix} ({row.why})")
        if (
            any(r.verb == ONLY for r in outside)
            and name.split(".")[0] in scope
            and not any(_under(name, prefix) for prefix in only)
        ):
            importers = sorted({r.importer for r in outside})
            bad.append(
                f"{where}: {', '.join(importers)} may import only {sorted(only)} of {sorted(scope)}"
            )
    return bad


def _product_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in ALLOWED for p in (root / d).rglob("*.py"))


def _import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """Every product module -> the product modules it imports, with the line of the first such
    import: all of them, at the top, under ``if TYPE_CHECKING:`` or inside a function. An import
    of a name resolves to the longest module prefix of it (``from a.b import C`` -> ``a.b``)."""
    files = {_module_name(p, root): p for p in _product_files(root)}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        for line, name in _imports(path, root):
            parts = name.split(".")
            targets = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
            target = next((t for t in targets if t in files), None)
            if target is not None and target != module:
                edges.setdefault(target, line)
    return graph


def _tangles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each module of one imports
    every other, directly or not (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: set[str] = set()
            while node not in component:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _one_cycle(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """The shortest cycle through the component's first module (breadth first, inside it)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt in component and nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    """``a (line 3) -> b (line 9) -> a``: each module and the line where it imports the next."""
    arrows = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return " -> ".join([*arrows, cycle[-1]])


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


def test_no_module_breaks_a_row_inside_its_package() -> None:
    bad = [v for path in _product_files() for v in _row_violations(path)]
    assert bad == [], "\n".join(bad)


def test_no_import_cycle_in_the_product() -> None:
    graph = _import_graph()
    cycles = [
        f"{_describe(graph, _one_cycle(graph, tangle))}; on cycles together: {sorted(tangle)}"
        for tangle in _tangles(graph)
    ]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_rows_are_the_rows_of_the_architecture_doc() -> None:
    text = ARCHITECTURE.read_text()
    section = text[text.index("### Inside the packages") :]
    lines = re.findall(r"^\| `([\w.]+)` \| (only|never) \| ([^|]*) \|[^|]*\|$", section, re.M)
    documented = {(i, verb, frozenset(re.findall(r"`([\w.]+)`", p))) for i, verb, p in lines}
    grouped: dict[tuple[str, str], set[str]] = {}
    for row in ROWS:
        grouped.setdefault((row.importer, row.verb), set()).add(row.prefix)
    assert documented == {(i, verb, frozenset(p)) for (i, verb), p in grouped.items()}


def test_the_table_is_the_table_of_the_architecture_doc() -> None:
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]*) \|$", ARCHITECTURE.read_text(), re.M)
    documented = {name: set(re.findall(r"`(\w+)`", deps)) for name, deps in rows if name in ALLOWED}
    assert documented == ALLOWED


def test_each_root_package_belongs_to_the_httpbus_distribution_only() -> None:
    owners = packages_distributions()
    wrong = {p: owners.get(p) for p in ALLOWED if set(owners.get(p, [])) != {"httpbus"}}
    assert wrong == {}, f"root package names claimed by other distributions: {wrong}"


def _write(root: Path, rel: str, source: str) -> Path:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source + "\n")
    return target


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
    assert len(_violations(_write(tmp_path, rel, source), tmp_path)) == expected


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("control_plane/services/admin.py", "from control_plane.api.schemas import X", 1),
        ("control_plane/services/admin.py", "from ..leaders import cutovers", 1),
        ("control_plane/services/admin.py", "from ..ui.render import render", 1),
        ("control_plane/services/admin.py", "from .operations import Operations", 0),
        ("control_plane/services/admin.py", "from control_plane.settings import S", 0),
        ("control_plane/api/topics.py", "from control_plane.services.admin import Admin", 0),
        ("control_plane/api/topics.py", "from ..leaders.cutovers import Cutovers", 1),
        ("control_plane/api/topics.py", "from control_plane.ui import views", 1),
        ("control_plane/api/topics.py", "from .schemas import TopicOut", 0),
        ("control_plane/api/topics.py", "from core.errors import NotFound", 0),
        ("control_plane/leaders/failover.py", "from control_plane.services import cutovers", 0),
        ("control_plane/leaders/failover.py", "from control_plane.api.schemas import X", 1),
        ("control_plane/leaders/failover.py", "from .cutovers import Cutovers", 0),
        ("control_plane/ui/views.py", "from control_plane.client import AdminClient", 0),
        ("control_plane/ui/views.py", "from control_plane.api.auth import Authenticator", 1),
        ("control_plane/ui/views.py", "from control_plane.services.admin import Admin", 1),
        ("control_plane/ui/views.py", "from .render import render", 0),
        ("control_plane/ui/views.py", "from metastore.protocol import MetaStore", 0),
        ("control_plane/client.py", "from control_plane.api import schemas", 1),
        ("control_plane/app.py", "from control_plane.leaders.cutovers import open_cutovers", 0),
        ("cli/topic.py", "from control_plane.client import AdminClient", 0),
        ("cli/topic.py", "from control_plane.services.admin import Admin", 1),
        ("cli/topic.py", "import control_plane.api.migration", 1),
        ("cli/export.py", "from control_plane.services.export_plan import plan", 0),
        ("cli/migration.py", "from control_plane.leaders.migration_check import compare", 0),
        ("cli/run.py", "import producer_api.app", 0),
        ("cli/run.py", "from delivery_workers.settings import WorkerSettings", 0),
        ("cli/run.py", "from producer_api.publish import Publisher", 1),
        ("cli/audit.py", "from spark.jobs import AuditJob", 0),
        ("cli/db.py", "from reports import migrate", 0),
        ("cli/audit.py", "from core.model import Topic", 0),
        ("cli/common.py", "from .supervisor import Supervisor", 0),
    ],
)
def test_the_row_checker_itself(tmp_path: Path, rel: str, source: str, expected: int) -> None:
    assert len(_row_violations(_write(tmp_path, rel, source), tmp_path)) == expected


TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from core.b import B\n"


@pytest.mark.parametrize(
    ("files", "tangles", "described"),
    [
        (
            {"core/a.py": "from core import b", "core/b.py": "from core.a import x"},
            [{"core.a", "core.b"}],
            "core.a (line 1) -> core.b (line 1) -> core.a",
        ),
        ({"core/a.py": TYPE_ONLY, "core/b.py": "from .a import A"}, [{"core.a", "core.b"}], ""),
        (
            {"core/a.py": "def f():\n    from .b import x\n", "core/b.py": "import core.a"},
            [{"core.a", "core.b"}],
            "core.a (line 2) -> core.b (line 1) -> core.a",
        ),
        (
            {
                "core/a.py": "from metastore.b import B",
                "metastore/b.py": "from segments.c import C",
                "segments/c.py": "from core import a",
                "segments/d.py": "from core.a import A",
            },
            [{"core.a", "metastore.b", "segments.c"}],
            "core.a (line 1) -> metastore.b (line 1) -> segments.c (line 1) -> core.a",
        ),
        ({"core/a.py": "from core.b import B", "core/b.py": "from .c import C"}, [], ""),
        ({"core/__init__.py": "from .a import A", "core/a.py": "from core.b import B"}, [], ""),
        ({"core/a.py": "import core.a\nimport json"}, [], ""),
    ],
)
def test_the_cycle_finder_itself(
    tmp_path: Path, files: dict[str, str], tangles: list[set[str]], described: str
) -> None:
    for rel, source in files.items():
        _write(tmp_path, rel, source)
    graph = _import_graph(tmp_path)
    assert _tangles(graph) == tangles
    if described:
        assert _describe(graph, _one_cycle(graph, tangles[0])) == described
