"""The endpoints of the real servers a test run uses (the fixtures are in tests/conftest.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RealServices:
    zookeeper: str
    kafka: str
    pulsar: str
    pulsar_admin: str
    postgres: str = ""  # libpq URL; "" when the state file predates PostgreSQL
    s3: str = ""  # S3Proxy's endpoint; "" when the state file predates it
    s3_bucket: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    logs: dict[str, str] = field(default_factory=dict)  # server name -> its log file

    def log_lines(self, server: str, needle: str, last: int = 20) -> list[str]:
        """The last ``last`` lines of ``server``'s log that contain ``needle`` (for a test's
        failure message: "did ZooKeeper expire a session meanwhile?")."""
        path = Path(self.logs.get(server, "/nonexistent"))
        if not path.is_file():
            return [f"({server} log not found)"]
        with path.open(errors="replace") as lines:
            return [line.rstrip() for line in lines if needle in line][-last:]

    def expired_sessions(self) -> list[str]:
        """ZooKeeper's "Expiring session … timeout of N ms exceeded" lines."""
        return self.log_lines("zookeeper", "Expiring session")


def load(path: Path) -> RealServices:
    state = json.loads(path.read_text())
    logs = {name: p["log"] for name, p in state.get("processes", {}).items() if "log" in p}
    return RealServices(**state["endpoints"], logs=logs)
