"""Which process owns the other end of a local TCP connection: how a test tells which worker
process sent a request its endpoint received (Linux ``/proc``; no psutil here)."""

from __future__ import annotations

import os
from pathlib import Path


def _rows(table: str) -> list[list[str]]:
    try:
        return [line.split() for line in Path(table).read_text().splitlines()[1:]]
    except OSError:
        return []


def _inodes(port: int) -> set[str]:
    """Socket inodes bound to local ``port`` (IPv4 and IPv6 tables)."""
    return {
        f"socket:[{row[9]}]"
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for row in _rows(table)
        if int(row[1].rsplit(":", 1)[1], 16) == port
    }


def owner(port: int, pids: list[int]) -> int | None:
    """The pid among ``pids`` holding a socket bound to local ``port`` now, or None."""
    inodes = _inodes(port)
    for pid in pids if inodes else []:
        fds = Path(f"/proc/{pid}/fd")
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(fds / name) in inodes:
                    return pid
            except OSError:
                continue
    return None
