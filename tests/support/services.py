"""The endpoints of the real servers a test run uses (the fixtures are in tests/conftest.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealServices:
    zookeeper: str
    kafka: str
    pulsar: str
    pulsar_admin: str
    postgres: str = ""  # libpq URL; "" when the state file predates PostgreSQL


def load(path: Path) -> RealServices:
    return RealServices(**json.loads(path.read_text())["endpoints"])
