"""The contract every ``MetaStore`` meets, written once.

A backend's test module subclasses :class:`MetaStoreContract` and provides three fixtures on
one private tree: ``store`` (a started store), ``other_store`` (a second, independent
session: another process's view) and ``make_store`` (an async factory of more started
stores, closed by the fixture at the end). ZooKeeper runs it against the real server,
embedded against a SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from core.errors import AlreadyExists, InUse, Malformed, NotFound, VersionConflict
from metastore import paths
from metastore.protocol import Check, Create, Delete, MetaStore, Node, Update

T = TypeVar("T")
MakeStore = Callable[[], Awaitable[MetaStore]]
WAIT_S = 5.0


async def next_value(watch: AsyncIterator[T], timeout: float = WAIT_S) -> T:
    return await asyncio.wait_for(anext(watch), timeout)


async def wait_for_value(
    watch: AsyncIterator[T], wanted: Callable[[T], bool], timeout: float = WAIT_S
) -> T:
    """The first value of ``watch`` that is ``wanted`` (earlier ones may be folded away)."""

    async def scan() -> T:
        async for value in watch:
            if wanted(value):
                return value
        raise AssertionError("the watch ended")

    return await asyncio.wait_for(scan(), timeout)


async def close_watch(watch: AsyncIterator[object]) -> None:
    """Close a watch early, as ``MetaStore.watch`` iterators allow."""
    await watch.aclose()  # type: ignore[attr-defined]


class MetaStoreContract:
    async def test_is_a_metastore(self, store: MetaStore) -> None:
        assert isinstance(store, MetaStore)

    async def test_create_get_update_delete(self, store: MetaStore) -> None:
        assert await store.get("/c/n") is None
        assert await store.create("/c/n", b"v0") == Node(b"v0", 0)
        assert await store.get("/c/n") == Node(b"v0", 0)
        assert await store.update("/c/n", b"v1", expected_version=0) == Node(b"v1", 1)
        assert await store.update("/c/n", b"\x00\xff", expected_version=1) == Node(b"\x00\xff", 2)
        assert await store.get("/c/n") == Node(b"\x00\xff", 2)
        with pytest.raises(VersionConflict):
            await store.delete("/c/n", expected_version=1)
        await store.delete("/c/n", expected_version=2)
        assert await store.get("/c/n") is None
        with pytest.raises(NotFound):
            await store.delete("/c/n")
        with pytest.raises(NotFound):
            await store.update("/c/n", b"x", expected_version=0)

    async def test_get_many_reads_in_order_with_none_where_absent(self, store: MetaStore) -> None:
        await store.create("/m/a", b"1")
        await store.create("/m/b", b"2")
        await store.update("/m/b", b"3", expected_version=0)
        found = await store.get_many(["/m/b", "/m/none", "/m/a"])
        assert found == [Node(b"3", 1), None, Node(b"1", 0)]
        assert await store.get_many([]) == []

    async def test_children_many_in_order_with_nothing_where_absent(self, store: MetaStore) -> None:
        for path in ("/k/a/z", "/k/a/b", "/k/c/x"):
            await store.create(path, b"")
        found = await store.children_many(["/k/c", "/k/none", "/k/a", "/k/a/z"])
        assert found == [["x"], [], ["b", "z"], []]
        assert await store.children_many([]) == []

    async def test_create_existing_is_already_exists(self, store: MetaStore) -> None:
        await store.create("/c/dup", b"first")
        with pytest.raises(AlreadyExists):
            await store.create("/c/dup", b"second")
        assert await store.get("/c/dup") == Node(b"first", 0)

    async def test_update_with_wrong_version_is_a_conflict(self, store: MetaStore) -> None:
        await store.create("/c/cas", b"a")
        await store.update("/c/cas", b"b", expected_version=0)
        with pytest.raises(VersionConflict):
            await store.update("/c/cas", b"lost", expected_version=0)
        assert await store.get("/c/cas") == Node(b"b", 1)

    async def test_create_makes_parents_and_children_are_sorted(self, store: MetaStore) -> None:
        assert await store.children("/p") == []
        for name in ["zeta", "alpha", "mid-1", "mid_0"]:
            await store.create(f"/p/q/{name}", name.encode())
        assert await store.get("/p") == Node(b"", 0)
        assert await store.get("/p/q") == Node(b"", 0)
        assert await store.children("/p") == ["q"]
        assert await store.children("/p/q") == sorted(["zeta", "alpha", "mid-1", "mid_0"])
        assert await store.children("/p/q/alpha") == []
        assert "p" in await store.children("/")

    async def test_the_other_session_sees_writes(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        await store.create("/shared/x", b"from-store")
        assert await other_store.get("/shared/x") == Node(b"from-store", 0)
        await other_store.update("/shared/x", b"from-other", expected_version=0)
        assert await store.get("/shared/x") == Node(b"from-other", 1)

    async def test_concurrent_compare_and_set_has_exactly_one_winner(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        await store.create("/race/n", b"start")
        for round_ in range(20):
            seen = [await store.get("/race/n"), await other_store.get("/race/n")]
            assert seen[0] == seen[1] and seen[0] is not None
            version = seen[0].version
            results = await asyncio.gather(
                store.update("/race/n", f"store-{round_}".encode(), expected_version=version),
                other_store.update("/race/n", f"other-{round_}".encode(), expected_version=version),
                return_exceptions=True,
            )
            winners = [r for r in results if isinstance(r, Node)]
            losers = [r for r in results if isinstance(r, VersionConflict)]
            assert len(winners) == 1 and len(losers) == 1, results
            assert winners[0].version == version + 1
            assert await store.get("/race/n") == winners[0]

    async def test_delete_of_a_parent_needs_recursive(self, store: MetaStore) -> None:
        for path in ["/r/a/b/c", "/r/a/d", "/r/a-b", "/r/a0", "/r/ab"]:
            await store.create(path, b"x")
        with pytest.raises(InUse):
            await store.delete("/r/a")
        with pytest.raises(VersionConflict):
            await store.delete("/r/a", expected_version=3, recursive=True)
        assert await store.get("/r/a/b/c") is not None
        await store.delete("/r/a", expected_version=0, recursive=True)
        for gone in ["/r/a", "/r/a/b", "/r/a/b/c", "/r/a/d"]:
            assert await store.get(gone) is None
        assert await store.children("/r") == ["a-b", "a0", "ab"]
        with pytest.raises(NotFound):
            await store.delete("/r/a", recursive=True)

    async def test_transaction_applies_every_op(self, store: MetaStore) -> None:
        await store.create("/tx/ptr", b"1")
        await store.create("/tx/old", b"o")
        await store.create("/tx/fence", b"f")
        await store.transaction(
            [
                Check("/tx/fence", 0),
                Create("/tx/new", b"n"),
                Update("/tx/ptr", b"2", 0),
                Delete("/tx/old", 0),
            ]
        )
        assert await store.get("/tx/new") == Node(b"n", 0)
        assert await store.get("/tx/ptr") == Node(b"2", 1)
        assert await store.get("/tx/old") is None
        await store.transaction([])

    async def test_a_failed_check_rolls_back_the_whole_transaction(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        await store.create("/tx/ptr", b"1")
        await store.create("/tx/state", b"s")
        await other_store.update("/tx/state", b"moved", expected_version=0)
        with pytest.raises(VersionConflict):
            await store.transaction(
                [
                    Create("/tx/seg/0000000002", b"pending"),
                    Update("/tx/ptr", b"2", 0),
                    Check("/tx/state", 0),
                ]
            )
        assert await store.get("/tx/seg/0000000002") is None
        assert await store.get("/tx/seg") is None
        assert await store.get("/tx/ptr") == Node(b"1", 0)
        with pytest.raises(AlreadyExists):
            await store.transaction([Update("/tx/ptr", b"3", 0), Create("/tx/state", b"")])
        with pytest.raises(NotFound):
            await store.transaction([Update("/tx/ptr", b"3", 0), Delete("/tx/missing")])
        assert await store.get("/tx/ptr") == Node(b"1", 0)

    async def test_transaction_creates_missing_parents(self, store: MetaStore) -> None:
        await store.transaction(
            [Create("/tx2/a/b/c", b"c"), Create("/tx2/x", b"x"), Create("/tx2/x/y", b"y")]
        )
        assert await store.get("/tx2/a/b/c") == Node(b"c", 0)
        assert await store.get("/tx2/a/b") == Node(b"", 0)
        assert await store.get("/tx2/x") == Node(b"x", 0)
        assert await store.children("/tx2/x") == ["y"]

    async def test_watch_follows_the_other_sessions_writes(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        watch = store.watch("/w/node")
        try:
            assert await next_value(watch) is None
            await other_store.create("/w/node", b"a")
            assert await next_value(watch) == Node(b"a", 0)
            await other_store.update("/w/node", b"b", expected_version=0)
            assert await next_value(watch) == Node(b"b", 1)
            await other_store.delete("/w/node")
            assert await next_value(watch) is None
            await other_store.create("/w/node", b"again")
            assert await next_value(watch) == Node(b"again", 0)
            await store.update("/w/node", b"own", expected_version=0)
            assert await next_value(watch) == Node(b"own", 1)
        finally:
            await close_watch(watch)

    async def test_watch_folds_bursts_but_delivers_the_last_value(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        await store.create("/w/burst", b"0")
        watch = store.watch("/w/burst")
        try:
            assert await next_value(watch) == Node(b"0", 0)
            for i in range(1, 16):
                await other_store.update("/w/burst", str(i).encode(), expected_version=i - 1)
            last = await wait_for_value(watch, lambda n: n is not None and n.version == 15)
            assert last == Node(b"15", 15)
            with pytest.raises(TimeoutError):  # nothing changed since: nothing more to say
                await next_value(watch, timeout=0.6)
        finally:
            await close_watch(watch)

    async def test_watch_children_follows_adds_and_removes(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        watch = store.watch_children("/wc")
        try:
            assert await next_value(watch) == []
            await other_store.create("/wc/b", b"")
            assert await next_value(watch) == ["b"]
            await store.create("/wc/a", b"")
            assert await next_value(watch) == ["a", "b"]
            await other_store.update("/wc/a", b"data only", expected_version=0)
            await other_store.delete("/wc/b")
            assert await next_value(watch) == ["a"]
            await other_store.delete("/wc", recursive=True)
            assert await next_value(watch) == []
            await other_store.create("/wc/c/deeper", b"")
            assert await next_value(watch) == ["c"]
        finally:
            await close_watch(watch)

    async def test_a_closed_watch_ends(self, store: MetaStore) -> None:
        watch = store.watch("/w/closed")
        assert await next_value(watch) is None
        await close_watch(watch)
        with pytest.raises(StopAsyncIteration):
            await next_value(watch)
        async for value in store.watch_children("/w"):
            assert value == []
            break
        await store.create("/w/still-works", b"")
        assert await store.children("/w") == ["still-works"]

    async def test_watches_end_when_their_store_closes(self, make_store: MakeStore) -> None:
        mine = await make_store()
        watch = mine.watch("/w/x")
        assert await next_value(watch) is None
        await mine.aclose()
        with pytest.raises(StopAsyncIteration):
            await next_value(watch)

    async def test_a_member_vanishes_when_its_session_closes(
        self, store: MetaStore, other_store: MetaStore, make_store: MakeStore
    ) -> None:
        leaving = await make_store()
        await leaving.join("workers", "w-1", b'{"host": "a"}')
        await store.join("workers", "w-2", b'{"host": "b"}')
        assert await other_store.members("workers") == {
            "w-1": b'{"host": "a"}',
            "w-2": b'{"host": "b"}',
        }
        watch = other_store.watch_children(paths.members("workers"))
        try:
            assert await next_value(watch) == ["w-1", "w-2"]
            await leaving.aclose()
            assert await other_store.members("workers") == {"w-2": b'{"host": "b"}'}
            assert await next_value(watch) == ["w-2"]
        finally:
            await close_watch(watch)
        assert await other_store.get(paths.member("workers", "w-1")) is None
        assert await other_store.members("nobody") == {}

    async def test_ephemeral_nodes_die_with_their_session(
        self, other_store: MetaStore, make_store: MakeStore
    ) -> None:
        owner = await make_store()
        await owner.create("/eph/parent/node", b"e", ephemeral=True)
        assert await other_store.get("/eph/parent/node") == Node(b"e", 0)
        await owner.aclose()
        assert await other_store.get("/eph/parent/node") is None
        assert await other_store.get("/eph/parent") == Node(b"", 0)  # parents are persistent

    async def test_join_again_updates_and_another_session_cannot_take_it(
        self, store: MetaStore, other_store: MetaStore
    ) -> None:
        await store.join("producers", "p-1", b"v1")
        await store.join("producers", "p-1", b"v2")
        assert await other_store.members("producers") == {"p-1": b"v2"}
        with pytest.raises(AlreadyExists):
            await other_store.join("producers", "p-1", b"thief")
        assert await store.members("producers") == {"p-1": b"v2"}

    async def test_deep_paths(self, store: MetaStore, other_store: MetaStore) -> None:
        levels = [f"l{i}" for i in range(15)]
        deep = "/deep/" + "/".join(levels)
        await store.create(deep, b"bottom")
        assert await other_store.get(deep) == Node(b"bottom", 0)
        for i, name in enumerate(levels):
            assert await other_store.children("/".join(["/deep", *levels[:i]])) == [name]
        await store.create(paths.consume_pointer("proj-1", "sub_1"), b'{"segment_id": 1}')
        assert await other_store.children(paths.subscriptions("proj-1")) == ["sub_1"]
        await other_store.delete("/deep", recursive=True)
        assert await store.get(deep) is None and await store.children("/deep") == []

    @pytest.mark.parametrize("bad", ["", "relative", "/trailing/", "//double", "/a/../b"])
    async def test_malformed_paths_are_refused(self, store: MetaStore, bad: str) -> None:
        with pytest.raises(Malformed):
            await store.get(bad)
        with pytest.raises(Malformed):
            await store.create(bad, b"")
