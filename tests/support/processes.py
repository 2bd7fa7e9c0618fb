"""The deployables as real processes for tests, each on a free port: the producer service
(:class:`ProducerProcess`), the control plane (:class:`ControlPlaneProcess`) and a delivery
worker (:class:`WorkerProcess`)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import yaml

from scripts.realservices.ports import free_port


async def ready_now(url: str) -> bool:
    """Whether the process at ``url`` answers its ``/readyz`` with 200 now (3 s at most to
    answer): a condition for ``until``, or a check of the moment."""
    async with httpx.AsyncClient(timeout=3) as client:
        try:
            return (await client.get(f"{url}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False


class ProducerProcess:
    """``python -m producer_api`` with ``settings`` (a dict written as YAML). In a network
    namespace: ``wrap`` turns the command into one run there (``Namespace.exec_argv``) and
    ``host`` is the namespace's address, where it listens."""

    module = "producer_api"
    kind = "producer"

    def __init__(
        self,
        settings: dict[str, Any],
        workdir: Path,
        wrap: Callable[[list[str]], list[str]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.port, self.wrap = free_port(), wrap
        self.config = workdir / f"{self.kind}-{self.port}.yaml"
        self.config.write_text(yaml.safe_dump({**settings, "port": self.port, "host": host}))
        self.log = workdir / f"{self.kind}-{self.port}.log"
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        argv = [sys.executable, "-m", self.module, "--config", str(self.config)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.wrap(argv) if self.wrap else argv,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.kind} not ready in {timeout}s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ControlPlaneProcess(ProducerProcess):
    """``python -m control_plane`` with ``settings``, started and stopped as a
    :class:`ProducerProcess` is (``/readyz`` 200 once started), in a network namespace too;
    ``settings`` should name its ``member_id`` (its name in the leader elections) and a
    ``database_url`` of its own."""

    module = "control_plane"
    kind = "control-plane"


@contextmanager
def producer_processes(
    settings: Iterable[dict[str, Any]], workdir: Path
) -> Iterator[list[ProducerProcess]]:
    """One :class:`ProducerProcess` per ``settings``, each started (60 s to be ready), all
    stopped on the way out (those that did start, or failed to)."""
    procs = [ProducerProcess(one, workdir) for one in settings]
    try:
        for proc in procs:
            proc.start(timeout=60)
        yield procs
    finally:
        for proc in procs:
            proc.stop()


class WorkerProcess:
    """``python -m delivery_workers`` with ``settings`` as member ``member``, started at once;
    ``await ready()`` waits for its ``/readyz``. In a network namespace: ``wrap`` turns the
    command into one run there (``Namespace.exec_argv``) and ``host`` is the namespace's
    address, where its health server listens."""

    def __init__(
        self,
        settings: dict[str, Any],
        workdir: Path,
        member: str,
        wrap: Callable[[list[str]], list[str]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.member, self.host, self.port = member, host, free_port()
        self.config = workdir / f"{member}.yaml"
        own = {"port": self.port, "member_id": member, "host": host}
        self.config.write_text(yaml.safe_dump({**settings, **own}))
        self.log = workdir / f"{member}.log"
        argv = [sys.executable, "-m", "delivery_workers", "--config", str(self.config)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                wrap(argv) if wrap else argv,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def url(self) -> str:
        """Where its health server (``/readyz``, ``/metrics``) listens."""
        return f"http://{self.host}:{self.port}"

    async def ready(self, timeout: float = 30) -> None:
        async with httpx.AsyncClient() as client:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
                try:
                    r = await client.get(f"{self.url}/readyz", timeout=1)
                    if r.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class RelayProcess:
    """``python -m outbox_relay`` with ``settings`` (a dict written as YAML); every start
    appends to one log, so the figures of every run can be read from it (:meth:`figures`)."""

    def __init__(self, settings: dict[str, Any], workdir: Path) -> None:
        self.config = workdir / "relay.yaml"
        self.config.write_text(yaml.safe_dump(settings))
        self.log = workdir / "relay.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "outbox_relay", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        """None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def configure(self, **changes: Any) -> None:
        """Changes its settings file for the next start."""
        settings = yaml.safe_load(self.config.read_text())
        self.config.write_text(yaml.safe_dump({**settings, **changes}))

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye (what a crash looks like)."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM, then the exit code (SIGKILL after 30 s)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def figures(self, name: str) -> int:
        """The sum of ``name=N`` over the log's ``outbox batch`` lines, every run."""
        found = re.findall(rf"outbox batch .*\b{name}=(\d+)", self.log.read_text(errors="replace"))
        return sum(int(n) for n in found)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
