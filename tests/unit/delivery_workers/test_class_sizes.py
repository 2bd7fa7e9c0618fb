"""No class of the delivery workers over 250 lines (issue 33): a class that grows past that
holds more than one job, as the Worker did (assignment and locks, and the running of each
held subscription, now apart in running.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "delivery_workers"
MAX_LINES = 250


def test_no_class_of_the_delivery_workers_is_over_250_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(ROOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]
    assert not too_long, too_long
