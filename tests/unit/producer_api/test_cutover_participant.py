"""The participant on the embedded metastore: it follows a cutover of a topic it never
served, acknowledges each phase, and answers 503 for topics in cutover once its metastore
session changes, until it has read their state again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.errors import MetaStoreUnavailable
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from producer_api.cutover import CutoverParticipant
from producer_api.metadata import TopicCache
from segments.cutover.machine import Clock, Mode, Phase, TargetReady, begin, step
from segments.cutover.records import CutoverRecords
from tests.support.world import catalog_with_t


class SessionStore(EmbeddedMetaStore):
    """The embedded metastore with a session id the test can change (a lost session)."""

    session_id: int | None = 1


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition never met"
        await asyncio.sleep(0.02)


def _now(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return predicate()

    return check


@pytest.fixture
async def meta(tmp_path: Path) -> EmbeddedMetaStore:
    store = SessionStore(str(tmp_path / "m.db"), poll_interval_s=0.02)
    await store.start()
    await catalog_with_t(store)
    return store


async def test_follows_acknowledges_and_refuses_out_of_sync(meta: SessionStore) -> None:
    cache = TopicCache(Catalog(meta))
    participant = CutoverParticipant(meta, "me", {}, cache, hold_timeout_s=0.2)
    records = CutoverRecords(meta)
    async with participant:
        clock = Clock(datetime.now(UTC))
        out = begin("c1", "p", "t", 1, 2, "embedded", 1, "s2", live=["me"], clock=clock)
        topic = await Catalog(meta).get_topic("p", "t")
        await records.create(out.state, topic.version)
        await _eventually(_now(lambda: ("p", "t") in participant.gates))
        found = await records.get("p", "t")
        assert found is not None
        state = step(found[0], TargetReady(), clock).state
        await records.put(state, found[1])
        # no store for "embedded" here: it cannot open the target, so it never acknowledges
        await asyncio.sleep(0.3)
        found = await records.get("p", "t")
        assert found is not None and "me" not in found[0].producers
        # SWITCH: a producer with nothing in flight acknowledges at once and holds
        switched = found[0].model_copy(update={"phase": Phase.SWITCH})
        await records.put(switched, found[1])

        async def switched() -> bool:
            found = await records.get("p", "t")
            assert found is not None
            acks = found[0].producers.get("me")
            return acks is not None and acks.switched_at is not None

        await _eventually(switched)
        gate = participant.gates[("p", "t")]
        assert gate.mode is Mode.HOLD
        meta.session_id = None  # the session is lost: every topic in cutover answers 503
        await _eventually(_now(lambda: gate.out_of_sync))
        with pytest.raises(MetaStoreUnavailable):
            await gate.admit(topic)
        meta.session_id = 2  # a new session: back in sync once the state was read again
        await _eventually(_now(lambda: not gate.out_of_sync))
        assert gate.mode is Mode.HOLD
