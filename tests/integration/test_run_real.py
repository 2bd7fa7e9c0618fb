"""``httpbus run`` on the real servers with one deployment file, as docs/running.md tells a
newcomer: the file ``python -m scripts.realservices deployment`` writes (ZooKeeper, Kafka,
Pulsar, PostgreSQL), the three services from it, then the README's five-minute tour run
unchanged against them, ending with a subscription's delivery and its trace."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest
import yaml

from scripts.realservices.deployment import deployment
from tests.support.cli import httpbus, ok
from tests.support.processes import free_port
from tests.support.services import RealServices
from tests.support.ui import Hook, hook
from tests.support.until import until_sync

TOKEN = "run-real-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def platform(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> Iterator[tuple[str, str]]:
    ports = (free_port(), free_port(), free_port())
    endpoints = {k: v for k, v in asdict(real_services).items() if isinstance(v, str)}
    content = deployment(
        endpoints,
        admin_token=TOKEN,
        root=f"/run-{unique}",
        prefix=f"run{unique}",
        ports=ports,
        database_url=postgres_database,
    )
    config = tmp_path / "httpbus.yaml"
    config.write_text(yaml.safe_dump(content))
    log = (tmp_path / "run.log").open("wb")
    command = "from cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", command, "run", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    cp, producer = f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    try:
        until_sync(lambda: _ready(cp, producer), 60, "httpbus run ready", 0.2)
        yield cp, producer
        with httpx.Client(base_url=cp, headers=AUTH) as api:  # its storage topics go too
            for topic in api.get("/v1/projects/shop/topics").json().get("items", []):
                api.delete(f"/v1/projects/shop/topics/{topic['name']}", params={"force": "true"})
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        print((tmp_path / "run.log").read_text()[-3000:])


def _ready(cp: str, producer: str) -> bool:
    try:
        return (
            httpx.get(f"{cp}/readyz").status_code == 200
            and httpx.get(f"{producer}/healthz").status_code == 200
        )
    except httpx.HTTPError:
        return False


def test_the_readme_tour_on_httpbus_run(platform: tuple[str, str]) -> None:
    cp, producer = platform
    with httpx.Client(headers=AUTH, timeout=30) as http, hook() as endpoint:
        _tour(http, cp, producer, endpoint)


def _tour(http: httpx.Client, cp: str, producer: str, endpoint: Hook) -> None:
    assert http.post(f"{cp}/v1/projects", json={"name": "shop"}).status_code == 201
    topic = {"name": "orders", "partitions": 4, "grouped": True}
    r = http.post(f"{cp}/v1/projects/shop/topics", json=topic)
    assert r.status_code == 201, r.text
    sub = {"name": "mailer", "topic": "orders", "endpoint": {"url": endpoint.url}}
    r = http.post(f"{cp}/v1/projects/shop/subscriptions", json=sub)
    assert r.status_code == 201, r.text
    r = http.post(
        f"{producer}/v1/projects/shop/topics/orders/produce",
        headers={"X-Group-Id": "customer-42", "X-Region": "eu"},
        content=b'{"order": 1}',
    )
    assert r.status_code == 201, r.text
    first = r.json()
    assert first["segment"] == 1
    # As the README: the produce command takes the token of HTTPBUS_TOKEN (here --token).
    produce = ("produce", "shop", "orders", "--count", "100", "--group", "customer-7")
    out = ok(httpbus(producer, *produce, "--url", producer, "--token", TOKEN))
    assert "100" in out
    segments = http.get(f"{cp}/v1/projects/shop/topics/orders/segments").json()
    assert segments["segments"][0]["cluster"] == "kafka-main"
    until_sync(lambda: len(endpoint.delivered) >= 101, 60, "101 deliveries", 0.2)

    def traced() -> bool:
        r = http.get(f"{cp}/v1/projects/shop/topics/orders/messages/{first['message_id']}")
        return r.status_code == 200 and r.json()["subscriptions"][0]["state"] == "delivered"

    until_sync(traced, 10, "the first message traced as delivered", 0.2)
