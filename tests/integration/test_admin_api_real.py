"""The admin API on real ZooKeeper, Kafka and Pulsar: what it says exists, exists."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from metastore.config import ZooKeeperConfig
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from tests.support.control_plane import app_client
from tests.support.services import RealServices

TOKEN = "integration-admin-token-0123"

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar]


@pytest.fixture
async def client(real_services: RealServices, unique: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = ControlPlaneSettings(
        admin_token=TOKEN,
        metastore=ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/it-{unique}"),
        clusters={
            "kafka-main": KafkaClusterConfig(bootstrap_servers=real_services.kafka),
            "pulsar-main": PulsarClusterConfig(
                service_url=real_services.pulsar, admin_url=real_services.pulsar_admin
            ),
        },
        default_cluster="kafka-main",
        storage_topic_prefix=f"it{unique}",
    )
    app = create_app(settings)
    async with app_client(app, token=TOKEN) as c:
        yield c


async def _project_topic_subscription(client: httpx.AsyncClient, cluster: str) -> dict:  # type: ignore[type-arg]
    r = await client.post("/v1/projects", json={"name": "shop"})
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/projects/shop/topics",
        json={"name": "orders", "cluster": cluster, "partitions": 4, "grouped": True},
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/projects/shop/subscriptions",
        json={
            "name": "billing",
            "topic": "orders",
            "endpoint": {"url": "https://billing.example/hook"},
        },
    )
    assert r.status_code == 201, r.text
    topic = (await client.get("/v1/projects/shop/topics/orders")).json()
    sub = (await client.get("/v1/projects/shop/subscriptions/billing")).json()
    assert topic["grouped"] is True and sub["endpoint"]["url"] == "https://billing.example/hook"
    assert sub["consume_pointer"]["segment_id"] == topic["produce_pointer"]["segment_id"] == 1
    [segment] = topic["segments"]
    assert (segment["cluster"], segment["partitions"]) == (cluster, 4)
    return segment  # type: ignore[no-any-return]


async def test_topic_on_kafka_exists_on_the_broker(
    client: httpx.AsyncClient, real_services: RealServices
) -> None:
    segment = await _project_topic_subscription(client, "kafka-main")
    admin = AdminClient({"bootstrap.servers": real_services.kafka})
    meta = admin.list_topics(segment["storage_topic"], timeout=10)
    assert len(meta.topics[segment["storage_topic"]].partitions) == 4
    r = await client.delete("/v1/projects/shop/topics/orders", params={"force": "true"})
    assert r.status_code == 204
    assert (await client.get("/v1/projects/shop/subscriptions/billing")).status_code == 404


async def test_topic_on_pulsar_exists_on_the_broker(
    client: httpx.AsyncClient, real_services: RealServices
) -> None:
    segment = await _project_topic_subscription(client, "pulsar-main")
    url = (
        f"{real_services.pulsar_admin}/admin/v2/persistent/public/default/"
        f"{segment['storage_topic']}/partitions"
    )
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert json.loads(resp.read())["partitions"] == 4


async def test_bad_input_against_real_servers(client: httpx.AsyncClient) -> None:
    await _project_topic_subscription(client, "kafka-main")
    r = await client.post("/v1/projects/shop/topics", json={"name": "x", "partitions": 10_000})
    assert r.status_code == 422
    r = await client.post("/v1/projects/ghost/topics", json={"name": "x"})
    assert r.status_code == 404
    r = await client.post("/v1/projects/shop/topics", json={"name": "x", "cluster": "nope"})
    assert r.status_code == 422
    assert [t["name"] for t in (await client.get("/v1/projects/shop/topics")).json()["items"]] == [
        "orders"
    ]
