"""Cutovers of a live topic on real ZooKeeper, Kafka and Pulsar, with three producer
processes under a load of 200 groups: Kafka(4) → Pulsar(8) → Kafka(2), then the faults.
After each: every message that got a 2xx is delivered, per group in sequence order, across
every segment (read the way a worker does, advancing only past sealed, committed segments).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.app import create_app as create_control_plane
from control_plane.leaders.cutover_coordinator import CutoverCoordinator
from control_plane.services.cutovers import Cutovers
from control_plane.settings import ControlPlaneSettings
from core.model import Backend, Project, SegmentState, Subscription, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from producer_api.app import create_app as create_producer
from producer_api.settings import ProducerSettings
from segments.cutover.machine import Phase, Timeouts
from segments.protocol import SegmentStore
from segments.registry import open_stores
from tests.support.control_plane import app_client
from tests.support.cutover import (
    ADMIN,
    Load,
    LoadProcess,
    Worker,
    check_delivery,
    clusters,
    consume_all,
    pause_report,
    producer_settings,
    timeline,
)
from tests.support.leaders import leader_context
from tests.support.processes import ProducerProcess, producer_processes
from tests.support.services import RealServices
from tests.support.stacks import stacks_on_overrun
from tests.support.world import segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar]

TOPIC = "orders"
PRODUCE = f"/v1/projects/shop/topics/{TOPIC}/produce"
CUTOVER = f"/v1/projects/shop/topics/{TOPIC}/cutover"
TIMEOUTS = Timeouts(prepare_s=20.0, switch_s=4.0, complete_s=20.0)


class World:
    def __init__(self, real: RealServices, root: str, catalog: Catalog, stores: Any) -> None:
        self.real, self.root, self.catalog = real, root, catalog
        self.stores: dict[str, SegmentStore] = stores
        self.sub: Subscription | None = None

    async def delivered(self) -> dict[str, list[int]]:
        assert self.sub is not None
        return await consume_all(self.catalog, self.stores, self.sub)

    async def pointer(self) -> int:
        topic = await self.catalog.get_topic("shop", TOPIC)
        assert topic.produce_pointer is not None
        return topic.produce_pointer.segment_id


@pytest.fixture
async def world(real_services: RealServices, unique: str) -> AsyncIterator[World]:
    root = f"/cutover-{unique}"
    async with contextlib.AsyncExitStack() as stack:
        meta = await stack.enter_async_context(
            open_metastore(ZooKeeperConfig(hosts=real_services.zookeeper, root=root))
        )
        stores = await open_stores(stack, clusters(real_services))
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        first = segment("kafka-main", storage=f"it.cutover.{unique}.s1", partitions=4)
        await stores["kafka-main"].create_topic(first.storage_topic, 4, retention_ms=3_600_000)
        await catalog.create_topic(Topic(project="shop", name=TOPIC, grouped=True), first)
        world = World(real_services, root, catalog, stores)
        world.sub = await catalog.create_subscription(
            Subscription(
                project="shop",
                name="audit",
                topic_project="shop",
                topic=TOPIC,
                endpoint={"url": "http://127.0.0.1:9/unused"},  # type: ignore[arg-type]
                signing_secret="whsec_" + "x" * 40,
            )
        )
        try:
            yield world
        finally:
            topic = await catalog.get_topic("shop", TOPIC)
            for seg in topic.segments:
                with contextlib.suppress(Exception):
                    await stores[seg.cluster].delete_topic(seg.storage_topic)


@pytest.fixture
def producers(world: World, unique: str, tmp_path: Path) -> Iterator[list[ProducerProcess]]:
    settings = [producer_settings(world.real, world.root, f"p{i}-{unique}") for i in range(3)]
    with producer_processes(settings, tmp_path) as procs:
        try:
            yield procs
        finally:
            for proc in procs:  # a test may have paused one (SIGSTOP)
                if proc.proc is not None and proc.proc.poll() is None:
                    os.kill(proc.proc.pid, signal.SIGCONT)


@pytest.fixture
def start_load(tmp_path: Path) -> Iterator[Any]:
    """Start a load process against some producers (killed at the end whatever happens)."""
    started: list[LoadProcess] = []

    def start(urls: list[str], groups: int = 200) -> LoadProcess:
        started.append(LoadProcess(urls, PRODUCE, tmp_path, groups=groups))
        return started[-1]

    yield start
    for load in started:
        load.kill()


@contextlib.asynccontextmanager
async def control_plane(world: World) -> AsyncIterator[httpx.AsyncClient]:
    settings = ControlPlaneSettings(
        admin_token=ADMIN,
        metastore=ZooKeeperConfig(hosts=world.real.zookeeper, root=world.root),
        clusters=clusters(world.real),
        default_cluster="kafka-main",
        member_id="cp-main",
        cutover_prepare_timeout_s=TIMEOUTS.prepare_s,
        cutover_switch_timeout_s=TIMEOUTS.switch_s,
        cutover_complete_timeout_s=TIMEOUTS.complete_s,
    )
    app = create_control_plane(settings, stores=world.stores)
    async with app_client(app, token=ADMIN) as c:
        yield c


@contextlib.asynccontextmanager
async def coordinator(world: World, member: str) -> AsyncIterator[tuple[Cutovers, Any]]:
    """A coordinator on a ZooKeeper session of its own (closing it is its death)."""
    config = ZooKeeperConfig(hosts=world.real.zookeeper, root=world.root)
    async with open_metastore(config) as meta:
        cutovers = Cutovers(meta, Catalog(meta), clusters(world.real), TIMEOUTS, "it")
        coord = CutoverCoordinator(leader_context(meta, world.stores, member, cutovers))
        async with coord:
            yield cutovers, coord


async def wait_phase(read: Any, phases: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        doc = await read()
        if doc.get("phase") in phases:
            return dict(doc)
        assert asyncio.get_running_loop().time() < deadline, f"stuck: {doc}"
        await asyncio.sleep(0.02)


DONE = {"COMPLETE", "ROLLED_BACK", "ABORTED"}


async def finish(
    world: World, load: LoadProcess, extra: dict[str, list[int]] | None = None
) -> tuple[int, Load]:
    await asyncio.sleep(2)
    result = load.stop()
    acked = {**result.acked, **(extra or {})}
    delivered = await world.delivered()
    total = check_delivery(acked, delivered)
    print(f"\n{total} messages 2xx'd and delivered in group order; {result.refused()} refused")
    return total, result


async def test_kafka_to_pulsar_to_kafka_under_load(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    worker = Worker(world.catalog, world.stores)  # a real delivery runner, too
    hook = await worker.endpoint()
    hooked = await world.catalog.create_subscription(
        Subscription(
            project="shop",
            name="hook",
            topic_project="shop",
            topic=TOPIC,
            endpoint={"url": hook},  # type: ignore[arg-type]
            signing_secret="whsec_" + "y" * 40,
        )
    )
    await worker.start(hooked)
    try:  # closed whatever fails: its sockets would fail the teardown too
        total, result = await _two_cutovers_under_load(world, producers, start_load)
        # the worker delivers the same, and walks Kafka -> Pulsar -> Kafka by itself
        deadline = asyncio.get_running_loop().time() + 90
        while worker.count() < total or worker.runner.sub.consume_pointer.segment_id != 3:
            assert asyncio.get_running_loop().time() < deadline, (
                f"worker: {worker.count()} of {total}, at {worker.runner.sub.consume_pointer}"
            )
            await asyncio.sleep(0.2)
        check_delivery(result.acked, worker.received)
    finally:
        await worker.aclose()
    print(f"worker delivered {worker.count()} messages over segments 1 -> 2 -> 3")


async def _two_cutovers_under_load(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> tuple[int, Load]:
    """Kafka(4) -> Pulsar(8) -> Kafka(2) under 400 groups; every 2xx read back in order."""
    # On the shipped defaults (clusters() sets no fence_settle_s): the seal settles briefly
    # because every live producer drained, so the pause is short and nobody gets a 503.
    # 400 groups, each publishing about every 2 s: about 200 publishes/s over the 3 producers.
    load = start_load([p.url for p in producers], groups=400)
    docs = []
    async with control_plane(world) as cp:
        await asyncio.sleep(3)
        for cluster, partitions in (("pulsar-main", 8), ("kafka-main", 2)):
            r = await cp.post(CUTOVER, json={"cluster": cluster, "partitions": partitions})
            assert r.status_code == 202, r.text
            doc = await wait_phase(lambda: _json(cp.get(CUTOVER)), DONE)
            assert doc["phase"] == "COMPLETE", doc
            assert len(doc["producers"]) == 3 and doc["error"] is None, _why(world, doc, producers)
            docs.append(doc)
            await asyncio.sleep(3)
    total, result = await finish(world, load)
    for doc in docs:
        print(pause_report(result, doc))
    for doc in docs:
        print(timeline(doc))
    assert result.refused() == 0, ([s for s in result.samples if s[2] != 201][:20], result.errors)
    topic = await world.catalog.get_topic("shop", TOPIC)
    assert [(s.id, s.state, s.partitions) for s in topic.segments] == [
        (1, SegmentState.SEALED, 4),
        (2, SegmentState.SEALED, 8),
        (3, SegmentState.ACTIVE, 2),
    ]
    assert [s.backend for s in topic.segments] == [Backend.KAFKA, Backend.PULSAR, Backend.KAFKA]
    per_segment = {s: sum(1 for x in result.samples if x[3] == s) for s in (1, 2, 3)}
    assert all(per_segment.values()), per_segment
    assert total > 300
    return total, result


def _why(world: World, doc: dict[str, Any], producers: list[ProducerProcess]) -> str:
    """The cutover document, ZooKeeper's session expiries and each producer's warnings: a
    producer missing from a cutover is one whose membership ZooKeeper did not list."""
    lines = [f"cutover: {doc}", "zookeeper:", *world.real.expired_sessions()]
    for proc in producers:
        said = [ln for ln in proc.log.read_text().splitlines() if "WARNING" in ln or "ERROR" in ln]
        lines += [f"producer {proc.url} (exit {proc.proc and proc.proc.poll()}):", *said[-15:]]
    return "\n".join(lines)


async def _json(response: Any) -> dict[str, Any]:
    r = await response
    return dict(r.json())


async def test_producer_killed_during_prepare(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    load = start_load([p.url for p in producers])
    async with coordinator(world, "cp-a") as (cutovers, _):
        await asyncio.sleep(3)
        await cutovers.start("shop", TOPIC, "pulsar-main", 8)
        producers[2].kill()  # SIGKILL while the target is being prepared
        doc = await wait_phase(lambda: _public(cutovers), DONE, timeout=90)
    await finish(world, load)
    print(timeline(doc))
    # As designed: it goes on without the dead producer once its session expires, or, if
    # it had acknowledged PREPARE, SWITCH times out waiting for it and rolls back.
    assert doc["phase"] in ("COMPLETE", "ROLLED_BACK"), doc
    assert await world.pointer() == (2 if doc["phase"] == "COMPLETE" else 1)


async def _public(cutovers: Cutovers) -> dict[str, Any]:
    return (await cutovers.get("shop", TOPIC)).public()


async def test_producer_that_stops_answering_during_switch_rolls_back(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    victim = producers[2]
    assert victim.proc is not None
    load = start_load([p.url for p in producers[:2]])  # not the stopped one
    doc: dict[str, Any] = {}
    async with coordinator(world, "cp-a") as (cutovers, _):
        await asyncio.sleep(3)
        for _attempt in range(4):  # the victim must be stopped after PREPARE, before SWITCH
            state = await cutovers.start("shop", TOPIC, "pulsar-main", 8)
            member = f"p2-{world.root.rsplit('-', 1)[1]}"
            async for current in cutovers.records.watch("shop", TOPIC):
                assert current is not None
                acks = current.producers.get(member)
                if acks is not None and acks.prepared_at is not None or current.phase.value in DONE:
                    break
            os.kill(victim.proc.pid, signal.SIGSTOP)
            doc = await wait_phase(lambda: _public(cutovers), DONE, timeout=60)
            os.kill(victim.proc.pid, signal.SIGCONT)
            print(timeline(doc))
            if doc["phase"] == "ROLLED_BACK":
                break
            assert state.id == doc["id"]
        assert doc["phase"] == "ROLLED_BACK" and "SWITCH" in (doc["error"] or ""), doc
        old = doc["from_segment"]
        assert await world.pointer() == old
        await asyncio.sleep(2)
    _, result = await finish(world, load)
    resumed = [s for s in result.samples if s[2] == 201 and s[0] > _ts(doc, "ROLLED_BACK")]
    assert resumed and all(s[3] == old for s in resumed)  # writes resume on the old segment


def _ts(doc: dict[str, Any], phase: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(doc["phase_times"][phase]).timestamp()


async def test_coordinator_killed_between_seal_and_pointer_move(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    load = start_load([p.url for p in producers])
    sealed = asyncio.Event()
    async with coordinator(world, "cp-a") as (cutovers, first):

        async def die(*_: Any) -> None:
            sealed.set()
            await asyncio.Event().wait()  # dead before the transaction

        first.actions.move_pointer = die
        await asyncio.sleep(3)
        await cutovers.start("shop", TOPIC, "pulsar-main", 8)
        await asyncio.wait_for(sealed.wait(), 30)
        state = await cutovers.get("shop", TOPIC)
        assert state.phase is Phase.COMMIT and state.sealed_ends is not None
        assert await world.pointer() == 1
    async with coordinator(world, "cp-b") as (cutovers, _):
        doc = await wait_phase(lambda: _public(cutovers), DONE, timeout=60)
    print(timeline(doc))
    assert doc["phase"] == "COMPLETE", doc
    assert await world.pointer() == 2
    _, result = await finish(world, load)
    print(pause_report(result, doc))


async def test_producer_without_its_session_is_refused_by_the_fence(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    """An in-process producer whose ZooKeeper session is closed keeps its cached topic and
    writes the old segment; after the seal every such write gets a non-2xx."""
    # Under load this hung outside its own bound: a cancelled watch pump lost its
    # cancellation in Python 3.11's wait_for (tests/unit/test_no_wait_for.py). If it ever
    # overruns again, every thread's and task's stack is printed before pytest's timeout.
    with stacks_on_overrun(150, "the fence test"):
        async with asyncio.timeout(270):
            await _producer_without_its_session(world, producers, start_load)


async def _producer_without_its_session(
    world: World, producers: list[ProducerProcess], start_load: Any
) -> None:
    config = ZooKeeperConfig(hosts=world.real.zookeeper, root=world.root)
    meta = open_metastore(config)
    await meta.start()
    settings = ProducerSettings(
        admin_token=ADMIN, metastore=config, clusters=clusters(world.real), member_id="lost"
    )
    app = create_producer(settings, metastore=meta, stores=world.stores)
    load = start_load([p.url for p in producers])
    lost_acked: list[int] = []
    lost_after_seal: list[tuple[int, str]] = []
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {ADMIN}", "X-Group-Id": "lost"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://lost", headers=headers
        ) as c:
            assert (await c.post(PRODUCE, content=b"lost:0")).status_code == 201
            lost_acked.append(0)
            await meta.aclose()  # partitioned: its membership is gone, its cache stays
            async with coordinator(world, "cp-a") as (cutovers, _), asyncio.timeout(240):
                seq = 1
                # A loaded machine can make SWITCH time out (a rollback, as designed): then the
                # cutover is started again, since the fence is what this test is about.
                for attempt in range(3):
                    await cutovers.start("shop", TOPIC, "kafka-main", 2)
                    while True:
                        state = await cutovers.get("shop", TOPIC)
                        r = await c.post(PRODUCE, content=f"lost:{seq}".encode())
                        if r.status_code == 201:
                            assert r.json()["segment"] == 1  # it can only write the old one
                            lost_acked.append(seq)
                            seq += 1
                        elif state.sealed_ends is not None:
                            lost_after_seal.append((r.status_code, r.json().get("code", "")))
                        phase = state.phase.value
                        if phase in DONE and (phase != "COMPLETE" or len(lost_after_seal) >= 5):
                            break
                        await asyncio.sleep(0.02)
                    if phase == "COMPLETE":
                        break
                    print(f"cutover attempt {attempt + 1} ended {phase}; starting it again")
                doc = state.public()
    await finish(world, load, {"lost": lost_acked})
    print(timeline(doc), f"\nlost producer: {len(lost_acked)} 2xx, then {lost_after_seal}")
    assert doc["phase"] == "COMPLETE" and "lost" not in doc["producers"]
    assert lost_after_seal and all(s >= 400 for s, _ in lost_after_seal)
