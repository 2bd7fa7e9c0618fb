"""Window replays (docs/archive.md, "Replay into one subscription") on the embedded store and a
local archive: the window collected from the archive and from storage past its cursor, each
message once, in storage order; the API's answers; the replayer writing it, marked, into the
subscription's replay topic (a real worker delivers it: tests/integration/test_replay_real.py)."""

from __future__ import annotations

import time
from pathlib import Path

from control_plane.services import replays
from control_plane.services.archive import archive_topic, objects_of
from core.archive import HOUR_MS, ArchiveSpec, ArchiveStorage, iso
from core.envelope import REPLAY, header
from core.model import Project, SegmentState, Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from tests.support.control_plane import embedded_control_plane
from tests.support.until import until
from tests.support.world import record, segment

T0 = 1_780_000_000_000 - 1_780_000_000_000 % HOUR_MS


async def test_the_window_from_the_archive_and_storage_once_in_storage_order(
    tmp_path: Path,
) -> None:
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    storage = ArchiveStorage(local_root=str(tmp_path))
    spec = ArchiveSpec(to=f"file://{tmp_path}/arch")
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta, create_store(cluster) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="p"))
        seg = segment("embedded", 1, SegmentState.ACTIVE, storage="s1", partitions=2)
        await store.create_topic("s1", 2, retention_ms=0)
        # before the window; hour 0 (archived); hour 1 (storage only), b2 stored twice; after
        plan = [
            ("early", T0 - 10 * 60_000, "a", 0),
            ("a1", T0 + 1, "a", 0), ("b1", T0 + 2, "b", 1), ("a2", T0 + 3, "a", 0),
            ("b2", T0 + HOUR_MS + 1, "b", 1), ("a3", T0 + HOUR_MS + 2, "a", 0),
            ("b2", T0 + HOUR_MS + 3, "b", 1),
            ("late", T0 + 2 * HOUR_MS + 5, "a", 0),
        ]  # fmt: skip
        for mid, at, group, p in plan:
            await store.produce("s1", record(mid, group, at=at), partition=p)
        topic = Topic(project="p", name="t", archive=spec, segments=(seg,))
        await catalog.create_topic(topic.model_copy(update={"segments": ()}), seg)
        topic = await catalog.get_topic("p", "t")
        objects = objects_of(storage, spec)
        done = await archive_topic(
            topic, spec, objects, {"embedded": store}, T0 + HOUR_MS + 60_000, 60_000
        )
        assert [w.start_ms for w in done.written] == [T0 - HOUR_MS, T0]

        window = await replays.collect(topic, {"embedded": store}, storage, T0, T0 + 2 * HOUR_MS)
        got = [(m.value.decode(), origin) for m, origin in window.messages]
        # storage order: partition 0's then partition 1's; every group in its order; once each
        assert got == [
            ("a1", "1:0:1"), ("a2", "1:0:2"), ("a3", "1:0:3"), ("b1", "1:1:0"), ("b2", "1:1:1"),
        ]  # fmt: skip
        assert (window.from_archive, window.from_storage) == (3, 2)
        # No archive: storage alone gives the same window.
        bare = topic.model_copy(update={"archive": None})
        alone = await replays.collect(bare, {"embedded": store}, storage, T0, T0 + 2 * HOUR_MS)
        assert [m.value for m, _ in alone.messages] == [m.value for m, _ in window.messages]


async def test_replay_through_the_api_into_the_replay_topic_of_one_subscription(
    tmp_path: Path,
) -> None:
    settings = {"archive": {"local_root": str(tmp_path / "root")}}
    async with embedded_control_plane(tmp_path, **settings) as cp:
        client = cp.client
        assert (await client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        created = await client.post("/v1/projects/shop/topics", json={"name": "orders"})
        name = created.json()["segments"][0]["storage_topic"]
        now = int(time.time() * 1000)
        past = now - now % HOUR_MS - 3 * HOUR_MS
        for i in range(5):
            await cp.store.produce(name, record(f"m{i}", "g", at=past + i), partition=0)
        for sub in ("one", "other"):
            body = {"name": sub, "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/x"}}
            assert (
                await client.post("/v1/projects/shop/subscriptions", json=body)
            ).status_code == 201
        url = "/v1/projects/shop/subscriptions/one/replay"
        assert (await client.get(url)).status_code == 404
        window = {"since": iso(past), "until": iso(past + HOUR_MS), "rate": 2}
        wrong = await client.post(url, json={**window, "until": iso(past)})
        assert wrong.status_code == 422, wrong.text
        missing = await client.post("/v1/projects/shop/subscriptions/nope/replay", json=window)
        assert missing.status_code == 404
        r = await client.post(url, json=window)
        assert r.status_code == 202, r.text
        assert r.json()["state"] == "pending" and r.json()["subscription"] == "shop/one"
        busy = await client.post(url, json=window)
        assert busy.status_code == 409 or (await client.get(url)).json()["state"] == "done"

        async def done() -> dict[str, object] | None:
            found = (await client.get(url)).json()
            return found if found["state"] == "done" else None

        found = await until(done, 30, "the replay done")
        assert (found["total"], found["written"], found["from_storage"]) == (5, 5, 5)
        sub = await cp.catalog.get_subscription("shop", "one")
        layout = await load_layout(cp.meta, sub)
        assert layout is not None
        stored = await cp.store.read(layout.replay, 0, 0, max_records=10)
        assert [m.value for m in stored] == [f"m{i}".encode() for i in range(5)]
        assert all(header(m.headers, REPLAY) == "true" for m in stored)
        assert all(dlq.replay_kind(m) == dlq.WINDOW for m in stored)
        other = await cp.catalog.get_subscription("shop", "other")
        assert await load_layout(cp.meta, other) is None  # the other subscription: nothing
        again = await client.post(url, json=window)  # a finished replay may be asked again
        assert again.status_code == 202


async def test_the_ui_replays_a_window_and_shows_its_progress(tmp_path: Path) -> None:
    from tests.support.control_plane import AUTH, create_shop
    from tests.support.ui_pages import csrf, login

    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        ui = cp.client
        ui.headers.update(AUTH)
        await create_shop(ui, partitions=1)
        sub = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/h"}}
        assert (await ui.post("/v1/projects/shop/subscriptions", json=sub)).is_success
        del ui.headers["Authorization"]  # the browser has a session, not the token
        await login(ui)
        page = "/ui/projects/shop/subscriptions/s1"
        assert 'id="replay"' in (await ui.get(page)).text
        assert 'id="replay-status"' not in (await ui.get(page)).text
        token = await csrf(ui, page)
        window = {"since": "2026-01-01T00:00", "until": "2026-01-01T03:00", "rate": "50"}
        r = await ui.post(f"{page}/replay", data={"csrf": token, **window}, follow_redirects=True)
        assert "of the messages accepted between 2026-01-01T00:00:00Z and" in r.text
        assert 'id="replay-status"' in r.text and "at 50/s" in r.text

        async def shown_done() -> bool:
            return "<strong>done</strong>" in (await ui.get(page)).text

        await until(shown_done, 30, "the page shows the replay done")
        r = await ui.post(
            f"{page}/replay", data={"csrf": token, "since": ""}, follow_redirects=True
        )
        assert "give both times" in r.text
        backwards = {**window, "since": window["until"], "until": window["since"]}
        r = await ui.post(
            f"{page}/replay", data={"csrf": token, **backwards}, follow_redirects=True
        )
        assert "nothing replayed: since must be before until" in r.text
