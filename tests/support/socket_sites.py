"""Where each socket of the test process was connected, so that an "unclosed socket" found by
the garbage collector names the code that opened it (tracemalloc would too, at several times
the run time: too slow for the whole suite).

An unclosed socket keeps its file descriptor, so the last connect made on that descriptor is
the leaked socket's own. ``install()`` adds an audit hook (they cannot be removed; it costs a
frame walk per connect); ``leaks(warnings)`` turns the recorded ResourceWarnings into lines
that name the task and the frames of each leaked socket's connect.
"""

from __future__ import annotations

import asyncio
import re
import sys
import warnings
from dataclasses import dataclass
from types import FrameType
from typing import Any

FRAMES = 24
_FD = re.compile(r"fd=(\d+)")


@dataclass(frozen=True)
class Site:
    address: str
    task: str
    frames: tuple[str, ...]


_sites: dict[int, Site] = {}
_installed = False


def install() -> None:
    """Record every connect from now on (once per process: a second call does nothing)."""
    global _installed
    if not _installed:
        sys.addaudithook(_on_audit)
        _installed = True


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect":
        return
    sock, address = args
    fd = sock.fileno()
    if fd < 0:
        return
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        task = None
    frames: list[str] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and len(frames) < FRAMES:
        code = frame.f_code
        frames.append(f"{code.co_filename}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    name = task.get_name() if task is not None else "(no task)"
    _sites[fd] = Site(str(address), name, tuple(frames))


def leaks(recorded: list[warnings.WarningMessage]) -> list[str]:
    """One description per ResourceWarning in ``recorded``: the warning and, for a socket,
    where it was connected."""
    out = []
    for warning in recorded:
        if not issubclass(warning.category, ResourceWarning):
            continue
        text = str(warning.message)
        match = _FD.search(text)
        site = _sites.get(int(match.group(1))) if match else None
        if site is None:
            out.append(text)
            continue
        frames = "\n    ".join(site.frames)
        out.append(f"{text}\n  connected to {site.address} by task {site.task!r} at:\n    {frames}")
    return out
