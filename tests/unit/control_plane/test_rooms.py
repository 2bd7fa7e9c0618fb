"""The control plane's rooms (DESIGN.md, "Control plane by job"): ``api`` routes to the
services, ``services`` do the work and never import ``api``, ``ui`` or ``leaders``, each
``leaders`` module is an elected role that may use the services but not the API or the UI,
the UI is a client of the API; and no import cycle among the control plane's modules (imports
for type checking included)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.layout import ROOT

PACKAGE = ROOT / "control_plane"

# room -> the rooms of control_plane it must not import.
FORBIDDEN = {
    "services": {"api", "ui", "leaders", "app"},
    "leaders": {"api", "ui", "app"},
    "api": {"leaders", "ui", "app"},
    "ui": {"api", "services", "leaders", "app"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The control plane's modules ``name`` imports (a package's ``__init__`` only when it
    is what is imported, not as the parent of a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            wanted = [f"{base}.{alias.name}" for alias in node.names]
            if not any(w in modules for w in wanted):
                wanted.append(base)
        else:
            continue
        for target in wanted:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_each_room_imports_only_what_it_may() -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if _room(target) in FORBIDDEN.get(_room(module) or "", set())
    ]
    assert bad == []


def test_no_import_cycle_in_the_control_plane() -> None:
    graph = _graph()
    done: set[str] = set()

    def cycle_from(start: str) -> list[str] | None:
        path, on_path = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step not in done:
                path.append(step)
                on_path.add(step)
                stack.append(iter(sorted(graph[step])))
        return None

    cycles = [c for m in sorted(graph) if m not in done and (c := cycle_from(m))]
    assert cycles == []


def test_every_elected_role_is_in_the_roles_list() -> None:
    """One module a role; the app starts them all from ``leaders.roles``."""
    roles = (PACKAGE / "leaders" / "roles.py").read_text()
    for module in ("assigner", "cutover_coordinator", "failover", "migration_monitor",
                   "retirement", "trace_indexer"):  # fmt: skip
        assert f"from control_plane.leaders.{module} import" in roles
