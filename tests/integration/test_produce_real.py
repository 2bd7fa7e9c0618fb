"""The producer service as a real process, on real ZooKeeper with Kafka and Pulsar."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.model import Backend, Project, Segment, SegmentState, Topic
from core.tokens import make_token
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from scripts.realservices.servers import Ports
from scripts.realservices.supervisor import Supervisor
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import SegmentStore, Stored
from segments.registry import open_store
from tests.support.processes import ProducerProcess
from tests.support.services import RealServices
from tests.support.stored import read_to_end
from tests.support.until import until

ADMIN = "integration-producer-admin-token"
pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar]


def _clusters(real: RealServices, timeout: float = 5.0) -> dict[str, Any]:
    return {
        "kafka-main": KafkaClusterConfig(bootstrap_servers=real.kafka, produce_timeout_s=timeout),
        "pulsar-main": PulsarClusterConfig(
            service_url=real.pulsar, admin_url=real.pulsar_admin, produce_timeout_s=timeout
        ),
    }


def _settings(real: RealServices, root: str, clusters: dict[str, Any]) -> dict[str, Any]:
    return {
        "admin_token": ADMIN,
        "metastore": {"kind": "zookeeper", "hosts": real.zookeeper, "root": root},
        "clusters": {name: c.model_dump() for name, c in clusters.items()},
    }


class World:
    def __init__(self, catalog: Catalog, stores: dict[str, SegmentStore], unique: str) -> None:
        self.catalog, self.stores, self.unique = catalog, stores, unique

    async def topic(self, name: str, cluster: str, partitions: int = 4, **fields: Any) -> Segment:
        store = self.stores[cluster]
        backend = Backend.KAFKA if cluster.startswith("kafka") else Backend.PULSAR
        seg = Segment(
            id=1,
            cluster=cluster,
            backend=backend,
            partitions=partitions,
            storage_topic=f"it.{self.unique}.{name}.s1",
            state=SegmentState.ACTIVE,
        )
        await store.create_topic(seg.storage_topic, partitions, retention_ms=3_600_000)
        await self.catalog.create_topic(Topic(project="shop", name=name, **fields), seg)
        return seg

    async def read_all(self, seg: Segment, ids: set[str] | None = None) -> list[Stored]:
        """Every record of ``seg``; with ``ids``, ends once each of them is read (Pulsar's
        positions are not dense, and a count is fooled by a duplicate)."""
        found = None if ids is None else (lambda read: ids <= {_id(m) for m in read})
        return await read_to_end(self.stores[seg.cluster], seg.storage_topic, until=found)


def _id(msg: Stored) -> str:
    return dict(msg.headers).get("x-message-id", b"").decode()


@pytest.fixture
async def world(real_services: RealServices, unique: str) -> AsyncIterator[World]:
    root = f"/prod-{unique}"
    async with open_metastore(ZooKeeperConfig(hosts=real_services.zookeeper, root=root)) as meta:
        stores = {}
        for name, config in _clusters(real_services).items():
            stores[name] = await open_store(config).__aenter__()
        try:
            catalog = Catalog(meta)
            await catalog.create_project(Project(name="shop"))
            yield World(catalog, stores, unique)
        finally:
            for store in stores.values():
                await store.aclose()


@pytest.fixture
def producer(real_services: RealServices, unique: str, tmp_path: Path) -> Iterator[ProducerProcess]:
    settings = _settings(real_services, f"/prod-{unique}", _clusters(real_services))
    with ProducerProcess(settings, tmp_path) as proc:
        yield proc


def _headers(group: str, seq: int) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {ADMIN}",
        "X-Group-Id": group,
        "X-Seq": str(seq),
        "X-Message-Id": f"{group}-{seq}",
        "Content-Type": "application/x-test",
    }


@pytest.mark.parametrize("cluster", ["kafka-main", "pulsar-main"])
async def test_published_messages_are_stored_in_group_order_byte_identical(
    world: World, producer: ProducerProcess, cluster: str
) -> None:
    seg = await world.topic("orders", cluster, grouped=True)
    groups = [f"g{i}" for i in range(10)]
    payloads = {(g, s): os.urandom(64) + f"{g}:{s}".encode() for g in groups for s in range(30)}
    async with httpx.AsyncClient(base_url=producer.url, timeout=30) as client:

        async def send_group(group: str) -> None:  # one group's messages in order
            for seq in range(30):
                r = await client.post(
                    "/v1/projects/shop/topics/orders/produce",
                    content=payloads[(group, seq)],
                    headers=_headers(group, seq),
                )
                assert r.status_code == 201, r.text

        await asyncio.gather(*(send_group(g) for g in groups))
    stored = await world.read_all(seg, ids={f"{g}-{s}" for g, s in payloads})
    assert len(stored) == 300
    seen: dict[str, list[int]] = {}
    for msg in sorted(stored, key=lambda m: (m.partition, m.position)):
        headers = dict(msg.headers)
        group, seq = headers["x-group-id"].decode(), int(headers["x-seq"])
        assert msg.value == payloads[(group, seq)]
        assert headers["content-type"] == b"application/x-test"
        assert headers["x-message-id"] == f"{group}-{seq}".encode()
        assert msg.key == group.encode()
        seen.setdefault(group, []).append(seq)
    assert all(seqs == list(range(30)) for seqs in seen.values())


@pytest.mark.parametrize("cluster", ["kafka-main", "pulsar-main"])
async def test_refusals_store_nothing(
    world: World, producer: ProducerProcess, cluster: str
) -> None:
    seg = await world.topic("strict", cluster, grouped=True, max_message_bytes=100)
    token, plaintext = make_token("shop", ("other",))
    await world.catalog.create_token(token)
    url = "/v1/projects/shop/topics/strict/produce"
    auth = {"Authorization": f"Bearer {ADMIN}", "X-Group-Id": "g"}
    async with httpx.AsyncClient(base_url=producer.url, timeout=30) as client:
        too_big = await client.post(url, content=b"x" * 101, headers=auth)
        assert (too_big.status_code, too_big.json()["code"]) == (413, "too_large")
        no_group = await client.post(
            url, content=b"x", headers={"Authorization": auth["Authorization"]}
        )
        assert no_group.status_code == 400
        unknown = await client.post(
            "/v1/projects/shop/topics/nope/produce", content=b"x", headers=auth
        )
        assert unknown.status_code == 404
        wrong = await client.post(
            url, content=b"x", headers={**auth, "Authorization": f"Bearer {plaintext}"}
        )
        assert wrong.status_code == 403
    assert await world.read_all(seg) == []


async def test_nothing_acknowledged_is_lost_when_the_producer_is_killed(
    world: World, real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    seg = await world.topic("crash", "kafka-main", partitions=4)
    settings = _settings(real_services, f"/prod-{unique}", _clusters(real_services))
    proc = ProducerProcess(settings, tmp_path)
    proc.start()
    acked: set[str] = set()
    errors = 0

    async def load(worker: int) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=proc.url, timeout=10) as client:
            for i in range(100_000):
                mid = f"w{worker}-{i}"
                try:
                    r = await client.post(
                        "/v1/projects/shop/topics/crash/produce",
                        content=mid.encode(),
                        headers={"Authorization": f"Bearer {ADMIN}", "X-Message-Id": mid},
                    )
                except httpx.HTTPError:
                    errors += 1
                    return
                if r.status_code == 201:
                    acked.add(mid)

    tasks = [asyncio.create_task(load(w)) for w in range(16)]
    await asyncio.sleep(random.uniform(2.0, 3.0))
    os.kill(proc.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    proc.stop()
    stored = {_id(m) for m in await world.read_all(seg)}
    print(
        f"\nSIGKILL mid-load: {len(acked)} acknowledged, {len(stored)} stored, "
        f"{len(stored - acked)} stored without an ack (client saw the kill), "
        f"{errors} connections cut"
    )
    assert len(acked) > 100
    assert acked <= stored, f"lost acknowledged messages: {sorted(acked - stored)[:10]}"


async def test_storage_down_is_503_in_time_and_recovers_without_restart(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    """A Kafka of its own (other ports), frozen with SIGSTOP: the broker hangs, the worst
    kind of outage for a client. Then SIGCONT: the same producer process recovers."""
    ports = Ports(kafka=19092 + random.randint(0, 500) * 2)
    ports = Ports(kafka=ports.kafka, kafka_controller=ports.kafka + 1)
    sup = Supervisor(tmp_path / "kafka", Path.home() / ".cache" / "httpbus" / "realservices", ports)
    sup.start(["kafka"], die_with_parent=True)
    try:
        kafka = KafkaClusterConfig(
            bootstrap_servers=f"127.0.0.1:{ports.kafka}", produce_timeout_s=3
        )
        clusters = {"kafka-down": kafka}
        root = f"/down-{unique}"
        async with (
            open_metastore(ZooKeeperConfig(hosts=real_services.zookeeper, root=root)) as meta,
            open_store(kafka) as store,
        ):
            world = World(Catalog(meta), {"kafka-down": store}, unique)
            await world.catalog.create_project(Project(name="shop"))
            await world.topic("fragile", "kafka-down", partitions=1)
            with ProducerProcess(_settings(real_services, root, clusters), tmp_path) as proc:
                await _outage_and_recovery(proc, sup)
    finally:
        sup.stop()


async def _outage_and_recovery(proc: ProducerProcess, sup: Supervisor) -> None:
    url = "/v1/projects/shop/topics/fragile/produce"
    auth = {"Authorization": f"Bearer {ADMIN}"}
    kafka_pid = sup.running()["kafka"].pid
    async with httpx.AsyncClient(base_url=proc.url, timeout=30) as client:
        assert (await client.post(url, content=b"before", headers=auth)).status_code == 201
        os.kill(kafka_pid, signal.SIGSTOP)
        try:
            t0 = asyncio.get_running_loop().time()
            down = await client.post(url, content=b"during", headers=auth)
            took = asyncio.get_running_loop().time() - t0
        finally:
            os.kill(kafka_pid, signal.SIGCONT)
        print(f"\nstorage frozen: {down.status_code} {down.json()['code']} after {took:.1f}s")
        assert (down.status_code, down.json()["code"]) == (503, "storage_unavailable")
        assert int(down.headers["retry-after"]) >= 1
        assert took < 3 + 2.0

        async def accepted() -> bool:
            again = await client.post(url, content=b"after", headers=auth)
            return again.status_code == 201

        await until(accepted, 60, "a 201 once Kafka runs again", interval=0.5)
