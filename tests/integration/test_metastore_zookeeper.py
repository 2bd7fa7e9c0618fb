"""The MetaStore contract against the real ZooKeeper, plus what only ZooKeeper does: sessions
that expire under a live client. Every test works under its own random root znode."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import UnimplementedError
from kazoo.protocol.connection import _CONNECTION_DROP

from core.errors import AlreadyExists, MetaStoreUnavailable, VersionConflict
from metastore import paths, zk_multiread
from metastore.protocol import MetaStore, Node
from metastore.zookeeper import ZooKeeperMetaStore
from tests.contract.metastore_contract import (
    MakeStore,
    MetaStoreContract,
    close_watch,
    next_value,
)
from tests.support.metastores import (
    other_store_fixture,  # noqa: F401  (a fixture)
    started_stores,
    store_fixture,  # noqa: F401  (a fixture)
)
from tests.support.services import RealServices
from tests.support.tcp_proxy import TcpProxy
from tests.support.until import until


@pytest.fixture
async def root(real_services: RealServices, unique: str) -> AsyncIterator[str]:
    """A private root znode, deleted with everything under it at the end."""
    path = f"/test-metastore-{unique}"
    yield path
    async with ZooKeeperMetaStore(real_services.zookeeper, root="/") as admin:
        if await admin.get(path) is not None:
            await admin.delete(path, recursive=True)


@pytest.fixture
async def make_store(real_services: RealServices, root: str) -> AsyncIterator[MakeStore]:
    async with started_stores(
        lambda: ZooKeeperMetaStore(real_services.zookeeper, root=root, session_timeout_s=6.0)
    ) as make:
        yield make


@pytest.mark.zookeeper
class TestZooKeeperMetaStore(MetaStoreContract):
    pass


def _expire_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Close a live session from the server's side: attach to it with a second client, then
    end it (the trick kazoo's own test harness uses). The first client then hears EXPIRED."""
    thief = KazooClient(hosts=hosts, client_id=client_id, timeout=6.0)
    thief.start(timeout=10)
    thief.stop()
    thief.close()


@pytest.mark.zookeeper
async def test_members_come_back_after_the_session_expires(
    real_services: RealServices, root: str, make_store: MakeStore, other_store: MetaStore
) -> None:
    store = await make_store()
    assert isinstance(store, ZooKeeperMetaStore)
    await store.join("producers", "p-1", b"alive")
    await store.create("/expiry/plain", b"eph", ephemeral=True)
    watch = store.watch("/expiry/after")
    assert await next_value(watch) is None
    old_session = store.session_id
    assert old_session is not None

    await asyncio.to_thread(_expire_session, real_services.zookeeper, store._client.client_id)

    async def new_session_with_member() -> bool:
        session = store.session_id
        if session is None or session == old_session:
            return False
        return await other_store.members("producers") == {"p-1": b"alive"}

    await until(new_session_with_member, timeout=15.0, interval=0.1)
    zk = KazooClient(hosts=real_services.zookeeper, timeout=6.0)
    await asyncio.to_thread(zk.start, 10)
    try:
        stat = zk.exists(root + paths.member("producers", "p-1"))
        assert stat.ephemeralOwner == store.session_id  # re-created by the new session
    finally:
        await asyncio.to_thread(zk.stop)
        zk.close()
    # Plain ephemeral nodes are the owner's to re-create: the expired session took them away.
    assert await other_store.get("/expiry/plain") is None
    # The store keeps working, and its old watch was re-armed on the new session.
    await other_store.create("/expiry/after", b"seen")
    assert await next_value(watch) == Node(b"seen", 0)
    await close_watch(watch)
    await store.aclose()
    assert await other_store.members("producers") == {}


@pytest.mark.zookeeper
async def test_a_member_id_taken_while_the_session_was_lost_revokes_the_lease(
    real_services: RealServices, root: str, other_store: MetaStore
) -> None:
    """The store's session expires while it is cut off, another process joins under its
    member id, the store comes back: its re-join is refused, and its lease is revoked for
    good (it takes no unit lock again, delivery_workers/unit_lock.py), while the other
    process keeps the id."""
    async with TcpProxy(real_services.zookeeper) as proxy:
        store = ZooKeeperMetaStore(proxy.address, root=root, session_timeout_s=4.0)
        async with store:
            await store.join("workers", "w-1", b"first")
            proxy.partition()
            client_id = store._client.client_id
            await asyncio.to_thread(_expire_session, real_services.zookeeper, client_id)
            await other_store.join("workers", "w-1", b"second")
            proxy.heal()
            await until(lambda: store.lease.revoked, timeout=20.0, interval=0.05)
            assert "held by another live process" in str(store.lease.revoked)
            await until(lambda: store.session_id not in (None, client_id[0]), timeout=10.0)
            await store.get("/")  # the new session answers: still no lease
            assert not store.lease.valid()
            assert await other_store.members("workers") == {"w-1": b"second"}


def _count_watch_reads(store: ZooKeeperMetaStore, under: str) -> list[str]:
    """The paths below ``under`` the store reads with a watch from now on."""
    client: Any = store._client
    reads: list[str] = []
    for name in ("get_async", "exists_async"):
        inner = getattr(client, name)

        def counted(path: str, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            if kwargs.get("watch") is not None and path.startswith(under):
                reads.append(path)
            return _inner(path, *args, **kwargs)

        setattr(client, name, counted)
    return reads


@pytest.mark.zookeeper
async def test_a_reconnect_reads_each_watch_once_and_the_watches_still_fire(
    root: str, make_store: MakeStore, other_store: MetaStore
) -> None:
    """kazoo fires every watch when its connection goes (it keeps none across one), so each
    re-reads; the store made them all read again when the connection came back as well: a
    member's ~2 000 watches were 4 000 reads at every reconnect, at 10^5 units a herd that
    delayed the next answers past the leases (bench/scale.py)."""
    store = await make_store()
    assert isinstance(store, ZooKeeperMetaStore)
    names = [f"/rc/n{i:02d}" for i in range(50)]
    await asyncio.gather(*(other_store.create(n, b"v") for n in names))
    watches = [store.watch(n) for n in names]
    assert await asyncio.gather(*(next_value(w) for w in watches)) == [Node(b"v", 0)] * 50
    reads = _count_watch_reads(store, root + "/rc/")
    session = store.session_id
    store._client._call(_CONNECTION_DROP, store._client.handler.async_result())
    await until(lambda: len(reads) >= len(names), timeout=15.0, what="the watches re-read")
    # Whatever else was going to be read comes right after the first reads' answers.
    await asyncio.sleep(1.0)
    assert store.session_id == session  # the same session: a reconnect, not an expiry
    assert sorted(reads) == sorted(root + n for n in names)
    await other_store.update(names[7], b"changed", expected_version=0)
    assert await next_value(watches[7]) == Node(b"changed", 1)  # the watches are armed again
    for watch in watches:
        await close_watch(watch)


@pytest.mark.zookeeper
async def test_unreachable_server_is_metastore_unavailable(unique: str) -> None:
    store = ZooKeeperMetaStore("127.0.0.1:1", root=f"/x-{unique}", connect_timeout_s=0.5)
    with pytest.raises(MetaStoreUnavailable):
        await store.start()
    await store.aclose()


@pytest.mark.zookeeper
async def test_many_reads_go_in_multi_read_chunks_in_order(
    store: MetaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More paths than one ``multiRead`` holds, absent and empty nodes among them: the answer
    is in the order asked, in a few requests rather than one a path."""
    for i in range(0, 300, 3):
        await store.create(f"/mr/n{i:03d}", b"" if i % 2 else f"v{i}".encode())
    sent: list[int] = []
    inner = zk_multiread.send
    monkeypatch.setattr(
        zk_multiread, "send", lambda c, ps, kids=False: sent.append(len(ps)) or inner(c, ps, kids)
    )
    found = await store.get_many([f"/mr/n{i:03d}" for i in range(300)])
    expected = [
        (Node(b"" if i % 2 else f"v{i}".encode(), 0) if i % 3 == 0 else None) for i in range(300)
    ]
    assert found == expected
    assert sent == [zk_multiread.CHUNK, zk_multiread.CHUNK, 300 - 2 * zk_multiread.CHUNK]
    sent.clear()
    names = await store.children_many(["/mr", "/mr/n000", "/none"])
    assert names == [[f"n{i:03d}" for i in range(0, 300, 3)], [], []] and sent == [3]


@pytest.mark.zookeeper
async def test_a_server_without_multi_read_is_read_one_by_one(
    store: MetaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.create("/old/a", b"1")
    asked: list[int] = []

    def unimplemented(client: Any, paths: Any, children: bool = False) -> Any:  # a 3.5 server
        asked.append(len(paths))
        result = client.handler.async_result()
        result.set_exception(UnimplementedError())
        return result

    monkeypatch.setattr(zk_multiread, "send", unimplemented)
    assert await store.get_many(["/old/a", "/old/b"]) == [Node(b"1", 0), None]
    assert await store.get_many(["/old/a"]) == [Node(b"1", 0)]
    assert await store.children_many(["/old", "/nope"]) == [["a"], []]
    both = await asyncio.gather(store.get("/old/a"), store.get("/old/b"))  # one turn
    assert both == [Node(b"1", 0), None]
    assert asked == [2]  # remembered: not asked again


@pytest.mark.zookeeper
async def test_gets_asked_in_one_turn_go_as_multi_reads(
    store: MetaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker starting a thousand units reads each one's subscription at once: the reads
    go as a few ``multiRead`` requests, each caller with its own node (or None)."""
    for i in range(0, 200, 2):
        await store.create(f"/co/n{i:03d}", f"v{i}".encode())
    sent: list[int] = []
    inner = zk_multiread.send
    monkeypatch.setattr(
        zk_multiread, "send", lambda c, ps, kids=False: sent.append(len(ps)) or inner(c, ps, kids)
    )
    found = await asyncio.gather(*(store.get(f"/co/n{i:03d}") for i in range(200)))
    assert found == [Node(f"v{i}".encode(), 0) if i % 2 == 0 else None for i in range(200)]
    assert sent == [zk_multiread.CHUNK, 200 - zk_multiread.CHUNK]
    sent.clear()
    assert await store.get("/co/n000") == Node(b"v0", 0) and sent == []  # alone: a plain read


def _count_multis(store: MetaStore) -> list[int]:
    """The size of each ``multi`` the store sends from now on."""
    client: Any = store._client  # type: ignore[attr-defined]
    multis: list[int] = []
    inner = client.transaction

    def counted() -> Any:
        tx = inner()
        commit = tx.commit_async
        tx.commit_async = lambda: multis.append(len(tx.operations)) or commit()
        return tx

    client.transaction = counted
    return multis


@pytest.mark.zookeeper
async def test_creates_asked_in_one_turn_go_as_multis_each_with_its_outcome(
    store: MetaStore,
) -> None:
    """A worker taking a thousand locks at once: the creates go as a few ``multi``s; when one
    of a chunk is refused (a lock another holds), that chunk's creates are made one by one,
    so the others are created and the refused one's caller alone hears of it."""
    multis = _count_multis(store)
    await store.create("/cr/held/n005", b"another's")
    found = await asyncio.gather(
        *(store.create(f"/cr/free/n{i:03d}", b"x", ephemeral=True) for i in range(200)),
        return_exceptions=True,
    )
    assert found == [Node(b"x", 0)] * 200
    assert multis == [zk_multiread.CHUNK, 200 - zk_multiread.CHUNK]
    assert len(await store.children("/cr/free")) == 200
    multis.clear()
    found = await asyncio.gather(
        *(store.create(f"/cr/held/n{i:03d}", b"x", ephemeral=True) for i in range(10)),
        store.create("/cr/new/parent/n", b"y"),  # its parents are missing: made one by one
        return_exceptions=True,
    )
    assert isinstance(found[5], AlreadyExists), found[5]
    assert [f for i, f in enumerate(found) if i != 5] == [Node(b"x", 0)] * 9 + [Node(b"y", 0)]
    assert multis == [11]
    assert await store.get("/cr/held/n005") == Node(b"another's", 0)
    assert await store.get("/cr/new/parent/n") == Node(b"y", 0)


@pytest.mark.zookeeper
async def test_updates_asked_in_one_turn_go_as_one_multi_each_with_its_outcome(
    store: MetaStore,
) -> None:
    """A worker's status round: its nodes' updates go as one ``multi``; one of a stale
    version is refused to its caller alone, the others written with their new versions."""
    for i in range(6):
        await store.create(f"/up/n{i}", b"0")
    await store.update("/up/n3", b"moved", expected_version=0)  # n3 is at version 1 now
    multis = _count_multis(store)
    found = await asyncio.gather(
        *(store.update(f"/up/n{i}", b"1", expected_version=0) for i in range(6)),
        return_exceptions=True,
    )
    assert isinstance(found[3], VersionConflict), found[3]
    assert [f for i, f in enumerate(found) if i != 3] == [Node(b"1", 1)] * 5
    assert multis == [6]
    assert await store.get("/up/n3") == Node(b"moved", 1)
    assert await store.get("/up/n0") == Node(b"1", 1)


@pytest.mark.zookeeper
async def test_a_burst_waits_for_a_slot_and_the_heartbeat_does_not(
    real_services: RealServices, root: str
) -> None:
    """A burst of requests is put on the wire ``max_in_flight`` at a time; the heartbeat
    skips the queue: behind 10^3 lock creates at once its answer came after half the
    session timeout, and every lock was fenced (bench/scale.py)."""
    store = ZooKeeperMetaStore(real_services.zookeeper, root=root, max_in_flight=2)
    async with store:
        client: Any = store._client
        on_wire, most = 0, 0
        inner = client.get_children_async  # (gets of one turn would go as one multiRead)

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal on_wire, most
            on_wire += 1
            most = max(most, on_wire)
            answer = inner(*args, **kwargs)

            def landed(_: Any) -> None:
                nonlocal on_wire
                on_wire -= 1

            answer.rawlink(landed)
            return answer

        client.get_children_async = counted
        await store.create("/burst/x", b"x")
        found = await asyncio.gather(*(store.children("/burst") for _ in range(40)))
        assert all(names == ["x"] for names in found)
        assert most <= 2
        held = [await store._slots.acquire() for _ in range(2)]  # every slot taken
        try:
            sent = store.lease.clock()
            async with asyncio.timeout(5):  # the heartbeat's own call does not wait
                await store._call("/", client.exists_async, root, urgent=True)
            assert store.lease.valid() and sent < store.lease.clock()
        finally:
            for _ in held:
                store._slots.release()


class _Late:
    """A kazoo async result whose answer reaches its callbacks ``delay_s`` late (a slow
    round trip)."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def rawlink(self, callback: Any) -> None:
        self.inner.rawlink(lambda _: threading.Timer(self.delay_s, callback, [self]).start())

    def get_nowait(self) -> Any:
        return self.inner.get_nowait()


@pytest.mark.zookeeper
async def test_the_lease_holds_through_round_trips_longer_than_a_heartbeat(
    real_services: RealServices, root: str
) -> None:
    """Heartbeats leave every sixth of the session whether the last one was answered: with
    each one waiting for its answer, a round trip of 0.6 s on a 3 s session (beats every
    0.5 s, a lease of 1.5 s from a beat's send) let the lease lapse between two answers,
    and a worker fenced its locks on a slow but live connection."""
    store = ZooKeeperMetaStore(real_services.zookeeper, root=root, session_timeout_s=3)
    async with store:
        client: Any = store._client
        inner = client.exists_async
        client.exists_async = lambda *args, **kwargs: _Late(inner(*args, **kwargs), 0.6)
        await asyncio.sleep(1.0)  # the beats already sent answered on time: slow ones now
        lapsed = []
        for _ in range(60):  # 3 s: six heartbeats, each answered 0.6 s after it left
            if not store.lease.valid():
                lapsed.append(store.lease.clock())
            await asyncio.sleep(0.05)
        assert not lapsed, f"the lease lapsed {len(lapsed)} times of 60 on a live session"


@pytest.mark.zookeeper
async def test_a_store_that_keeps_sending_leaves_a_silent_server_within_its_session(
    real_services: RealServices, root: str
) -> None:
    """Two ways to the server, the one in use turned silent (bytes taken, none answered)
    while the store keeps sending (a read every 0.2 s), as a worker's status writes do:
    kazoo finds a dead server only by a ping it sends after a third of the session *with
    nothing to send*, so the store never moved and stayed fenced until its requests timed
    out. It now drops a server that has answered nothing for a quarter of the session and
    goes on, in the same session, through the other way, before its lease (half a session
    from the last answered heartbeat) runs out."""
    session_s = 6.0
    async with TcpProxy(real_services.zookeeper) as one, TcpProxy(real_services.zookeeper) as two:
        hosts = f"{one.address},{two.address}"
        store = ZooKeeperMetaStore(hosts, root=root, session_timeout_s=session_s)
        async with store:
            session = store.session_id
            [used] = [p for p in (one, two) if p._writers]
            await store.create("/busy", b"0")
            used.partition()
            cut_at = asyncio.get_running_loop().time()

            async def read() -> None:
                with contextlib.suppress(MetaStoreUnavailable):
                    await store.get("/busy")

            async def busy() -> None:  # a read every 0.2 s, answered or not
                async with asyncio.TaskGroup() as reads:
                    while True:
                        reads.create_task(read())
                        await asyncio.sleep(0.2)

            writer = asyncio.create_task(busy())
            lapsed = []  # when the lease was found lapsed, from the cut
            try:
                while (now := asyncio.get_running_loop().time() - cut_at) < session_s + 1:
                    if not store.lease.valid():
                        lapsed.append(now)
                    await asyncio.sleep(0.02)
            finally:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
            last = max(lapsed, default=0.0)
            print(f"silent server: the lease lapsed {len(lapsed)} times, the last {last:.2f}s in")
            assert store.session_id == session, "the session was lost: it should have moved"
            assert last < session_s / 2, f"the lease lapsed until {last:.2f}s after the cut"


@pytest.mark.zookeeper
async def test_a_slow_heartbeat_on_a_server_that_answers_the_rest_is_not_silence(
    real_services: RealServices, root: str
) -> None:
    """Heartbeats answered a third of the session late (behind a burst, say) while every
    other request is answered: the server is slow, not silent, and the store keeps its
    connection (dropping it would fail every request on the wire)."""
    store = ZooKeeperMetaStore(real_services.zookeeper, root=root, session_timeout_s=3)
    states: list[str] = []
    async with store:
        client: Any = store._client
        client.add_listener(states.append)
        inner = client.exists_async
        client.exists_async = lambda *args, **kwargs: _Late(inner(*args, **kwargs), 1.0)
        await store.create("/busy", b"0")
        for _ in range(20):  # 3 s of reads answered at once, beside the late heartbeats
            assert await store.get("/busy") is not None
            await asyncio.sleep(0.15)
        assert states == [], f"the connection was dropped: {states}"
        assert store.lease.valid()
