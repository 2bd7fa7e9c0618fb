"""``httpbus dev`` as a newcomer runs it: control plane and producer up, a message published
with curl-like HTTP and with ``httpbus produce``, errors in one line with a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.dev import run_dev

TOKEN = "dev-test-token-0123456789"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with run_dev(tmp_path_factory.mktemp("dev"), TOKEN) as running:
        yield running.control_plane, running.producer


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HTTPBUS_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "control_plane.cli", *args],
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
