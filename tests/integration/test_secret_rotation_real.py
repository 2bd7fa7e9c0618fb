"""A signing-secret rotation on real ZooKeeper and Kafka: a delivery worker process delivers a
steady stream while the admin API (in the test process, on the same metastore) rotates the
subscription's secret with a short overlap. The worker picks the rotation up without a
restart of its process; during the overlap every delivery verifies with either secret; after
it, only with the new one; and no message is lost through the rotation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from control_plane.leaders.assigner import Assigner
from core.signing import verify
from segments.protocol import Record
from tests.support.control_plane import app_client
from tests.support.hook import SECRET, Request
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
TOKEN = "test-admin-token-0123456789"
NEW = "whsec_" + "QkJC" * 8
OVERLAP_S = 8
EVERY_S = 0.05  # one message produced every 50 ms, before, during and after the overlap


@asynccontextmanager
async def admin_api(world: ProcessWorld) -> AsyncIterator[httpx.AsyncClient]:
    """The control plane's admin API on the world's metastore and Kafka, through ASGI."""
    app = world.control_plane_app(TOKEN)
    async with app_client(app, "http://cp/v1/projects/shop/subscriptions", TOKEN, 60) as client:
        yield client


def _signed_at(request: Request) -> int:
    return int(request.headers["webhook-timestamp"])


def _verifies(secret: str, request: Request) -> bool:
    return verify(secret, dict(request.headers), request.body, now=_signed_at(request))


async def test_during_the_overlap_both_secrets_verify_after_it_only_the_new_one(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with process_world(real_services, unique, tmp_path) as world:
        await world.subscribe("billing")  # signed with SECRET
        [worker] = world.workers([f"w-{unique}"], commit_every_s=0.2, lock_retry_s=0.2)
        produced: list[str] = []
        stop = asyncio.Event()

        async def produce() -> None:
            while not stop.is_set():
                mid = f"m{len(produced)}"
                headers = (("x-message-id", mid.encode()),)
                await world.store.produce(world.storage, Record(mid.encode(), headers=headers))
                produced.append(mid)
                await asyncio.sleep(EVERY_S)

        async with admin_api(world) as api, Assigner(world.meta, world.catalog, "cp", 0.5):
            await worker.ready()
            producing = asyncio.create_task(produce())
            try:
                await until(lambda: len(world.hook.ids("billing")) >= 20, 60, "deliveries")
                rotate_called = time.time()
                body = {"secret": NEW, "overlap_s": OVERLAP_S}
                r = await api.post("/billing/secret:rotate", json=body)
                assert r.status_code == 200, r.text
                [_, old] = r.json()["secrets"]
                assert old["secret"] == SECRET
                ends = datetime.fromisoformat(old["until"].replace("Z", "+00:00")).timestamp()
                # Deliveries keep flowing until well past the overlap's end.
                await until(
                    lambda: any(_signed_at(q) > ends + 2 for q in world.hook.on("billing")),
                    OVERLAP_S + 60,
                    "a delivery signed after the overlap",
                )
            finally:
                stop.set()
                await producing
            every = set(produced)
            await until(lambda: every <= set(world.hook.ids("billing")), 60, "every message")

    requests = world.hook.on("billing")
    dual = [i for i, q in enumerate(requests) if len(q.headers["webhook-signature"].split()) == 2]
    assert dual, "no delivery carried two signatures"
    picked_up = requests[dual[0]]
    assert picked_up.at - rotate_called < 10, "the worker took long to pick the rotation up"
    before = [q for q in requests[: dual[0]] if q.at < rotate_called]
    during = [q for q in requests[dual[0] :] if _signed_at(q) < ends]
    after = [q for q in requests[dual[0] :] if _signed_at(q) >= ends]
    assert before and during and after, (len(before), len(during), len(after))
    for q in before:
        assert _verifies(SECRET, q) and not _verifies(NEW, q), q.id
    for q in during:
        assert _verifies(SECRET, q) and _verifies(NEW, q), q.id
    for q in after:
        assert _verifies(NEW, q) and not _verifies(SECRET, q), q.id
        assert len(q.headers["webhook-signature"].split()) == 1
    print(
        f"\nrotation picked up {picked_up.at - rotate_called:.2f} s after the call; "
        f"{len(before)} deliveries before, {len(during)} during the {OVERLAP_S} s overlap "
        f"(both signatures), {len(after)} after (new only); {len(produced)} messages, "
        f"{len(requests) - len(set(q.id for q in requests))} duplicates"
    )
