"""Idempotent publish makes no ZooKeeper write per message (issue 35): 1 000 publishes with
their own ``X-Message-Id`` on a topic with ``dedupe_window``, through a producer on real
ZooKeeper, Kafka and PostgreSQL, counted by ZooKeeper itself.

Two counters of the server, read with its four-letter words: ``srvr``'s ``Zxid`` (one per
write transaction of the whole server) and ``stat``'s per-connection ``recved`` (every
request the producer's own session sent: writes, reads and pings). The session's count is
the producer's alone; the zxid is shared with whoever else uses the server, so a window in
which others wrote is measured again (until a deadline), never explained away: with a
write per message (the ZooKeeper store of issue 21) no window of 1 000 could pass.

Background writes accounted for: none are left during the window. The producer joins its
membership before, and its write-health report (one update a second) is set to once a
minute, so that a bound independent of the count holds: fewer than 20 of either counter.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from metastore.config import ZooKeeperConfig
from metastore.dedupe import PostgresDedupeConfig
from metastore.zookeeper import ZooKeeperMetaStore
from producer_api.app import create_app
from producer_api.settings import ProducerSettings
from reports import migrate
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import World, kafka_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.postgres]

ADMIN = "dedupe-zk-admin-token-0123456789"
COUNT, IN_FLIGHT, BOUND = 1_000, 8, 20
PATH = "/v1/projects/p/topics/t/produce"


async def _four_letter(hosts: str, word: str) -> str:
    host, port = hosts.split(",")[0].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(word.encode())
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer.decode()


async def _counters(hosts: str, port: int) -> tuple[int, int]:
    """(the server's zxid, requests received from the connection of local ``port``)."""
    zxid = re.search(r"^Zxid: 0x([0-9a-f]+)$", await _four_letter(hosts, "srvr"), re.M)
    mine = re.search(
        rf"/127\.0\.0\.1:{port}\[\d+\]\(.*?recved=(\d+)", await _four_letter(hosts, "stat")
    )
    assert zxid is not None and mine is not None
    return int(zxid[1], 16), int(mine[1])


@asynccontextmanager
async def _producer(
    world: World, database: str, unique: str
) -> AsyncIterator[tuple[httpx.AsyncClient, ZooKeeperMetaStore, int]]:
    """The producer service in process on its own ZooKeeper session: a client of it, that
    session, and the local port of its connection (how ``stat`` names it)."""
    settings = ProducerSettings(
        admin_token=ADMIN,
        metastore=world.zk,
        clusters={world.cluster: world.config},
        member_id=f"zkw-{unique}",
        dedupe=PostgresDedupeConfig(url=database),
        failover_report_interval_s=60,
    )
    assert isinstance(world.zk, ZooKeeperConfig)
    async with ZooKeeperMetaStore(world.zk.hosts, root=world.zk.root) as meta:
        port = meta._client._connection._socket.getsockname()[1]
        app = create_app(settings, metastore=meta, stores=world.stores)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://producer",
                headers={"Authorization": f"Bearer {ADMIN}"},
            ) as client,
        ):
            yield client, meta, port


async def test_a_thousand_deduplicated_publishes_write_nothing_to_zookeeper(
    real_services: RealServices, unique: str, postgres_database: str
) -> None:
    migrate.upgrade(postgres_database)
    async with kafka_world(real_services, unique, partitions=2, grouped=False) as world:
        topic = await world.catalog.get_topic("p", "t")
        await world.catalog.update_topic(topic.model_copy(update={"dedupe_window": "10m"}))
        assert isinstance(world.zk, ZooKeeperConfig)
        hosts = world.zk.hosts
        async with _producer(world, postgres_database, unique) as (client, meta, port):
            # The counters see a write of the producer's session: the measure measures.
            zxid, sent = await _counters(hosts, port)
            await meta.create("/probe", b"")
            zxid_after, sent_after = await _counters(hosts, port)
            assert zxid_after > zxid and sent_after > sent
            gate = asyncio.Semaphore(IN_FLIGHT)

            async def publish(mid: str) -> httpx.Response:
                async with gate:
                    return await client.post(PATH, content=b"x", headers={"X-Message-Id": mid})

            warm = [await publish(f"warm-{i}") for i in range(10)]  # topic cached, partitions made
            assert {r.status_code for r in warm} == {201}
            windows: list[dict[str, Any]] = []

            async def quiet_window() -> bool:
                n = len(windows)
                zxid, sent = await _counters(hosts, port)
                ids = [f"w{n}-{i:04d}" for i in range(COUNT)]
                answers = await asyncio.gather(*(publish(mid) for mid in ids))
                repeats = await asyncio.gather(*(publish(mid) for mid in ids[:100]))
                zxid_after, sent_after = await _counters(hosts, port)
                assert [r.status_code for r in answers] == [201] * COUNT
                assert [r.status_code for r in repeats] == [200] * 100  # deduplicated
                assert all(r.json()["duplicate"] for r in repeats)
                windows.append({"zxids": zxid_after - zxid, "requests": sent_after - sent})
                assert windows[-1]["requests"] < BOUND, windows  # the producer's own session
                return windows[-1]["zxids"] < BOUND  # the whole server: others may write too

            await until(
                quiet_window, 180, what="a window of 1 000 publishes without ZooKeeper writes"
            )
            print(
                f"\n{len(windows)} window(s) of {COUNT} publishes + 100 duplicates: "
                + "; ".join(
                    f"{w['zxids']} ZooKeeper writes (zxids, whole server), "
                    f"{w['requests']} requests of the producer's session"
                    for w in windows
                )
            )
