"""The verified migration's object and API (docs/migrating.md) on the embedded metastore,
with an adopted topic over an embedded store (the external store wraps any store): validation
answers stable codes, the dual write sends publishes to the shadow segment while the legacy
topic stays untouched, abandon sends producers back to being refused, and the check's
windows are stored bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from control_plane.app import create_app as create_cp
from control_plane.leaders.migration_check import Sides, store_windows
from control_plane.settings import ControlPlaneSettings
from core import envelope
from core.migration import MAX_IDS, MAX_WINDOWS, MigrationWindow
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from metastore.migrations import MigrationRecords
from producer_api.app import create_app as create_producer
from producer_api.settings import ProducerSettings
from reports.migration_windows import MigrationWindows
from segments.config import EmbeddedClusterConfig, KafkaClusterConfig
from segments.embedded import create_store
from segments.external import ExternalStore
from segments.protocol import Record, SegmentStore
from tests.support.migration_docs import window
from tests.support.until import until

TOKEN = "test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LEGACY = "legacy.orders"
MIGRATION = "/v1/projects/shop/topics/orders/migration"
PRODUCE = "/v1/projects/shop/topics/orders/produce"


@dataclass
class Env:
    reports: str  # the control plane's database_url
    cp: httpx.AsyncClient
    producer: httpx.AsyncClient
    meta: EmbeddedMetaStore
    legacy: SegmentStore  # the legacy topic's own store (its producers write it directly)
    target: SegmentStore


async def _client(stack: contextlib.AsyncExitStack, app: Any, base: str) -> httpx.AsyncClient:
    await stack.enter_async_context(app.router.lifespan_context(app))
    return await stack.enter_async_context(
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base, headers=AUTH)
    )


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    target_config = EmbeddedClusterConfig(path=str(tmp_path / "target.db"))
    legacy_config = EmbeddedClusterConfig(path=str(tmp_path / "legacy.db"))
    clusters: dict[str, Any] = {
        "embedded": target_config,
        # Declared read_only Kafka; its store here is the external view of an embedded one.
        "legacy": KafkaClusterConfig(read_only=True, id_header="event-id"),
    }
    async with contextlib.AsyncExitStack() as stack:
        meta = await stack.enter_async_context(EmbeddedMetaStore(str(tmp_path / "meta.db")))
        target = await stack.enter_async_context(create_store(target_config))
        legacy = await stack.enter_async_context(create_store(legacy_config))
        await legacy.create_topic(LEGACY, 2, retention_ms=3_600_000)
        stores = {"embedded": target, "legacy": ExternalStore(legacy, id_header="event-id")}
        cp_settings = ControlPlaneSettings(
            admin_token=TOKEN,
            clusters=clusters,
            member_id="cp",
            database_url=f"sqlite:///{tmp_path}/reports.db",
        )
        cp = await _client(stack, create_cp(cp_settings, metastore=meta, stores=stores), "http://c")
        p_settings = ProducerSettings(admin_token=TOKEN, clusters=clusters, member_id="p")
        app = create_producer(p_settings, metastore=meta, stores=stores)
        producer = await _client(stack, app, "http://p")
        assert (await cp.post("/v1/projects", json={"name": "shop"})).status_code == 201
        body = {"name": "orders", "partitions": 2, "cluster": "legacy", "external_topic": LEGACY}
        assert (await cp.post("/v1/projects/shop/topics", json=body)).status_code == 201
        body = {"name": "plain", "partitions": 1}
        assert (await cp.post("/v1/projects/shop/topics", json=body)).status_code == 201
        yield Env(cp_settings.database_url, cp, producer, meta, legacy, target)


def _error(r: httpx.Response, status: int, code: str, *words: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == code, body
    assert all(w in body["message"] for w in words), body


async def test_start_validates_with_stable_codes(env: Env) -> None:
    r = await env.cp.post(MIGRATION, json={"cluster": "nowhere"})
    _error(r, 422, "validation_failed", "cluster", "unknown", "embedded")
    r = await env.cp.post(MIGRATION, json={"cluster": "legacy"})
    _error(r, 422, "validation_failed", "cluster", "read_only")
    r = await env.cp.post(MIGRATION.replace("orders", "plain"), json={"cluster": "embedded"})
    _error(r, 422, "validation_failed", "external", "topic migrate")
    r = await env.cp.post(MIGRATION.replace("orders", "absent"), json={"cluster": "embedded"})
    _error(r, 404, "not_found", "absent")
    for bad in (
        {"cluster": "embedded", "window": "soon"},
        {"cluster": "embedded", "window": "0s"},
        {"cluster": "embedded", "window": "1m", "session_gap": "2m"},
        {"cluster": "embedded", "guard": "99d"},
        {"cluster": "embedded", "clean_windows": 0},
        {"cluster": "embedded", "partitions": 0},
        {"cluster": "embedded", "surprise": 1},
    ):
        r = await env.cp.post(MIGRATION, json=bad)
        assert r.status_code == 422 and r.json()["code"] == "validation_failed", (bad, r.text)
    _error(await env.cp.get(MIGRATION), 404, "not_found", "no migration")
    _error(await env.cp.delete(MIGRATION), 404, "not_found", "no migration")


async def test_dual_write_goes_to_the_shadow_segment_until_abandoned(env: Env) -> None:
    await env.legacy.produce(LEGACY, Record(b"before", headers=(("event-id", b"e0"),)))
    _error(await env.producer.post(PRODUCE, content=b"x"), 422, "validation_failed", "external")
    body = {"cluster": "embedded", "window": "10s", "session_gap": "2s", "clean_windows": 2}
    r = await env.cp.post(MIGRATION, json=body)
    assert r.status_code == 201, r.text
    started = r.json()
    assert started["state"] == "dual_write" and started["shadow_segment"] == 2
    assert (started["window_s"], started["session_gap_s"], started["clean_windows"]) == (10, 2, 2)
    assert started["partitions"] == 2 and started["guard_s"] == 3_600
    assert sum(started["legacy_start"].values()) == 1  # the legacy side is read from here
    # A second migration, or a cutover, waits for this one.
    _error(await env.cp.post(MIGRATION, json=body), 409, "migration_in_progress", "abandon")
    r = await env.cp.post(
        "/v1/projects/shop/topics/orders/cutover", json={"cluster": "embedded", "partitions": 1}
    )
    _error(r, 409, "migration_in_progress", "abandon")

    catalog = Catalog(env.meta)
    topic = await catalog.get_topic("shop", "orders")
    shadow = topic.segment(2)
    assert shadow is not None and shadow.dual_write and shadow.state.value == "pending"
    assert topic.produce_pointer is not None and topic.produce_pointer.segment_id == 1

    async def published() -> bool:
        r = await env.producer.post(PRODUCE, content=b"dual", headers={"X-Message-Id": "e1"})
        return r.status_code in (200, 201, 202)

    await until(published, 10, "the producer writes the shadow segment")
    stored = [m for p in range(2) for m in await env.target.read(shadow.storage_topic, p, 0)]
    assert stored and {m.value for m in stored} == {b"dual"}
    legacy = [m for p in range(2) for m in await env.legacy.read(LEGACY, p, 0, timeout=0.1)]
    assert [m.value for m in legacy] == [b"before"]  # httpbus never wrote the legacy topic

    r = await env.cp.delete(MIGRATION)
    assert r.status_code == 200 and r.json()["state"] == "abandoned", r.text
    assert (await env.cp.delete(MIGRATION)).json()["state"] == "abandoned"  # idempotent
    assert await env.target.partitions(shadow.storage_topic) is None  # its storage dropped

    async def refused() -> bool:
        r = await env.producer.post(PRODUCE, content=b"late")
        return r.status_code == 422 and "external" in r.json()["message"]

    await until(refused, 10, "producers are refused again")
    after = (await catalog.get_topic("shop", "orders")).segment(2)
    assert after is not None and not after.dual_write  # the id stays taken
    again = await env.cp.post(MIGRATION, json=body)
    assert again.status_code == 201 and again.json()["shadow_segment"] == 3, again.text


def _window(i: int, *, closed: bool = True, missing: int = 0) -> MigrationWindow:
    ids = [f"m{i}-{n}" for n in range(missing)]
    return MigrationWindow(
        start_ms=i * 1_000,
        end_ms=(i + 1) * 1_000,
        matched=5,
        late=0,
        missing_in_bus=missing,
        missing_in_legacy=0,
        duplicates=0,
        closed=closed,
        missing_in_bus_ids=ids,
    )


async def test_check_rounds_are_stored_bounded_and_closed_verdicts_kept(env: Env) -> None:
    r = await env.cp.post(MIGRATION, json={"cluster": "embedded", "clean_windows": 2})
    assert r.status_code == 201, r.text
    records = MigrationRecords(env.meta)

    def now() -> datetime:
        return datetime.now(UTC)

    await records.record_check("shop", "orders", [_window(0), _window(1, closed=False)], now)
    # The next round saw window 0 differently (a late read): its closed verdict stands; the
    # open window 1 takes the new one, dirty, with its ids capped.
    fresh = [_window(0, missing=1), _window(1, missing=MAX_IDS + 5), _window(2), _window(3)]
    await records.record_check("shop", "orders", fresh, now)
    shown = (await env.cp.get(MIGRATION)).json()
    first, second = shown["windows"][:2]
    assert first["clean"] and first["missing_in_bus"] == 0
    assert not second["clean"] and second["missing_in_bus"] == MAX_IDS + 5
    assert len(second["missing_in_bus_ids"]) == MAX_IDS
    assert shown["clean_streak"] == 2 and shown["checked_at"] is not None
    # The batch re-run judges every window again.
    await records.record_check("shop", "orders", [_window(0, missing=1)], now, rerun=True)
    shown = (await env.cp.get(MIGRATION)).json()
    assert [w["missing_in_bus_ids"] for w in shown["windows"]] == [["m0-0"]]
    many = [_window(i) for i in range(MAX_WINDOWS + 30)]
    await records.record_check("shop", "orders", many, now, rerun=True)
    shown = (await env.cp.get(MIGRATION)).json()
    assert len(shown["windows"]) == MAX_WINDOWS
    assert shown["windows"][0]["start_ms"] == 30_000  # the newest ones are kept


async def test_past_the_switch_it_cannot_be_abandoned(env: Env) -> None:
    r = await env.cp.post(MIGRATION, json={"cluster": "embedded"})
    assert r.status_code == 201, r.text
    await MigrationRecords(env.meta).change("shop", "orders", {"state": "guard"})
    _error(await env.cp.delete(MIGRATION), 409, "migration_in_progress", "guard", "rolls")


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def _facts(start_ms: int, *, missing: list[str] | None = None) -> MigrationWindow:
    """A closed window as the check would store it (the facts the leader decides on)."""
    return window(start_ms, 10_000, missing=missing or [])


async def _ids_from(store: SegmentStore, name: str, starts: dict[int, int]) -> list[str]:
    out = []
    for p, start in starts.items():
        for msg in await store.read(name, p, start, timeout=0.1):
            out.append(envelope.header(msg.headers, envelope.MESSAGE_ID) or "")
    return out


async def _legacy(env: Env, *ids: str) -> None:
    for mid in ids:  # the legacy producers: partition 0, the id in their header
        await env.legacy.produce(
            LEGACY, Record(mid.encode(), headers=(("event-id", mid.encode()),)), partition=0
        )


async def _state(env: Env, state: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found: dict[str, Any] = (await env.cp.get(MIGRATION)).json()
        return found if found["state"] == state else None

    return await until(reached, 30, f"the migration in {state}", interval=0.1)


async def test_the_leader_switches_after_clean_windows_and_rolls_back_on_a_loss(env: Env) -> None:
    body = {"cluster": "embedded", "window": "10s", "session_gap": "1s", "clean_windows": 2}
    assert (await env.cp.post(MIGRATION, json=body)).status_code == 201
    records, catalog = MigrationRecords(env.meta), Catalog(env.meta)
    await _legacy(env, "a", "b", "c")
    for mid in ("a", "b", "c", "d"):  # d: the legacy copy comes after the switch
        r = await env.producer.post(PRODUCE, content=mid.encode(), headers={"X-Message-Id": mid})
        assert r.status_code in (200, 201, 202), r.text
    t0 = _now_ms() - 30_000
    await records.record_check("shop", "orders", [_facts(t0)], _now)
    await asyncio.sleep(1.5)  # proves a negative: one clean window does not switch
    assert (await env.cp.get(MIGRATION)).json()["state"] == "dual_write"
    await records.record_check("shop", "orders", [_facts(t0 + 10_000)], _now)
    switched = await _state(env, "guard")
    topic = await catalog.get_topic("shop", "orders")
    shadow = topic.segment(2)
    assert topic.produce_pointer is not None and topic.produce_pointer.segment_id == 2
    assert shadow is not None and shadow.state.value == "active"
    external = topic.segment(1)
    assert external is not None and external.state.value == "sealed"
    ends = {int(p): e for p, e in switched["switch_ends"].items()}
    assert external.end_positions == ends and ends[0] == 3 and not ends.get(1)
    assert shadow.start_positions == {int(p): s for p, s in switched["shadow_starts"].items()}
    read = await _ids_from(env.target, shadow.storage_topic, shadow.start_positions or {})
    delivered = [mid for mid in read if mid not in shadow.skip_ids]
    assert delivered == ["d"]  # its legacy copy lies past E: the shadow segment delivers it
    assert switched["switch_skipped"] == len(shadow.skip_ids) and not switched["switch_duplicates"]

    # After the switch: d again on the legacy side, e on both, f lost by httpbus, g on both.
    await _legacy(env, "d", "e", "f", "g")
    for mid in ("e", "g"):
        r = await env.producer.post(PRODUCE, content=mid.encode(), headers={"X-Message-Id": mid})
        assert r.status_code in (200, 201, 202), r.text
    await records.record_check("shop", "orders", [_facts(_now_ms() - 1_000, missing=["f"])], _now)
    rolled = await _state(env, "rolled_back")
    assert "f" in rolled["reason"] and rolled["rollback_segment"] == 3
    topic = await catalog.get_topic("shop", "orders")
    back = topic.segment(3)
    assert back is not None and back.storage_topic == LEGACY and back.state.value == "active"
    # Partition 0 again from f, partition 1 at its end; g, delivered from the shadow
    # segment already, is passed over.
    legacy = await env.legacy.read(LEGACY, 0, 0, timeout=0.1)
    f_at = next(m.position for m in legacy if m.value == b"f")
    assert back.start_positions == {0: f_at, 1: 0}
    assert back.skip_ids == ("g",) and rolled["rollback_skipped"] == 1
    assert rolled["rollback_duplicates"] == 0
    r = await env.producer.post(PRODUCE, content=b"x")
    assert r.status_code == 422, r.text  # the legacy producers write the topic again
    assert (await env.cp.get("/v1/projects/shop/topics/orders/cutover")).json()["phase"] in (
        "COMMIT",
        "COMPLETE",
    )


def _now() -> datetime:
    return datetime.now(UTC)


async def test_a_guard_period_that_ends_clean_completes_the_migration(env: Env) -> None:
    body = {
        "cluster": "embedded",
        "window": "1s",
        "session_gap": "0s",
        "clean_windows": 1,
        "guard": "1s",
    }
    assert (await env.cp.post(MIGRATION, json=body)).status_code == 201
    records = MigrationRecords(env.meta)
    await records.record_check("shop", "orders", [_facts(_now_ms() - 60_000)], _now)
    switched = await _state(env, "guard")

    async def checked_clean() -> dict[str, Any] | None:
        # The check keeps running; once a round ran after the guard period plus a window
        # and the gap, with nothing dirty in it, the leader completes the migration.
        await records.record_check("shop", "orders", [_facts(_now_ms() - 30_000)], _now)
        found: dict[str, Any] = (await env.cp.get(MIGRATION)).json()
        return found if found["state"] == "completed" else None

    done = await until(checked_clean, 30, "the migration completed", interval=0.2)
    assert done["finished_at"] is not None and done["switched_at"] == switched["switched_at"]
    topic = await Catalog(env.meta).get_topic("shop", "orders")
    assert topic.produce_pointer is not None and topic.produce_pointer.segment_id == 2
    assert (await env.cp.delete(MIGRATION)).json()["state"] == "completed"  # nothing to undo


async def test_every_window_a_round_stored_is_kept_in_the_report_database(env: Env) -> None:
    body = {"cluster": "embedded", "window": "10s", "session_gap": "1s", "clean_windows": 9}
    assert (await env.cp.post(MIGRATION, json=body)).status_code == 201
    found = await MigrationRecords(env.meta).get("shop", "orders")
    assert found is not None
    sides = Sides(found[0], cast(Any, None), cast(Any, None), _now_ms())
    history = MigrationWindows.from_url(env.reports)
    t0 = _now_ms() - 3_600_000
    many = [_facts(t0 + i * 10_000, missing=["lost"] if i == 1 else None) for i in range(3)]
    try:
        await store_windows(env.meta, sides, many, rerun=False, history=history)
        # A later round: window 2 is judged again (closed windows are kept unless a re-run).
        later = [_facts(t0 + 20_000, missing=["late-judged"]), _facts(t0 + 30_000)]
        await store_windows(env.meta, sides, later, rerun=False, history=history)
    finally:
        history.close()
    r = await env.cp.get(MIGRATION + "/windows")
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["migration"] == found[0].id
    starts = [w["start_ms"] for w in got["windows"]]
    assert starts == [t0 + i * 10_000 for i in range(4)]
    assert got["windows"][1]["missing_in_bus_ids"] == ["lost"] and not got["windows"][1]["clean"]
    assert got["windows"][2]["missing_in_bus_ids"] == []  # as the migration kept it
    r = await env.cp.get(MIGRATION + "/windows", params={"since_ms": t0 + 30_000, "limit": 5})
    assert [w["start_ms"] for w in r.json()["windows"]] == [t0 + 30_000]
    r = await env.cp.get(MIGRATION.replace("orders", "plain") + "/windows")
    _error(r, 404, "not_found", "no migration")
    r = await env.cp.get(MIGRATION + "/windows", params={"limit": 0})
    assert r.status_code == 422 and r.json()["code"] == "validation_failed", r.text
