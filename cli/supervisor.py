"""``httpbus dev``'s children kept alive: a child that dies is started again, with a log line.

The producer and the worker run as child processes of ``httpbus dev`` (deployables never
import each other). A thread looks at them every ``poll_s``; one that exited is restarted
after a backoff (``first_backoff_s``, doubling up to ``max_backoff_s``, back to the first
once a child has stayed up ``stable_s``), and :meth:`Supervisor.down` names the children not
running meanwhile, which the control plane's ``/readyz`` reports as 503.

Example::

    with Supervisor({"producer": start_producer, "worker": start_worker}) as children:
        app.state.children_down = children.down
        uvicorn.run(app)
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

log = logging.getLogger("httpbus.dev")

Start = Callable[[], "subprocess.Popen[bytes]"]


@dataclass
class _Child:
    start: Start
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float = 0.0
    restart_at: float | None = None
    restarts: int = 0


def _running(child: _Child) -> bool:
    return child.proc is not None and child.proc.poll() is None


class Supervisor:
    def __init__(
        self,
        starts: dict[str, Start],
        *,
        poll_s: float = 0.5,
        first_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        stable_s: float = 60.0,
    ) -> None:
        self._children = {name: _Child(start) for name, start in starts.items()}
        self.poll_s, self.first_backoff_s = poll_s, first_backoff_s
        self.max_backoff_s, self.stable_s = max_backoff_s, stable_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="dev-supervisor", daemon=True)

    def __enter__(self) -> Self:
        for name, child in self._children.items():
            self._launch(name, child)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def pid(self, name: str) -> int | None:
        proc = self._children[name].proc
        return None if proc is None else proc.pid

    def restarts(self, name: str) -> int:
        return self._children[name].restarts

    def down(self) -> list[str]:
        """The children not running now (exited, waiting for their restart)."""
        with self._lock:
            return [
                n for n, c in self._children.items() if c.proc is None or c.proc.poll() is not None
            ]

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop watching, then terminate every child (killed if it outlives ``timeout_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        procs = [c.proc for c in self._children.values() if c.proc is not None]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()

    def _launch(self, name: str, child: _Child) -> None:
        with self._lock:
            child.proc, child.started_at, child.restart_at = child.start(), time.monotonic(), None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            for name, child in self._children.items():
                self._check(name, child)

    def _check(self, name: str, child: _Child) -> None:
        now = time.monotonic()
        if child.proc is None or child.proc.poll() is None:
            if child.proc is not None and now - child.started_at >= self.stable_s:
                child.backoff_s = 0.0  # it stayed up: the next failure starts over
            return
        if child.restart_at is None:
            child.backoff_s = min(
                self.max_backoff_s, max(self.first_backoff_s, child.backoff_s * 2)
            )
            child.restart_at = now + child.backoff_s
            log.warning(
                "httpbus dev: the %s exited with code %s; restarting it in %.0f s",
                name,
                child.proc.returncode,
                child.backoff_s,
            )
        elif now >= child.restart_at and not self._stop.is_set():
            self._launch(name, child)
            child.restarts += 1
            log.warning("httpbus dev: the %s started again (pid %s)", name, self.pid(name))
