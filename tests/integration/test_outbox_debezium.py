"""The transactional outbox end to end: PostgreSQL + Debezium (the relay) + httpbus on Kafka.

Five writers put 50 aggregates × 40 events into an outbox table, a few events of a few
aggregates per transaction, and roll back one transaction in five (every other transaction
also deletes its rows before committing). The relay (Debezium's
embedded engine reading the table by logical replication, in its own process) is killed with
SIGKILL twice while it posts and started again. Every committed event reaches the endpoint,
none of the rolled-back ones, each aggregate's events in commit order, each exactly once
(Kafka holds each once too); the replays that the kills caused were answered
``duplicate: true`` (the relay's log counts them).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from core.model import Subscription
from reports import migrate
from tests.support.processes import (
    ProducerProcess,
    RelayProcess,
    free_port,
    producer_processes,
)
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import Running, World, kafka_world, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.postgres]

ADMIN = "outbox-admin-token-0123456789"
AGGREGATES, PER_AGGREGATE, WRITERS, PHASES = 50, 40, 5, 3
ROLLBACK = 0.2
TABLE = "public.outbox"


@dataclass(frozen=True)
class Txn:
    events: list[tuple[str, str, int]]  # (event id, aggregate id, its sequence number)
    commit: bool


def _plan(seed: int) -> list[list[Txn]]:
    """Each writer's transactions: a writer owns every WRITERS-th aggregate (so an aggregate's
    commit order is its sequence order); a transaction takes 1 to 3 events of 1 to 3 of them."""
    rng = random.Random(seed)
    plans: list[list[Txn]] = []
    for w in range(WRITERS):
        left = {f"agg-{a:02d}": 0 for a in range(w, AGGREGATES, WRITERS)}
        txns: list[Txn] = []
        while left:
            events = []
            for agg in rng.sample(sorted(left), min(len(left), rng.randint(1, 3))):
                for _ in range(rng.randint(1, 3)):
                    if left[agg] < PER_AGGREGATE:
                        events.append((str(uuid.uuid4()), agg, left[agg]))
                        left[agg] += 1
                if left[agg] == PER_AGGREGATE:
                    del left[agg]
            txns.append(Txn(events, rng.random() >= ROLLBACK))
        plans.append(txns)
    return plans


def _write(url: str, txns: list[Txn]) -> None:
    """Every other transaction deletes its outbox rows before it commits, as services that
    keep the table empty do: the deletes are no events, the inserts are."""
    with psycopg.connect(url) as conn:
        for i, txn in enumerate(txns):
            with conn.transaction(force_rollback=not txn.commit):
                cursor = conn.cursor()
                cursor.executemany(
                    f"INSERT INTO {TABLE} (id, aggregatetype, aggregateid, type, payload) "
                    "VALUES (%s, 'order', %s, 'order.step', %s::jsonb)",
                    [(e, a, json.dumps({"aggregate": a, "seq": s})) for e, a, s in txn.events],
                )
                if i % 2:
                    ids = [e for e, _, _ in txn.events]
                    cursor.execute(f"DELETE FROM {TABLE} WHERE id = ANY(%s::uuid[])", (ids,))


async def _write_phase(url: str, plans: list[list[Txn]], phase: int) -> None:
    def part(txns: list[Txn]) -> list[Txn]:
        size = -(-len(txns) // PHASES)
        return txns[phase * size : (phase + 1) * size]

    await asyncio.gather(*(asyncio.to_thread(_write, url, part(t)) for t in plans))


def _committed(plans: list[list[Txn]], phases: int) -> int:
    def count(txns: list[Txn]) -> int:
        size = -(-len(txns) // PHASES)
        return sum(len(t.events) for t in txns[: phases * size] if t.commit)

    return sum(count(t) for t in plans)


def _relay_settings(unique: str, database: str, producer: str, tmp: Path) -> dict[str, Any]:
    url = urlsplit(database)
    slot = f"httpbus_outbox_{unique}"
    return {
        "name": f"outbox-{unique}",
        "producer_url": producer,
        "produce_token": ADMIN,
        "project": "p",
        "topic": "t",
        "source": "/shop/orders",
        "database": {
            "host": url.hostname,
            "port": url.port,
            "user": url.username,
            "password": url.password or "",
            "dbname": url.path.lstrip("/"),
            "table": TABLE,
            "slot": slot,
            "publication": slot,
        },
        "offsets_file": str(tmp / "offsets.dat"),
        "offset_flush_s": 10.0,  # a kill loses up to 10 s of acknowledgements: replays
        "max_batch_size": 100,
        "poll_interval_s": 0.05,
    }


def _producer_settings(world: World, unique: str, database: str) -> dict[str, Any]:
    return {
        "admin_token": ADMIN,
        "metastore": world.zk.model_dump(),
        "clusters": {world.cluster: world.config.model_dump()},
        "member_id": f"outbox-{unique}",
        "dedupe": {"kind": "postgres", "url": database},
    }


def _slot(database: str, slot: str) -> tuple[bool, ...] | None:
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return None if row is None else tuple(row)


def _drop(database: str, slot: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active",
            (slot,),
        )
        conn.execute(f'DROP PUBLICATION IF EXISTS "{slot}"')


def _received(world: World) -> list[tuple[str, str, int]]:
    got = []
    for r in world.hook.on(""):
        assert r.body, f"an empty delivery: {dict(r.headers)}"
        doc = json.loads(r.body)
        got.append((r.id, doc["aggregate"], doc["seq"]))
    return got


def _create_outbox(database: str) -> None:
    """The report tables (the producer's dedupe ids) and the outbox table, empty."""
    migrate.upgrade(database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {TABLE} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, "
            "aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL)"
        )


@asynccontextmanager
async def _deduped_world(
    real_services: RealServices, unique: str, partitions: int
) -> AsyncIterator[tuple[World, Subscription]]:
    """Grouped topic p/t on Kafka, deduplicating ids for 10 minutes, and its subscription s."""
    async with kafka_world(real_services, unique, partitions=partitions, grouped=True) as world:
        topic = await world.catalog.get_topic("p", "t")
        await world.catalog.update_topic(topic.model_copy(update={"dedupe_window": "10m"}))
        yield world, await subscribe(world, "s")


@asynccontextmanager
async def _relay(
    world: World, unique: str, database: str, tmp_path: Path, **overrides: Any
) -> AsyncIterator[tuple[RelayProcess, str]]:
    """A producer process and a relay (not started) posting to it, with ``overrides`` of the
    relay's settings; the relay and its replication slot. On the way out the relay is
    killed, and its slot, once idle, dropped."""
    producer = [_producer_settings(world, unique, database)]
    with producer_processes(producer, tmp_path) as (proc,):
        settings = _relay_settings(unique, database, proc.url, tmp_path)
        slot = settings["database"]["slot"]
        relay = RelayProcess({**settings, **overrides}, tmp_path)
        try:
            yield relay, slot
        finally:
            relay.kill()
            await until(lambda: _slot(database, slot) != (True,), 30, "slot idle")
            _drop(database, slot)


async def test_committed_outbox_events_arrive_once_in_aggregate_order_through_two_kills(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    _create_outbox(postgres_database)
    plans = _plan(seed=37)
    committed = [e for txns in plans for t in txns if t.commit for e in t.events]
    rolled_back = {e[0] for txns in plans for t in txns if not t.commit for e in t.events}
    assert len(committed) + len(rolled_back) == AGGREGATES * PER_AGGREGATE

    async with _deduped_world(real_services, unique, partitions=4) as (world, sub):
        async with _relay(world, unique, postgres_database, tmp_path) as (relay, slot):
            async with Running(world, sub):
                await _run(world, relay, plans, postgres_database, slot)
                await until(
                    lambda: len(_received(world)) >= len(committed),
                    120,
                    f"all {len(committed)} committed events delivered",
                )
            assert relay.stop() == 0, relay.tail()
        assert _slot(postgres_database, slot) is None  # no slot left to hold the WAL

        received = _received(world)
        assert sorted(received) == sorted(committed)  # every committed event, each once
        assert not rolled_back & {r[0] for r in received}  # none rolled back
        order: dict[str, list[int]] = defaultdict(list)
        for _, agg, seq in received:
            order[agg].append(seq)
        wanted: dict[str, list[int]] = defaultdict(list)
        for _, agg, seq in committed:
            wanted[agg].append(seq)
        assert order == wanted  # each aggregate in commit order
        ends = await world.store.end_positions(world.storage)
        assert sum(ends.values()) == len(committed)  # the replays stored nothing
        assert relay.starts == 3
        # A batch cut short by a kill logs nothing, so the log counts fewer stores than there
        # were; never more (that would be an event stored twice).
        stored, duplicates = relay.figures("stored"), relay.figures("duplicates")
        print(f"relay log: stored={stored} duplicates={duplicates} of {len(committed)} committed")
        assert stored <= len(committed)
        assert duplicates > 0, "the kills caused no replay: nothing was tested"


async def _run(
    world: World, relay: RelayProcess, plans: list[list[Txn]], database: str, slot: str
) -> None:
    """The relay started, killed twice mid-stream and started again, around three phases of
    writes (the second written while the relay is down)."""

    def has(n: int) -> bool:
        return len(_received(world)) >= n

    relay.start()
    await until(lambda: _slot(database, slot) == (True,), 90, f"the relay's slot {slot} in use")
    await _write_phase(database, plans, 0)
    first = _committed(plans, 1)
    await until(lambda: has(first // 2), 60, f"half of phase 1's {first} events")
    relay.kill()
    await _write_phase(database, plans, 1)
    second = _committed(plans, 2)
    relay.start()
    await until(lambda: has((first + second) // 2), 90, "part of phase 2 after a restart")
    relay.kill()
    relay.start()
    await _write_phase(database, plans, 2)
    assert relay.alive(), relay.tail()


async def test_a_refused_event_stops_the_relay_and_the_fixed_relay_delivers_it(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    """httpbus refuses the relay (a wrong token: 401): the relay exits 1 naming the event and
    the answer, having acknowledged nothing; started again with the right token, it delivers
    every event, in order."""
    _create_outbox(postgres_database)
    events = [Txn([(str(uuid.uuid4()), "agg-1", s) for s in range(10)], commit=True)]
    async with _deduped_world(real_services, unique, partitions=2) as (world, sub):
        bad = {"produce_token": "not-the-token"}
        async with _relay(world, unique, postgres_database, tmp_path, **bad) as (relay, slot):
            async with Running(world, sub):
                relay.start()
                await until(lambda: _slot(postgres_database, slot) == (True,), 90, "slot")
                await asyncio.to_thread(_write, postgres_database, events)
                await until(lambda: relay.exit_code() is not None, 60, "the relay to stop")
                assert relay.exit_code() == 1
                first = events[0].events[0][0]
                assert f"refused outbox event {first} (aggregate agg-1) with 401" in (
                    relay.tail(20_000)
                )
                assert _received(world) == []
                relay.configure(produce_token=ADMIN)
                relay.start()
                await until(lambda: len(_received(world)) >= 10, 90, "the ten events")
            assert relay.stop() == 0, relay.tail()
        assert _received(world) == events[0].events


async def test_while_httpbus_is_down_the_relay_waits_and_loses_nothing(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    """The producer is not running when the events are committed: the relay tries again and
    again (acknowledging nothing) and, once the producer is up, delivers every event in
    aggregate order; its metrics count the tries and the events."""
    _create_outbox(postgres_database)
    txns = [
        Txn([(str(uuid.uuid4()), f"agg-{i % 2}", i // 2) for i in range(k * 4, k * 4 + 4)], True)
        for k in range(5)
    ]
    async with _deduped_world(real_services, unique, partitions=2) as (world, sub):
        producer = ProducerProcess(_producer_settings(world, unique, postgres_database), tmp_path)
        settings = _relay_settings(unique, postgres_database, producer.url, tmp_path)
        slot = settings["database"]["slot"]
        port = free_port()
        relay = RelayProcess({**settings, "retry_max_s": 1.0, "metrics_port": port}, tmp_path)
        try:
            async with Running(world, sub):
                relay.start()
                await until(lambda: _slot(postgres_database, slot) == (True,), 90, "slot")
                await asyncio.to_thread(_write, postgres_database, txns)
                await until(lambda: relay.tail().count("again in") >= 3, 60, "the relay's tries")
                assert relay.alive() and _received(world) == []
                producer.start(timeout=60)
                await until(lambda: len(_received(world)) >= 20, 90, "the twenty events")
                metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
                assert 'httpbus_outbox_events_total{outcome="stored"} 20.0' in metrics
                retries = re.search(r"^httpbus_outbox_retries_total (\S+)$", metrics, re.M)
                assert retries is not None and float(retries[1]) >= 3, metrics
            assert relay.stop() == 0, relay.tail()
        finally:
            relay.kill()
            producer.stop()
            await until(lambda: _slot(postgres_database, slot) != (True,), 30, "slot idle")
            _drop(postgres_database, slot)
        received = _received(world)
        assert sorted(received) == sorted(e for t in txns for e in t.events)
        for agg in ("agg-0", "agg-1"):
            assert [s for _, a, s in received if a == agg] == list(range(10))
