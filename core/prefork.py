"""Run a service as N processes on one port: a pre-fork supervisor.

One Python process uses one core (the GIL), and a producer or worker is CPU-bound under
load. With ``processes: N`` the parent binds the listening socket and forks N children
*before* any thread or event loop exists (kazoo, librdkafka, the Pulsar client and uvloop
start in each child, never inherited half-made), and the kernel spreads the connections
accepted on the shared socket over them. Each child is a whole service: its own metastore
session, storage clients and limits.

The parent only supervises:

- a child that dies is started again after ``RESTART_DELAY_S`` (a crash loop does not spin);
- SIGTERM and SIGINT are passed on, and the parent exits once every child has, with status 1
  if one of them failed to stop cleanly;
- children are told to stop if the parent dies (``PR_SET_PDEATHSIG``): a SIGKILLed service
  leaves no orphan holding its port.

Each child also listens on a private Unix socket in ``Slot.run_dir``, so the one that answers
a scrape can gather its siblings' metrics (:mod:`core.metrics_group`).

Example::

    serve(lambda slot: create_app(settings, slot=slot), host="0.0.0.0", port=8701,
          processes=2, options={"loop": "uvloop"})
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Self, TypeVar

import uvicorn
from pydantic import Field

log = logging.getLogger(__name__)

RESTART_DELAY_S = 1.0
_PR_SET_PDEATHSIG = 1

# The ``processes`` setting of a service: a count, or ``auto`` (one per usable core).
Processes = Annotated[int, Field(ge=1, le=256)] | Literal["auto"]


@dataclass(frozen=True)
class Slot:
    """Which process of a group this is: ``index`` of ``count``, with the folder of every
    member's private socket."""

    index: int
    count: int
    run_dir: Path

    def socket_path(self, index: int) -> Path:
        return self.run_dir / f"p{index}.sock"

    @property
    def peers(self) -> list[int]:
        return [i for i in range(self.count) if i != self.index]


def cpu_count() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota
    (a container limited to 2 CPUs on a 64-core node counts 2)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))


def resolve_processes(value: int | Literal["auto"]) -> int:
    """``processes`` of a service's settings as a count (``auto``: :func:`cpu_count`)."""
    return cpu_count() if value == "auto" else value


def member_of(member_id: str, slot: Slot | None) -> str:
    """The member id of process ``slot`` of a service named ``member_id``: each process is
    a member of its own (of the producers of a cutover, of the group of workers)."""
    return member_id if slot is None else f"{member_id}-{slot.index}"


AppFactory = Callable[[Slot | None], Any]


class ServiceSettings(Protocol):
    """What :func:`serve_service` reads of a service's settings."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def processes(self) -> int | Literal["auto"]: ...
    @property
    def member_id(self) -> str: ...

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Self: ...


S = TypeVar("S", bound=ServiceSettings)


def serve_service(create_app: Callable[..., Any], settings: S, options: dict[str, Any]) -> None:
    """:func:`serve` a service's ``create_app(settings, slot=slot)`` on its host, port and
    processes, each process with its own member id (:func:`member_of`)."""

    def make_app(slot: Slot | None) -> Any:
        own = settings.model_copy(update={"member_id": member_of(settings.member_id, slot)})
        return create_app(own, slot=slot)

    processes = resolve_processes(settings.processes)
    serve(make_app, host=settings.host, port=settings.port, processes=processes, options=options)


def serve(
    make_app: AppFactory, *, host: str, port: int, processes: int, options: dict[str, Any]
) -> None:
    """Serve ``make_app(slot)`` on ``host:port`` in ``processes`` processes (1: this one,
    ``make_app(None)``); ``options`` are ``uvicorn.Config``'s."""
    if processes <= 1:
        uvicorn.run(make_app(None), host=host, port=port, **options)
        return
    listener = _listen(host, port)
    run_dir = Path(tempfile.mkdtemp(prefix="httpbus-processes-"))
    try:
        code = _Supervisor(make_app, listener, run_dir, processes, options).run()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    raise SystemExit(code)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@dataclass(eq=False)
class _Supervisor:
    make_app: AppFactory
    listener: socket.socket
    run_dir: Path
    count: int
    options: dict[str, Any]
    _children: dict[int, int] = field(default_factory=dict, init=False)  # pid -> slot index
    _stopping: bool = field(default=False, init=False)
    _failed: bool = field(default=False, init=False)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for index in range(self.count):
            self._start(index)
        log.warning("serving on %d processes", self.count)
        while self._children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self._children:
                continue
            index = self._children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if self._stopping:
                self._failed |= code not in (0, -signal.SIGTERM, -signal.SIGINT)
                continue
            log.error("process %d (pid %d) exited with %d; starting it again", index, pid, code)
            time.sleep(RESTART_DELAY_S)
            if not self._stopping:
                self._start(index)
        return 1 if self._failed else 0

    def _stop(self, signum: int, _frame: object) -> None:
        self._stopping = True
        for pid in list(self._children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def _start(self, index: int) -> None:
        slot = Slot(index, self.count, self.run_dir)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the supervisor's loop
            code = 1
            try:
                _child(self.make_app, slot, self.listener, self.options, parent)
                code = 0
            except BaseException:
                log.exception("process %d failed", index)
            finally:
                logging.shutdown()
                os._exit(code)
        self._children[pid] = index


def _child(
    make_app: AppFactory,
    slot: Slot,
    listener: socket.socket,
    options: dict[str, Any],
    parent: int,
) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs its own in serve()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _die_with_parent(parent)
    private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = slot.socket_path(slot.index)
    path.unlink(missing_ok=True)  # a restarted child's predecessor left it
    private.bind(str(path))
    private.listen(64)
    server = uvicorn.Server(uvicorn.Config(make_app(slot), **options))
    server.run(sockets=[listener, private])


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when its parent (pid ``parent``) dies (Linux); elsewhere a
    no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call took effect
        os.kill(os.getpid(), signal.SIGTERM)
