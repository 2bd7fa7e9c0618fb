"""Where a new subscription starts (``start`` at create, docs/receiving.md), on the real
Kafka and Pulsar: a subscription created after 100 messages receives none of them by default,
all 100 with ``earliest``, and those stored at or after a time with that time. The start is
resolved through the admin API, and the runners read from storage as a worker does."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import httpx
import pytest

from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import (
    BACKENDS,
    SECRET,
    Running,
    World,
    control_plane,
    produce_groups,
    real_world,
)

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_latest_by_default_earliest_all_and_a_time(
    kind: str, real_services: RealServices, unique: str
) -> None:
    async with real_world(kind, real_services, unique) as world:
        first = await produce_groups(world.store, world.storage, 5, 10)
        start = await _a_moment_after_what_was_stored()
        second = await produce_groups(world.store, world.storage, 5, 10, first_seq=10)
        async with control_plane(world) as client:
            for name, fields in (("latest", {}), ("earliest", {"start": "earliest"})):
                await _create(client, world, name, fields)
            await _create(client, world, "time", {"start": start.isoformat()})
        late = await produce_groups(world.store, world.storage, 1, 1, {}, first_seq=99)
        async with AsyncExitStack() as running:
            for name in ("latest", "earliest", "time"):
                world.subs.append(name)
                sub = await world.catalog.get_subscription("p", name)
                await running.enter_async_context(Running(world, sub))
            hook = world.hook
            await until(lambda: hook.ids("latest") == late, 60, "the message after the create")
            await until(lambda: len(hook.ids("earliest")) == 101, 60, "the 100 and the late one")
            await until(lambda: len(hook.ids("time")) == 51, 60, "the 50 after the time")
            await asyncio.sleep(1.0)  # proves that nothing older follows
        assert hook.ids("latest") == late
        assert sorted(hook.ids("earliest")) == sorted(first + second + late)
        assert sorted(hook.ids("time")) == sorted(second + late)
        assert hook.bad_signatures == 0


async def _create(
    client: httpx.AsyncClient, world: World, name: str, fields: dict[str, str]
) -> None:
    body = {"name": name, "topic": "t", "endpoint": {"url": world.hook.url_for(name)}}
    body |= {"signing_secret": SECRET, **fields}
    r = await client.post("http://cp/v1/projects/p/subscriptions", json=body)
    assert r.status_code == 201, r.text


async def _a_moment_after_what_was_stored() -> datetime:
    """A time later (by the millisecond clock the stores stamp with) than every message
    stored so far, and not later than any stored from now on."""
    stored_by = time.time()
    await until(lambda: time.time() * 1000 >= int(stored_by * 1000) + 2, 5, "the clock")
    return datetime.fromtimestamp(time.time(), UTC)
