"""The DLQ admin API against real ZooKeeper + Kafka and + Pulsar: browse (paged, newest and
oldest first, filters), unsideline by ids / groups / time, purge, and bad selectors answered
with a clear 4xx or an empty result, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from core.model import RetryPolicy
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import (
    BACKENDS,
    Running,
    control_plane,
    produce,
    real_world,
    subscribe,
)

pytestmark = pytest.mark.parametrize("kind", BACKENDS)
NO_RETRY = RetryPolicy(max_attempts=1)


async def _all(api: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    """Every page of a browse, following the cursors."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        answer = await api.get("/s/dlq/messages", params=query)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        out += body["messages"]
        cursor = body["next_cursor"]
        if cursor is None:
            return out


async def _dlq_size(api: httpx.AsyncClient, size: int) -> None:
    async def holds() -> bool:
        return len(await _all(api, limit=500)) == size

    await until(holds, 60, f"the DLQ holding {size} entries", interval=0.1)


def _bad(answer: httpx.Response, status: int = 422) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] and body["message"]
    return str(body["message"])


async def test_browse_unsideline_and_purge(
    kind: str, real_services: RealServices, unique: str
) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    async with real_world(kind, real_services, unique) as world:
        world.hook.behaviour = lambda mid, n: (400 if mid < "x3" else 422, {})
        sub = await subscribe(world, retry=NO_RETRY)
        ids = [await produce(world, f"x{i}", f"g{i}") for i in range(6)]
        async with Running(world, sub), control_plane(world) as api:
            await _dlq_size(api, 6)
            # browse: paging both ways, filters
            # (groups fail in parallel: the DLQ's order is the order they were dead-lettered)
            newest = [m["message_id"] for m in await _all(api, limit=2)]
            oldest = await _all(api, order="oldest", limit=4)
            assert [m["message_id"] for m in oldest] == newest[::-1]
            assert sorted(newest) == ids
            first = next(m for m in oldest if m["message_id"] == "x0")
            assert (first["attempts"], first["last_status"], first["group_id"]) == (1, 400, "g0")
            assert first["payload_base64"] == "eDA=" and first["payload_size"] == 2
            assert first["first_failed_at"] and first["last_failed_at"] and first["topic"] == "p/t"
            assert sorted(m["message_id"] for m in await _all(api, status=422)) == ids[3:]
            assert [m["message_id"] for m in await _all(api, group="g4")] == ["x4"]
            # bad browse input: clear 4xx
            _bad(await api.get("/s/dlq/messages", params={"failed_after": soon}))
            _bad(await api.get("/s/dlq/messages", params={"cursor": "nonsense"}), 400)
            _bad(await api.get("/s/dlq/messages", params={"limit": 0}))
            _bad(await api.get("/s/dlq/messages", params={"order": "sideways"}))
            _bad(await api.get("/nope/dlq/messages"), 404)
            # unsideline: bad selectors, unknown ids
            post = api.post
            _bad(await post("/s/dlq/messages/unsideline", json={}))
            both = {"message_ids": ["x0"], "group_ids": ["g1"]}
            assert "one selector" in _bad(await post("/s/dlq/messages/unsideline", json=both))
            future = {"failed_before": soon}
            assert "future" in _bad(await post("/s/dlq/messages/unsideline", json=future))
            unknown = await post("/s/dlq/messages/unsideline", json={"message_ids": ["zz"]})
            assert unknown.json() == {"unsidelined": 0, "remaining": 0}
            # unsideline by id, by group, by time (in pages), the endpoint healed
            world.hook.behaviour = lambda mid, n: (204, {})
            one = await post("/s/dlq/messages/unsideline", json={"message_ids": ["x0"]})
            assert one.json() == {"unsidelined": 1, "remaining": 0}
            group = await post("/s/dlq/messages/unsideline", json={"group_ids": ["g1"]})
            assert group.json() == {"unsidelined": 1, "remaining": 0}
            now = datetime.now(UTC).isoformat()
            page = await post("/s/dlq/messages/unsideline", json={"failed_before": now, "limit": 3})
            assert page.json() == {"unsidelined": 3, "remaining": 1}
            rest = await post("/s/dlq/messages/unsideline", json={"failed_before": now})
            assert rest.json() == {"unsidelined": 1, "remaining": 0}
            await until(lambda: len(world.hook.got) == 6, 60, "every unsidelined message")
            assert all(attempt == 1 for _, _, _, attempt in world.hook.got)  # attempts reset
            await _dlq_size(api, 0)
            # purge: selectors, limit, all
            world.hook.behaviour = lambda mid, n: (400, {})
            more = [await produce(world, f"y{i}", f"h{i}") for i in range(5)]
            await _dlq_size(api, 5)
            delete = api.delete
            _bad(await delete("/s/dlq/messages"))
            _bad(await delete("/s/dlq/messages", params={"message_id": "y0", "all": "true"}))
            _bad(await delete("/s/dlq/messages", params={"failed_before": soon}))
            none = await delete("/s/dlq/messages", params={"message_id": "nope"})
            assert none.json() == {"purged": 0, "remaining": 0}
            by_id = await delete("/s/dlq/messages", params={"message_id": ["y0", "y1"]})
            assert by_id.json() == {"purged": 2, "remaining": 0}
            by_group = await delete("/s/dlq/messages", params={"group_id": "h2"})
            assert by_group.json() == {"purged": 1, "remaining": 0}
            limited = await delete("/s/dlq/messages", params={"all": "true", "limit": 1})
            assert limited.json() == {"purged": 1, "remaining": 1}
            last = await delete("/s/dlq/messages", params={"all": "true"})
            assert last.json() == {"purged": 1, "remaining": 0}
            assert await _all(api) == []
    assert sorted(world.hook.delivered()) == sorted(ids)
    assert not set(more) & set(world.hook.delivered())
