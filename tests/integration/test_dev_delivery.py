"""``httpbus dev`` delivers: control plane, producer and one worker on the embedded backends;
a subscription to an endpoint in this test process receives every message published."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import httpx
import pytest

from tests.support.cli import httpbus, ok
from tests.support.dev import run_dev
from tests.support.until import until_sync

TOKEN = "dev-delivery-token-0123456789"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    with run_dev(tmp_path_factory.mktemp("dev-delivery"), TOKEN) as running:
        yield running.urls


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
    ids = []
    for body in sent:
        r = httpx.post(
            f"{producer}/v1/projects/shop/topics/orders/produce", content=body, headers=auth
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["message_id"])
    until_sync(lambda: set(received) == set(sent), 20, "every order at the endpoint", 0.1)
    assert sorted(received) == sorted(sent)
    metrics = httpx.get(f"{worker}/metrics").text
    assert 'httpbus_delivery_delivered_total{subscription="shop/mailer"} 20.0' in metrics
    # Accepted -> 2xx, every delivery observed once; all within the 60 s bucket here.
    assert 'httpbus_delivery_latency_seconds_count{subscription="shop/mailer"} 20.0' in metrics
    assert 'latency_seconds_bucket{le="60.0",subscription="shop/mailer"} 20.0' in metrics
    # Everything delivered: nothing read is waiting, and the lag (sampled every few seconds,
    # and committed positions trail deliveries by up to a second) comes down to 0.
    assert 'oldest_unacked_age_seconds{subscription="shop/mailer"} 0.0' in metrics
    lag = 'httpbus_subscription_lag_messages{subscription="shop/mailer"} 0.0'
    until_sync(lambda: lag in httpx.get(f"{worker}/metrics").text, 15, "a lag of 0", 0.2)

    _traced(cp, ids[-1])


def _traced(cp: str, message_id: str) -> None:
    """The last message's trace says delivered, through the API within 5 s and the CLI."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    trace_url = f"{cp}/v1/projects/shop/topics/orders/messages/{message_id}"

    def delivered() -> dict[str, Any] | None:
        r = httpx.get(trace_url, headers=auth)
        found: dict[str, Any] = r.json()
        states = [s["state"] for s in found.get("subscriptions", [])]
        return found if r.status_code == 200 and states == ["delivered"] else None

    trace = until_sync(delivered, 5, "the trace saying delivered", 0.1)
    assert trace["stored"]["segment"] == 1
    (mailer,) = trace["subscriptions"]
    assert [(a["attempt"], a["status"]) for a in mailer["attempts"]] == [(1, 204)]
    text = ok(httpbus(cp, "trace", "shop", "orders", message_id, token=TOKEN))
    assert "shop/mailer" in text and "delivered" in text and "segment 1" in text
