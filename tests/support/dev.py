"""``httpbus dev`` as a real process on free ports, for the tests that use it as a newcomer
would: control plane, producer and worker all answer ``/readyz`` before the test starts, and
none of them outlives ``dev`` when it is stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.processes import free_port


@dataclass(frozen=True)
class Dev:
    control_plane: str
    producer: str
    worker: str

    @property
    def urls(self) -> tuple[str, str, str]:
        return self.control_plane, self.producer, self.worker


def _wait_ready(dev: Dev, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(httpx.get(f"{u}/readyz", timeout=1).status_code == 200 for u in dev.urls):
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(log.read_text()[-3000:])


def _gone(url: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/healthz", timeout=0.5)
        except httpx.HTTPError:
            return True
        time.sleep(0.2)
    return False


@contextmanager
def run_dev(data: Path, token: str) -> Iterator[Dev]:
    """Start ``httpbus dev`` on ``data``; stop it and check its children ended with it
    (uvicorn re-raises SIGTERM, so they rely on ``PR_SET_PDEATHSIG``, not on a finally)."""
    ports = [free_port() for _ in range(3)]
    dev = Dev(*(f"http://127.0.0.1:{p}" for p in ports))
    env = {**os.environ, "HTTPBUS_ADMIN_TOKEN": token}
    log_path = data / "dev.log"
    argv = [
        sys.executable,
        "-m",
        "cli",
        "dev",
        "--port",
        str(ports[0]),
        "--producer-port",
        str(ports[1]),
        "--worker-port",
        str(ports[2]),
        "--data-dir",
        str(data / "state"),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(dev, log_path)
        yield dev
    finally:
        proc.terminate()
        proc.wait(20)
    outlived = [u for u in (dev.producer, dev.worker) if not _gone(u)]
    assert not outlived, f"{outlived} outlived httpbus dev"
