"""A server of the test's own, for tests that need a *fresh* one or must stop or kill it:
the shared servers of the suite (``make services-up``) are never disturbed.

Example::

    with dedicated_kafka(tmp_path) as bootstrap:
        ...  # "127.0.0.1:<port>", a broker that started a moment ago

:class:`DedicatedKafka` is one a test stops, kills and starts again on its data::

    kafka = DedicatedKafka(tmp_path / "kafka")
    kafka.start()                       # warmed up: its coordinators serve
    try:
        kafka.signal(signal.SIGSTOP)    # frozen: the worst outage for a client
        kafka.signal(signal.SIGCONT)
        kafka.kill(); await kafka.restart()  # the same data directory
    finally:
        kafka.stop()
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.servers import Ports
from scripts.realservices.supervisor import Supervisor
from tests.support.processes import free_port
from tests.support.until import until_sync


@contextmanager
def dedicated_kafka(run_dir: Path) -> Iterator[str]:
    """A single-node KRaft Kafka on free ports, data under ``run_dir``; stopped on exit."""
    ports = Ports(kafka=free_port(), kafka_controller=free_port())
    supervisor = Supervisor(run_dir, DEFAULT_CACHE, ports)
    supervisor.start(["kafka"], die_with_parent=True)
    try:
        yield f"127.0.0.1:{ports.kafka}"
    finally:
        supervisor.stop()


class DedicatedKafka:
    def __init__(self, run_dir: Path) -> None:
        self.ports = Ports(kafka=free_port(), kafka_controller=free_port())
        self.supervisor = Supervisor(run_dir, DEFAULT_CACHE, self.ports)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports.kafka}"

    @property
    def pid(self) -> int:
        return self.supervisor.running()["kafka"].pid

    def start(self) -> None:
        """Start it (blocking, about 10 s) and warm it up (:mod:`.kafka_warmup`). From the
        main thread: the broker dies with the thread that starts it, so that no broker
        outlives a killed test run."""
        self.supervisor.start(["kafka"], die_with_parent=True)
        self.warm_up()

    def warm_up(self, timeout: float = 60) -> None:
        """Until its coordinators serve, in throwaway processes (a crash there is retried)."""
        argv = [sys.executable, "-m", "tests.support.kafka_warmup", self.bootstrap, "20"]

        def warmed() -> bool:
            done = subprocess.run(argv, capture_output=True, check=False, timeout=60)
            return done.returncode == 0

        until_sync(warmed, timeout, "the broker's coordinators serving", interval=0.5)

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def kill(self, timeout: float = 30) -> None:
        """SIGKILL, and wait until it is gone (its data stays)."""
        self.signal(signal.SIGKILL)
        until_sync(lambda: "kafka" not in self.supervisor.running(), timeout, "kafka gone")

    async def restart(self) -> None:
        """Start again on the same data directory (from this, the main, thread), and wait
        until it answers without blocking the event loop."""
        self.supervisor.restart("kafka", die_with_parent=True, wait=False)
        await asyncio.to_thread(self.supervisor.wait, ["kafka"])
        await asyncio.to_thread(self.warm_up)

    def stop(self) -> None:
        running = self.supervisor.running().get("kafka")
        if running is not None:
            os.kill(running.pid, signal.SIGCONT)  # a stopped JVM would not hear SIGTERM
        self.supervisor.stop()
