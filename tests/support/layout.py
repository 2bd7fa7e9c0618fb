"""Where the project's code is: the repository's root and its packages (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "core",
    "metastore",
    "segments",
    "circuit_breaker",
    "producer_api",
    "delivery_workers",
    "control_plane",
    "cli",
    "spark",
    "reports",
    "migrations",
    "outbox_relay",
)
