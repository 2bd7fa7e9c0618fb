"""The MetaStore contract against the embedded SQLite store, plus what only it does:
several stores (threads or processes) on one file, and sessions kept alive by heartbeats."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest

from core.errors import VersionConflict
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import MetaStore, Node
from tests.contract.metastore_contract import MakeStore, MetaStoreContract, close_watch, next_value
from tests.support.metastores import (
    other_store_fixture,  # noqa: F401  (a fixture)
    started_stores,
    store_fixture,  # noqa: F401  (a fixture)
)
from tests.support.until import until

POLL_S = 0.05


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    return str(tmp_path / "meta.db")


@pytest.fixture
async def make_store(db_file: str) -> AsyncIterator[MakeStore]:
    async with started_stores(
        lambda: EmbeddedMetaStore(db_file, session_ttl_s=5.0, poll_interval_s=POLL_S)
    ) as make:
        yield make


class TestEmbeddedMetaStore(MetaStoreContract):
    pass


_CHILD = """
import asyncio, sys
from core.errors import VersionConflict
from metastore.embedded import EmbeddedMetaStore

async def main(file, mode):
    store = EmbeddedMetaStore(file, session_ttl_s=0.6, poll_interval_s=0.05)
    await store.start()
    print("ready", flush=True)
    if mode == "join":
        await store.join("workers", "crashing", b"pid")
        print("joined", flush=True)
        await asyncio.sleep(60)
    for _ in range(50):
        while True:
            node = await store.get("/counter")
            try:
                await store.update("/counter", str(int(node.data) + 1).encode(),
                                   expected_version=node.version)
                break
            except VersionConflict:
                pass
    await store.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def _child(db_file: str, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, db_file, mode, stdout=asyncio.subprocess.PIPE
    )


async def test_a_crashed_process_loses_its_members(db_file: str, store: MetaStore) -> None:
    child = await _child(db_file, "join")
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 20) == b"ready\n"
    assert await asyncio.wait_for(child.stdout.readline(), 20) == b"joined\n"
    try:
        assert await store.members("workers") == {"crashing": b"pid"}
        await asyncio.sleep(1.0)  # longer than its ttl: its heartbeats keep it alive
        assert await store.members("workers") == {"crashing": b"pid"}
    finally:
        child.kill()  # SIGKILL: no aclose, no cleanup, only a stale heartbeat
        await child.wait()
    started = time.monotonic()
    await until(lambda: _no_members(store), timeout=5.0)
    assert time.monotonic() - started < 3.0


async def _no_members(store: MetaStore) -> bool:
    return await store.members("workers") == {}


async def test_compare_and_set_holds_across_processes(db_file: str, store: MetaStore) -> None:
    await store.create("/counter", b"0")
    child = await _child(db_file, "count")
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 20) == b"ready\n"
    for _ in range(50):  # both processes increment at once, each retrying its conflicts
        while True:
            node = await store.get("/counter")
            assert node is not None
            try:
                await store.update(
                    "/counter", str(int(node.data) + 1).encode(), expected_version=node.version
                )
                break
            except VersionConflict:
                await asyncio.sleep(0)
    assert await asyncio.wait_for(child.wait(), 30) == 0
    assert await store.get("/counter") == Node(b"100", 100)


async def test_a_reaped_session_opens_a_new_one_and_rejoins(
    db_file: str, make_store: MakeStore
) -> None:
    mine = await make_store()
    assert isinstance(mine, EmbeddedMetaStore)
    mine_fast = EmbeddedMetaStore(db_file, session_ttl_s=0.3, poll_interval_s=POLL_S)
    await mine_fast.start()
    try:
        await mine_fast.join("workers", "stalled", b"x")
        old = mine_fast.session_id
        with closing(sqlite3.connect(db_file)) as raw, raw:  # as if another store reaped it
            raw.execute("DELETE FROM sessions WHERE id = ?", (old,))

        async def rejoined() -> bool:
            return mine_fast.session_id != old and await mine.members("workers") == {
                "stalled": b"x"
            }

        await until(rejoined, timeout=5.0)
        with closing(sqlite3.connect(db_file)) as raw:
            owner = raw.execute(
                "SELECT ephemeral_owner FROM nodes WHERE path = ?",
                (paths.member("workers", "stalled"),),
            ).fetchone()
        assert owner == (mine_fast.session_id,)
    finally:
        await mine_fast.aclose()
    assert await mine.members("workers") == {}


async def test_a_member_id_taken_while_the_session_was_lost_revokes_the_lease(
    db_file: str, make_store: MakeStore
) -> None:
    """Another process joined under this member id while this one's session was reaped:
    the re-join is refused, and this process may act in that member's name no more."""
    mine = await make_store()
    assert isinstance(mine, EmbeddedMetaStore)
    async with EmbeddedMetaStore(db_file, session_ttl_s=0.3, poll_interval_s=POLL_S) as zombie:
        await zombie.join("workers", "w1", b"x")
        assert zombie.lease.valid()
        member = paths.member("workers", "w1")
        with closing(sqlite3.connect(db_file)) as raw, raw:  # reaped, and the id taken
            raw.execute("DELETE FROM sessions WHERE id = ?", (zombie.session_id,))
            raw.execute(
                "UPDATE nodes SET ephemeral_owner = ? WHERE path = ?", (mine.session_id, member)
            )
        await until(lambda: zombie.lease.revoked, timeout=5.0)
        assert "held by another live process" in str(zombie.lease.revoked)
        await asyncio.sleep(0.5)  # heartbeats of the new session answered meanwhile
        assert not zombie.lease.valid()


async def test_two_stores_on_one_file_see_each_other_through_watches(
    store: MetaStore, other_store: MetaStore
) -> None:
    watch = store.watch("/x")
    children = store.watch_children("/")
    try:
        assert await next_value(watch) is None
        assert await next_value(children) == []
        await other_store.create("/x", b"from the other")
        assert await next_value(watch, timeout=2) == Node(b"from the other", 0)
        assert await next_value(children, timeout=2) == ["x"]
    finally:
        await close_watch(watch)
        await close_watch(children)


async def test_closed_or_dropped_watches_leave_nothing_behind(store: EmbeddedMetaStore) -> None:
    watch = store.watch("/a")
    assert await next_value(watch) is None
    assert len(store._hub) == 1
    await close_watch(watch)
    assert len(store._hub) == 0
    async for _ in store.watch_children("/a"):
        break  # the iterator is dropped without aclose

    async def emptied() -> bool:
        return len(store._hub) == 0

    await until(emptied, timeout=1.0)
