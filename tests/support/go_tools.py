"""The Go tools the tests use, built from Go modules on first use by their scripts in
scripts/tools/ (Helm, toxiproxy) and cached under ~/.cache/httpbus."""

from __future__ import annotations

import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "scripts" / "tools"


def go_tool(script: str, timeout: float = 1_400) -> str:
    """The path ``scripts/tools/<script>`` prints, building the tool the first time."""
    done = subprocess.run(
        ["bash", str(TOOLS / script)], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"scripts/tools/{script} failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip()
