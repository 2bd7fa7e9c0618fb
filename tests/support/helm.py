"""The chart's tests' helm: the binary (built on first use) and ``helm template`` of the chart.

from tests.support.helm import helm_fixture, render  # the ``helm`` fixture
docs = render(helm, "--set", "audit.enabled=true")
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.go_tools import go_tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "httpbus"
RELEASE = "rel"


@pytest.fixture(scope="session", name="helm")
def helm_fixture() -> str:
    """The helm binary, built from Go modules on first use (scripts/tools/helm.sh)."""
    return go_tool("helm.sh")


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    """`helm template` of the chart; the parsed documents."""
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", "bus", *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]
