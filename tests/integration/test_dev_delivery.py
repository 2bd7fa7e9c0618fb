"""``httpbus dev`` delivers: control plane, producer and one worker on the embedded backends;
a subscription to an endpoint in this test process receives every message published."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import httpx
import pytest

from tests.integration.producer_process import free_port

TOKEN = "dev-delivery-token-0123456789"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    data = tmp_path_factory.mktemp("dev-delivery")
    cp, producer, worker = free_port(), free_port(), free_port()
    env = {**os.environ, "HTTPBUS_ADMIN_TOKEN": TOKEN}
    log = (data / "dev.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "httpbus.control_plane.cli",
            "dev",
            "--port",
            str(cp),
            "--producer-port",
            str(producer),
            "--worker-port",
            str(worker),
            "--data-dir",
            str(data / "state"),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    urls = tuple(f"http://127.0.0.1:{p}" for p in (cp, producer, worker))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if all(httpx.get(f"{u}/readyz", timeout=1).status_code == 200 for u in urls):
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError((data / "dev.log").read_text()[-3000:])
        yield urls[0], urls[1], urls[2]
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{urls[2]}/healthz", timeout=0.5)
        except httpx.HTTPError:
            return
        time.sleep(0.2)
    raise AssertionError("the worker outlived httpbus dev")


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.append(body)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_dev_delivers_every_message(
    dev: tuple[str, str, str], endpoint: tuple[str, list[bytes]]
) -> None:
    cp, producer, worker = dev
    url, received = endpoint
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{cp}/v1/projects", json={"name": "shop"}, headers=auth).status_code == 201
    r = httpx.post(f"{cp}/v1/projects/shop/topics", json={"name": "orders"}, headers=auth)
    assert r.status_code == 201, r.text
    r = httpx.post(
        f"{cp}/v1/projects/shop/subscriptions",
        json={"name": "mailer", "topic": "orders", "endpoint": {"url": url}},
        headers=auth,
    )
    assert r.status_code == 201, r.text
    sent = [f"order-{i}".encode() for i in range(20)]
    for body in sent:
        r = httpx.post(
            f"{producer}/v1/projects/shop/topics/orders/produce", content=body, headers=auth
        )
        assert r.status_code == 201, r.text
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and set(received) != set(sent):
        time.sleep(0.1)
    assert sorted(received) == sorted(sent)
    metrics = httpx.get(f"{worker}/metrics").text
    assert 'httpbus_delivery_delivered_total{subscription="shop/mailer"} 20.0' in metrics
