"""A verified migration (issue 23, item 4) on real ZooKeeper and Kafka with Spark local,
onto a shadow segment on Kafka and on Pulsar.

A legacy Kafka producer (confluent-kafka) and httpbus producers dual-write the same ids in
short windows while a subscription delivers from the adopted topic. The check runs in rounds
as ``httpbus topic migration check --follow`` runs them. One early window has planted ids
that never reach httpbus: the check names exactly those and the switch waits for N clean
windows after it; then the leader switches by itself; a planted loss after the switch rolls
it back within the guard period. The subscription receives every id exactly once, as
without the migration: readers never pass the external segment's recorded end, and pass over
the ids the other side delivered (``Segment.skip_ids``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from control_plane.leaders.migration_check import compare, plan_sides, store_windows
from metastore.config import ZooKeeperConfig, open_metastore
from reports.migration_windows import MigrationWindows
from segments.config import KafkaClusterConfig
from segments.registry import open_store
from tests.support.control_plane import json_of
from tests.support.delivery import ADMIN, DeliveryWorld, delivery_world
from tests.support.delivery import clusters as standard_clusters
from tests.support.services import RealServices
from tests.support.ui import SHOTS, async_page, needs_chromium, serve_app
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.postgres, needs_chromium]
PULSAR = pytest.mark.pulsar
MIGRATION = "/v1/projects/shop/topics/orders/migration"
WINDOW_S, GAP_S, CLEAN = 4, 2, 2


class Load:
    """Dual writes: every id to the legacy topic, and to httpbus unless it is planted
    missing there; after a rollback httpbus refuses (422) and only the legacy side writes."""

    def __init__(self, bootstrap: str, legacy: str, producer: httpx.AsyncClient) -> None:
        self.kafka = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.legacy = legacy
        self.producer = producer
        self.written: list[str] = []  # to the legacy topic, acknowledged
        self.skip_bus: set[str] = set()  # planted: never written through httpbus
        self.refused: list[str] = []  # 422: after the rollback, the legacy side alone
        self.n = 0

    def _legacy(self, mid: str) -> None:
        self.kafka.produce(self.legacy, mid.encode(), key=mid[-1:], headers=[("event-id", mid)])
        assert self.kafka.flush(10) == 0
        self.written.append(mid)

    async def _bus(self, mid: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a producer retries a 503 with the same id
            r = await self.producer.post(
                "/v1/projects/shop/topics/orders/produce",
                content=mid.encode(),
                headers={"X-Message-Id": mid, "X-Group-Id": mid[-1:]},
            )
            if r.status_code != 503:
                assert r.status_code in (200, 201, 202, 422), r.text
                if r.status_code == 422:
                    self.refused.append(mid)
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{mid}: httpbus kept answering 503")

    async def one(self, *, plant: bool = False) -> str:
        mid = f"e{self.n:05d}"
        self.n += 1
        if plant:
            self.skip_bus.add(mid)
        await asyncio.to_thread(self._legacy, mid)
        if not plant:
            await self._bus(mid)
        return mid

    async def run(self, stop: asyncio.Event, plant: asyncio.Event, planted: list[str]) -> None:
        while not stop.is_set():
            if plant.is_set():
                planted.extend([await self.one(plant=True) for _ in range(3)])
                plant.clear()
            await self.one()
            await asyncio.sleep(0.05)


async def _checks(world: Any, spark: Any, stop: asyncio.Event, rounds: list[float]) -> None:
    """The check's rounds (``--follow``): plan both sides, Spark, store the windows (on the
    migration, and every one in PostgreSQL)."""
    meta, clusters, stores, history = world
    while not stop.is_set():
        t0 = time.monotonic()
        sides = await plan_sides(meta, clusters, stores, "shop", "orders")
        windows = await asyncio.to_thread(compare, spark, sides)
        await store_windows(meta, sides, windows, rerun=False, history=history)
        rounds.append(time.monotonic() - t0)
        await asyncio.sleep(0.5)


async def _state(world: DeliveryWorld) -> dict[str, Any]:
    return json_of(await world.cp.get(MIGRATION))


@pytest.mark.parametrize("target", ["kafka-main", pytest.param("pulsar-main", marks=PULSAR)])
async def test_dual_write_switch_after_clean_windows_and_rollback_on_a_loss(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    spark: Any,
    target: str,
    postgres_database: str,
) -> None:
    legacy = f"legacy-{unique}.orders"
    plain = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    async with open_store(plain) as kafka:
        await kafka.create_topic(legacy, 2, retention_ms=3_600_000)
    adopted = plain.model_copy(update={"read_only": True, "id_header": "event-id"})
    clusters = {"legacy": adopted, target: standard_clusters(real_services)[target]}
    zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/delivery-{unique}")
    async with (
        delivery_world(
            real_services,
            unique,
            tmp_path,
            "legacy",
            cluster_config=adopted,
            extra_clusters={target: clusters[target]},
            database_url=postgres_database,  # the audit trail, its trace index, the windows
            audit_cluster=target,
        ) as world,
        contextlib.AsyncExitStack() as stack,
    ):
        meta = await stack.enter_async_context(open_metastore(zk))
        stores = {n: await stack.enter_async_context(open_store(c)) for n, c in clusters.items()}
        history = MigrationWindows.from_url(postgres_database)
        stack.callback(history.close)
        await world.topic("orders", partitions=2, external_topic=legacy, grouped=True)
        await world.subscribe("all", "orders", start="earliest")  # the legacy records
        await world.running("all")
        body = {
            "cluster": target,
            "window": f"{WINDOW_S}s",
            "session_gap": f"{GAP_S}s",
            "clean_windows": CLEAN,
            "guard": "60s",
        }
        r = await world.cp.post(MIGRATION, json=body)
        assert r.status_code == 201, r.text

        load = Load(real_services.kafka, legacy, world.producer)
        stop, plant, planted = asyncio.Event(), asyncio.Event(), []
        rounds: list[float] = []
        t0 = time.monotonic()
        plant.set()  # the first window has three ids httpbus never got
        tasks = [
            asyncio.create_task(load.run(stop, plant, planted)),
            asyncio.create_task(_checks((meta, clusters, stores, history), spark, stop, rounds)),
        ]
        try:
            switched = await until(
                lambda: _past(world, "dual_write", "switching"), 150, "the switch", interval=0.3
            )
            t_switch = time.monotonic() - t0
            first = list(planted)
            assert len(first) == 3
            # The check named exactly the planted ids, and the switch waited N clean windows.
            dirty = [w for w in switched["windows"] if w["closed"] and not w["clean"]]
            named = sorted(mid for w in dirty for mid in w["missing_in_bus_ids"])
            assert named == first and all(not w["late"] for w in dirty), dirty
            after = [w for w in switched["windows"] if w["start_ms"] >= dirty[-1]["end_ms"]]
            assert sum(1 for w in after if w["clean"]) >= CLEAN, after
            assert switched["switch_ends"] and switched["shadow_starts"] is not None
            topic = (await world.cp.get("/v1/projects/shop/topics/orders")).json()
            assert topic["segments"][1]["state"] == "active"
            assert topic["segments"][1]["start_positions"] == switched["shadow_starts"]
            # A loss after the switch rolls it back within the guard period.
            plant.set()
            t_plant = time.monotonic()
            rolled = await until(
                lambda: _past(world, "dual_write", "switching", "guard", "rolling_back"),
                120,
                "the rollback",
                interval=0.3,
            )
            t_rollback = time.monotonic() - t_plant
            assert rolled["state"] == "rolled_back", rolled
            second = planted[3:]
            guard = [w for w in rolled["windows"] if w["end_ms"] > dirty[-1]["end_ms"]]
            lost = sorted(mid for w in guard if w["closed"] for mid in w["missing_in_bus_ids"])
            assert lost == second and second[0] in rolled["reason"], (lost, rolled["reason"])
            assert rolled["rollback_starts"] is not None
            await _look(world, rolled, second[0])
            # The legacy producers go on; what they write now is delivered too.
            more = len(load.written) + 10
            await until(lambda: len(load.written) >= more, 30, "legacy writes after it")
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        written = set(load.written)
        await until(
            lambda: written <= set(world.hook.ids("all")), 90, "every id delivered", interval=0.3
        )
        delivered = Counter(world.hook.ids("all"))
        twice = sorted(mid for mid, n in delivered.items() if n > 1)
        print(
            f"\nmigration onto {target}: {len(written)} ids, {len(rolled['windows'])} windows, "
            f"{len(rounds)} check rounds (mean {sum(rounds) / len(rounds):.1f} s), switch at "
            f"{t_switch:.1f} s, rollback {t_rollback:.1f} s after the planted loss; passed over "
            f"by readers: {rolled['switch_skipped']} after the switch, "
            f"{rolled['rollback_skipped']} after the rollback; delivered twice: {len(twice)}"
        )
        # Exactly as without the migration: every id once, none from both sides.
        assert not twice and set(delivered) == written, (twice, set(delivered) - written)
        # In order per group across the switch and the rollback, but for the ids the bus
        # lost: the rollback recovers them after later ones went out from the shadow side.
        for group in "0123456789":
            seq = [m for m in world.hook.ids("all") if m[-1] == group and m not in second]
            assert seq == sorted(seq), (group, seq)
        assert rolled["switch_duplicates"] == rolled["rollback_duplicates"] == 0, rolled
        await _kept_in_postgres(world, rolled)
        await _traced_once(world)


async def _kept_in_postgres(world: DeliveryWorld, rolled: dict[str, Any]) -> None:
    """Every window the migration kept is in PostgreSQL too, with its verdict and ids."""
    r = await world.cp.get(MIGRATION + "/windows")
    assert r.status_code == 200, r.text
    kept = {w["start_ms"]: w for w in r.json()["windows"]}
    for w in rolled["windows"]:
        if w["closed"]:
            got = kept[w["start_ms"]]
            assert (got["clean"], got["missing_in_bus_ids"]) == (
                w["clean"],
                w["missing_in_bus_ids"],
            ), (got, w)


async def _traced_once(world: DeliveryWorld) -> None:
    """An id the rollback's readers passed over: its trace (the audit trail indexed in
    PostgreSQL) says delivered, once, and shows the copy passed over in the new segment."""
    topic = (await world.cp.get("/v1/projects/shop/topics/orders")).json()
    back = topic["segments"][-1]
    assert back["skip_ids"], back
    mid = back["skip_ids"][0]

    async def traced() -> dict[str, Any] | None:
        r = await world.cp.get(f"/v1/projects/shop/topics/orders/messages/{mid}")
        if r.status_code != 200:
            return None
        sub: dict[str, Any] = r.json()["subscriptions"][0]
        return sub if "filtered" in [e["type"] for e in sub["events"]] else None

    sub = await until(traced, 30, f"{mid}'s trace with the copy passed over", interval=0.5)
    assert sub["state"] == "delivered", sub
    assert [e["type"] for e in sub["events"]].count("delivered") == 1, sub


async def _look(world: DeliveryWorld, rolled: dict[str, Any], lost: str) -> None:
    """The migration page in real Chromium: the state, a bar per stored window with the two
    dirty ones (the planted ids before the switch, the loss after it), the reason."""
    page_path = "/ui/projects/shop/topics/orders/migration"
    async with serve_app(world.app) as url, async_page(url, ADMIN, page_path) as page:
        assert await page.locator("#state").get_attribute("data-state") == "rolled_back"
        assert await page.locator("#windows").is_visible()
        assert await page.locator("#windows g.window").count() >= len(rolled["windows"])
        assert await page.locator("#windows g.window.dirty").count() >= 2
        assert lost in await page.locator("#reason").inner_text()
        await page.screenshot(path=str(SHOTS / "15-migration.png"), full_page=True)


async def _past(world: DeliveryWorld, *states: str) -> dict[str, Any] | None:
    """The migration once its state is none of ``states``."""
    found = await _state(world)
    return None if found["state"] in states else found
