"""The archive: closed windows to Parquet, each message once, on a cursor; retention by date.

On the embedded store and a local folder (the integration test runs Kafka, Pulsar and an S3
server: tests/integration/test_archive_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.services.archive import archive_topic, load_state, objects_of, read_window
from core.archive import HOUR_MS, ArchiveSpec, ArchiveStorage, target_of, window_key
from core.errors import ValidationFailed
from core.model import Project, SegmentState, Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import Record, SegmentStore
from tests.support.world import record, segment

T0 = 1_780_000_000_000 - 1_780_000_000_000 % HOUR_MS  # an hour's start
GRACE = 60_000


def _record(mid: str, at: int) -> Record:
    return record(mid, "g", at=at, value=f"body-{mid}".encode())


async def _put(store: SegmentStore, name: str, mid: str, at: int) -> None:
    await store.produce(name, _record(mid, at), partition=0)


def test_archive_urls_and_where_they_may_go() -> None:
    assert target_of("s3://bkt/a/b").bucket == "bkt"
    assert target_of("file:///var/archive/x").prefix == "/var/archive/x"
    for bad in ("http://x/y", "s3:///nobucket", "file://host/x", "file:///a/../b", "s3://b/x?y"):
        with pytest.raises(ValueError):
            target_of(bad)
    storage = ArchiveStorage(s3_buckets=["ok"], local_root="/srv/archive")
    assert storage.refusal(target_of("s3://ok/p")) is None
    assert "not one of" in (storage.refusal(target_of("s3://other/p")) or "")
    assert "under" in (storage.refusal(target_of("file:///etc/x")) or "")
    assert "off" in (ArchiveStorage().refusal(target_of("file:///srv/x")) or "")
    with pytest.raises(ValueError, match="every must be"):
        ArchiveSpec(to="s3://ok/p", every="5h")
    with pytest.raises(ValidationFailed, match=r"archive\.to"):
        objects_of(ArchiveStorage(), ArchiveSpec(to="s3://ok/p"))
    assert window_key(T0 + 5 * HOUR_MS).endswith(f"/part-{T0 + 5 * HOUR_MS}.parquet")


async def test_closed_hours_once_each_across_segments_and_retention(tmp_path: Path) -> None:
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    storage = ArchiveStorage(local_root=str(tmp_path))
    spec = ArchiveSpec(to=f"file://{tmp_path}/arch", keep_days=1)
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta, create_store(cluster) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="p"))
        old = segment("embedded", 1, SegmentState.SEALED, storage="s1", partitions=1)
        new = segment("embedded", 2, SegmentState.ACTIVE, storage="s2", partitions=1)
        for s in (old, new):
            await store.create_topic(s.storage_topic, 1, retention_ms=0)
        # hour 0: a, b (and b again: a producer's retry); hour 1: c in s1, d in s2 (a cutover)
        for mid, at in (("a", T0 + 1), ("b", T0 + 2), ("b", T0 + 3), ("c", T0 + HOUR_MS + 5)):
            await _put(store, "s1", mid, at)
        await _put(store, "s2", "d", T0 + HOUR_MS + 10)
        ends = await store.end_positions("s1")
        old = old.model_copy(update={"end_positions": ends})
        await catalog.create_topic(Topic(project="p", name="t", archive=spec), old)
        await catalog.add_segment("p", "t", new)
        topic = await catalog.get_topic("p", "t")
        objects = objects_of(storage, spec)
        stores = {"embedded": store}

        # The first hour is not closed until its end plus the grace.
        done = await archive_topic(topic, spec, objects, stores, T0 + HOUR_MS + GRACE - 1, GRACE)
        assert done.written == []
        done = await archive_topic(topic, spec, objects, stores, T0 + HOUR_MS + GRACE, GRACE)
        assert [(w.start_ms, w.messages, w.duplicates) for w in done.written] == [(T0, 2, 1)]
        # Hour 2 arrives later; hour 1 (both segments) and hour 2 are written once each.
        await _put(store, "s2", "e", T0 + 2 * HOUR_MS + 1)
        now = T0 + 3 * HOUR_MS + GRACE
        done = await archive_topic(topic, spec, objects, stores, now, GRACE)
        assert [(w.start_ms, w.messages) for w in done.written] == [
            (T0 + HOUR_MS, 2),
            (T0 + 2 * HOUR_MS, 1),
        ]
        assert await archive_topic(topic, spec, objects, stores, now, GRACE) == type(done)([], [])
        state = await load_state(objects)
        ids = [[r["id"] for r in await read_window(objects, w)] for w in state.windows]
        assert ids == [["a", "b"], ["c", "d"], ["e"]]
        rows = await read_window(objects, state.windows[1])
        assert rows[1]["segment"] == 2 and rows[1]["payload"] == b"body-d"
        assert rows[0]["produced_at"] == T0 + HOUR_MS + 5 and rows[0]["group"] == "g"
        assert (tmp_path / "arch" / state.windows[0].key).exists()

        # Empty hours are skipped; a late message for a closed hour goes into the next file.
        await _put(store, "s2", "late", T0 + 2 * HOUR_MS + 7)
        await _put(store, "s2", "f", T0 + 6 * HOUR_MS + 1)
        done = await archive_topic(topic, spec, objects, stores, T0 + 7 * HOUR_MS + GRACE, GRACE)
        assert [(w.start_ms, w.messages) for w in done.written] == [
            (T0 + 3 * HOUR_MS, 1),
            (T0 + 6 * HOUR_MS, 1),
        ]

        # keep_days 1: two days on, every window of the first date is deleted, file and entry.
        later = T0 + 3 * 24 * HOUR_MS
        done = await archive_topic(topic, spec, objects, stores, later, GRACE)
        assert len(done.deleted) == 5
        assert (await load_state(objects)).windows == []
        assert not (tmp_path / "arch" / state.windows[0].key).exists()


async def test_the_api_sets_checks_and_lists_an_archive_the_leader_writes(tmp_path: Path) -> None:
    import time

    from tests.support.control_plane import embedded_control_plane
    from tests.support.until import until

    settings = {"archive": {"local_root": str(tmp_path / "root"), "interval_s": 0.1}}
    async with embedded_control_plane(tmp_path, **settings) as cp:
        client = cp.client
        assert (await client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        refused = await client.post(
            "/v1/projects/shop/topics",
            json={"name": "orders", "archive": {"to": "file:///etc/orders"}},
        )
        assert refused.status_code == 422, refused.text
        assert "archive.to" in refused.json()["message"]
        bad = {"name": "orders", "archive": {"to": "ftp://x/y"}}
        assert (await client.post("/v1/projects/shop/topics", json=bad)).status_code == 422
        plain = await client.post("/v1/projects/shop/topics", json={"name": "plain"})
        none = await client.get("/v1/projects/shop/topics/plain/archive")
        assert plain.status_code == 201 and none.status_code == 404
        assert "--archive-to" in none.json()["message"]

        to = f"file://{tmp_path}/root/orders"
        created = await client.post(
            "/v1/projects/shop/topics",
            json={"name": "orders", "archive": {"to": to, "keep_days": 30}},
        )
        assert created.status_code == 201, created.text
        listing = (await client.get("/v1/projects/shop/topics/orders/archive")).json()
        assert listing["windows"] == [] and listing["every"] == "1h"

        # Two messages accepted two hours ago: a closed hour the leader archives.
        now = int(time.time() * 1000)
        past = now - now % HOUR_MS - 2 * HOUR_MS
        name = created.json()["segments"][0]["storage_topic"]
        # In one transaction: the archiver (every 0.1 s) ran between two produces under load
        # and wrote the hour as two windows of one message each.
        stored = await cp.store.produce_many(name, [_record("a", past + 1), _record("b", past + 2)])
        assert not [r for r in stored if isinstance(r, Exception)]

        async def archived() -> list[dict[str, object]]:
            r = await client.get("/v1/projects/shop/topics/orders/archive")
            return list(r.json()["windows"])

        windows = await until(archived, 20, "the archiver's first window")
        assert [(w["messages"], w["bytes"] > 0) for w in windows] == [(2, True)]
        assert (tmp_path / "root" / "orders" / str(windows[0]["key"])).exists()

        # A state file that is not one (cut short, edited by hand) is a 503 naming it, not a 500.
        (tmp_path / "root" / "orders" / "_httpbus_archive.json").write_text('{"windows": [')
        r = await client.get("/v1/projects/shop/topics/orders/archive")
        assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", r.text
        assert "_httpbus_archive.json is not an archive state" in r.json()["message"]
