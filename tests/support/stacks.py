"""Say where a test is stuck: every thread's and every asyncio task's stack, on overrun.

A bound such as ``asyncio.timeout`` cannot fire while the event loop is blocked, and pytest's
own timeout shows threads only, not the tasks the loop is waiting on. ``stacks_on_overrun``
starts a timer thread that, if the block is still running after ``seconds``, writes both to
standard error, then lets the test go on (its own bound decides whether it fails).
"""

from __future__ import annotations

import asyncio
import faulthandler
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def dump_stacks(loop: asyncio.AbstractEventLoop | None, label: str) -> None:
    """Write every thread's stack and every task of ``loop`` to standard error."""
    err = sys.stderr
    print(f"\n===== {label}: stacks of every thread =====", file=err, flush=True)
    faulthandler.dump_traceback(file=err, all_threads=True)
    if loop is None:
        return
    # Read from another thread on purpose: the loop may be the thing that is stuck.
    tasks = list(asyncio.all_tasks(loop))
    print(f"===== {label}: {len(tasks)} asyncio tasks =====", file=err, flush=True)
    for task in tasks:
        print(f"--- {task!r}", file=err)
        task.print_stack(limit=30, file=err)
    err.flush()


@contextmanager
def stacks_on_overrun(seconds: float, label: str) -> Iterator[None]:
    """Dump every stack once if the block has not finished after ``seconds``."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    timer = threading.Timer(seconds, dump_stacks, args=(loop, f"{label} overran {seconds:g}s"))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
