"""No package calls ``asyncio.wait_for``: on Python 3.11 it can lose a cancellation.

When the task waiting in ``wait_for`` is cancelled in the same loop step in which the inner
future completes, 3.11's ``wait_for`` returns the result and drops the ``CancelledError``
(fixed in 3.12, which rebuilt ``wait_for`` on ``asyncio.timeout``). A close that cancels a
watch pump, or a test's own ``asyncio.timeout``, then waits forever with the event loop idle:
that was the fence test's hang under load. ``async with asyncio.timeout(…)`` has no such race.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.layout import PACKAGES, ROOT


def _calls(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "wait_for":
            if isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                lines.append(node.lineno)
    return lines


def test_no_package_calls_asyncio_wait_for() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _calls(path)
    ]
    assert found == [], "use `async with asyncio.timeout(...)` instead:\n" + "\n".join(found)
