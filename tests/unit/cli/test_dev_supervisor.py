"""``httpbus dev`` keeps its children alive: a child that dies is restarted after a backoff,
and is reported down meanwhile (the control plane's /readyz answers 503 then)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from cli.supervisor import Supervisor
from tests.support.until import until_sync


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_killed_child_is_down_then_restarted_with_a_new_pid() -> None:
    with Supervisor({"worker": _sleeper}, poll_s=0.05, first_backoff_s=0.5) as children:
        first = children.pid("worker")
        assert first is not None and children.down() == []
        os.kill(first, signal.SIGKILL)
        until_sync(lambda: children.down() == ["worker"], 5, "the dead child reported down")
        until_sync(lambda: children.down() == [], 5, "the child running again")
        assert children.pid("worker") != first and children.restarts("worker") == 1
    assert children.down() == ["worker"]  # stopped with the supervisor


def test_a_child_that_keeps_dying_waits_longer_each_time() -> None:
    def dies() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    with Supervisor(
        {"producer": dies}, poll_s=0.02, first_backoff_s=0.1, max_backoff_s=0.4
    ) as children:
        until_sync(lambda: children.restarts("producer") >= 3, 10, "three restarts")
        assert children._children["producer"].backoff_s == 0.4  # 0.1, 0.2, 0.4, capped
