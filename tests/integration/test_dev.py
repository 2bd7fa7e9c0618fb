"""``httpbus dev`` as a newcomer runs it: control plane and producer up, a message published
with curl-like HTTP and with ``httpbus produce``, errors in one line with a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.dev import run_dev
from tests.support.until import until_sync

TOKEN = "dev-test-token-0123456789"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with run_dev(tmp_path_factory.mktemp("dev"), TOKEN) as running:
        yield running.control_plane, running.producer


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HTTPBUS_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_dev_runs_the_platform_and_produce_publishes(dev: tuple[str, str]) -> None:
    cp, producer = dev
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{cp}/v1/projects", json={"name": "shop"}, headers=auth).status_code == 201
    r = httpx.post(f"{cp}/v1/projects/shop/topics", json={"name": "orders"}, headers=auth)
    assert r.status_code == 201
    r = httpx.post(
        f"{producer}/v1/projects/shop/topics/orders/produce", content=b"hi", headers=auth
    )
    assert r.status_code == 201
    one = _cli("produce", "shop", "orders", "--file", "-", "--url", producer, stdin=b"payload")
    assert one.returncode == 0 and len(one.stdout.strip()) == 26, one.stderr
    many = _cli(
        "produce",
        "shop",
        "orders",
        "--count",
        "250",
        "--batch",
        "100",
        "--url",
        producer,
        "--output",
        "json",
    )
    assert many.returncode == 0 and many.stdout.strip() == b'{"accepted": 250}', many.stderr


def test_produce_errors_are_one_line_with_a_meaningful_exit(dev: tuple[str, str]) -> None:
    _, producer = dev
    unknown = _cli("produce", "shop", "ghost", "--count", "1", "--url", producer)
    assert unknown.returncode == 1
    assert unknown.stderr.decode().strip().splitlines() == [
        "error: 404 not_found: topic shop/ghost does not exist"
    ]
    usage = _cli("produce", "shop", "orders", "--url", producer)
    assert usage.returncode == 2 and usage.stderr.decode().count("\n") == 1
    bad_flag = _cli("produce", "shop", "orders", "--count", "x")
    assert bad_flag.returncode == 2
    down = _cli("produce", "shop", "orders", "--count", "1", "--url", "http://127.0.0.1:1")
    assert down.returncode == 1 and b"cannot reach the producer" in down.stderr


def test_a_dead_child_makes_dev_unready_until_it_is_restarted(tmp_path: Path) -> None:
    with run_dev(tmp_path, TOKEN) as running:
        config = tmp_path / "state" / "producer.yaml"
        found = subprocess.run(
            ["pgrep", "-f", f"producer_api --config {config}"], capture_output=True
        )
        (pid,) = [int(p) for p in found.stdout.split()]
        os.kill(pid, signal.SIGKILL)
        ready = f"{running.control_plane}/readyz"
        down = until_sync(lambda: _status(ready) == 503 and httpx.get(ready).json(), 10, "503")
        assert "producer" in down["message"]
        until_sync(lambda: _status(ready) == 200, 30, "ready again after the restart")
        until_sync(lambda: _status(f"{running.producer}/readyz") == 200, 30, "producer serving")


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0
