"""CloudEvents end to end on real ZooKeeper and Kafka, and on Pulsar, with the CloudEvents SDK
on both sides.

A producer process takes events from the SDK in binary and structured mode, single and
batched, on a grouped topic with ``dedupe_window``: each ``id`` is the message id, each
``partitionkey`` the group, and every event replayed (in another mode, too) is answered as a
duplicate and stored once. Three subscriptions deliver them as CloudEvents (binary,
structured, structured in batches); the SDK parses every delivery back into the event that was
published, each exactly once, every group in order, every request signed over what was sent.
The same test runs once per backend (:data:`~tests.support.world.BACKENDS`): the dedupe window,
the group and the CloudEvents mapping are the producer's, but what is stored, and read back in
order, is each backend's own.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from cloudevents.core.bindings.http import (
    HTTPMessage,
    from_http,
    to_binary_event,
    to_structured_event,
)
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from core.model import BatchPolicy, DeliveryFormat, Endpoint
from reports import migrate
from segments.protocol import Stored
from tests.support.hook import SECRET, Request
from tests.support.processes import producer_processes
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import BACKENDS, Running, World, real_world, subscribe

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("kind", BACKENDS)]

ADMIN = "cloudevents-admin-token-0123456789"
PATH = "/v1/projects/p/topics/t/produce"
GROUPS, PER_MODE = 5, 10
BATCH_MEDIA = "application/cloudevents-batch+json"


def _event(mode: str, i: int) -> CloudEvent:
    return CloudEvent(
        {
            "id": f"{mode}-{i:03d}",
            "source": f"https://shop.example/{mode}",
            "type": "com.example.order.created",
            "subject": f"order {i} (ünï)",
            "partitionkey": f"g{i % GROUPS}",
            "datacontenttype": "application/json",
        },
        {"mode": mode, "i": i},
    )


def _settings(world: World, unique: str, database: str) -> dict[str, Any]:
    return {
        "admin_token": ADMIN,
        "metastore": world.zk.model_dump(),
        "clusters": {world.cluster: world.config.model_dump()},
        "member_id": f"ce-{unique}",
        "dedupe": {"kind": "postgres", "url": database},  # the ids of the dedupe window
    }


async def _publish(client: httpx.AsyncClient, url: str) -> tuple[list[CloudEvent], list[Any]]:
    """Every event of every mode, and then each replayed: the events, and the replays'
    answers (single ones as JSON, the batch's results)."""
    events: list[CloudEvent] = []
    for mode, write in (("binary", to_binary_event), ("structured", to_structured_event)):
        for i in range(PER_MODE):
            event = _event(mode, i)
            message = write(event)
            r = await client.post(url + PATH, headers=message.headers, content=message.body)
            assert r.status_code == 201, r.text
            assert r.json()["message_id"] == event.get_id()
            events.append(event)
    batch = [_event("batch", i) for i in range(PER_MODE)]
    r = await client.post(url + PATH + "/batch", headers=_batch_headers(), content=_array(batch))
    assert r.status_code == 200 and r.json()["accepted"] == PER_MODE, r.text
    events += batch
    # Replays: a binary event again as structured, a structured one as binary, a batch of both.
    replays = [
        await client.post(url + PATH, **_as(to_structured_event(events[0]))),
        await client.post(url + PATH, **_as(to_binary_event(events[PER_MODE]))),
    ]
    r = await client.post(
        url + PATH + "/batch", headers=_batch_headers(), content=_array([events[1], batch[0]])
    )
    return events, [*(x.json() | {"status": x.status_code} for x in replays), *r.json()["results"]]


def _as(message: HTTPMessage) -> dict[str, Any]:
    return {"headers": message.headers, "content": message.body}


def _batch_headers() -> dict[str, str]:
    return {"Content-Type": BATCH_MEDIA}


def _array(events: list[CloudEvent]) -> bytes:
    return b"[" + b",".join(JSONFormat().write(e) for e in events) + b"]"


def _parsed(request: Request) -> list[CloudEvent]:
    headers = {k.lower(): v for k, v in request.headers.items()}
    if headers["content-type"] == BATCH_MEDIA:
        return [
            JSONFormat().read(None, json.dumps(doc).encode()) for doc in json.loads(request.body)
        ]
    event = from_http(HTTPMessage(headers, request.body), JSONFormat())
    assert isinstance(event, CloudEvent)
    return [event]


def _check(received: list[CloudEvent], events: list[CloudEvent], what: str) -> None:
    assert Counter(e.get_id() for e in received) == Counter(e.get_id() for e in events), what
    sent = {e.get_id(): e for e in events}
    for got in received:
        want = sent[got.get_id()]
        assert got.get_source() == want.get_source(), what
        assert got.get_type() == want.get_type(), what
        assert got.get_subject() == want.get_subject(), what
        assert got.get_extension("partitionkey") == want.get_extension("partitionkey"), what
        assert got.get_data() == want.get_data(), what
        assert got.get_time() == want.get_time(), what
    for g in range(GROUPS):
        order = [e.get_id() for e in received if e.get_extension("partitionkey") == f"g{g}"]
        wanted = [e.get_id() for e in events if e.get_extension("partitionkey") == f"g{g}"]
        assert order == wanted, f"{what}: group g{g} out of order"


async def test_cloudevents_published_and_received_with_the_sdk(
    kind: str, real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    migrate.upgrade(postgres_database)
    async with real_world(kind, real_services, unique, partitions=3, grouped=True) as world:
        world.hook.secret = SECRET
        topic = await world.catalog.get_topic("p", "t")
        await world.catalog.update_topic(topic.model_copy(update={"dedupe_window": "10m"}))
        with producer_processes([_settings(world, unique, postgres_database)], tmp_path) as (proc,):
            headers = {"Authorization": f"Bearer {ADMIN}"}
            async with httpx.AsyncClient(headers=headers, timeout=30) as client:
                events, replays = await _publish(client, proc.url)
        assert [r["status"] for r in replays] == [200, 200, 200, 200], replays
        assert all(r["duplicate"] is True for r in replays)
        assert len(await _stored(world)) == len(events)  # every replay stored nothing

        formats = {
            "bin": {"delivery_format": DeliveryFormat.CLOUDEVENTS_BINARY},
            "st": {"delivery_format": DeliveryFormat.CLOUDEVENTS_STRUCTURED},
            "sb": {
                "delivery_format": DeliveryFormat.CLOUDEVENTS_STRUCTURED,
                "batch": BatchPolicy(max_messages=10, max_wait_ms=50),
            },
        }
        subs = [
            await subscribe(world, name, endpoint=_endpoint(world, name), **fields)
            for name, fields in formats.items()
        ]
        async with Running(world, subs[0]), Running(world, subs[1]), Running(world, subs[2]):

            def arrived() -> bool:
                return all(
                    sum(len(_parsed(r)) for r in world.hook.on(name)) >= len(events)
                    for name in formats
                )

            await until(arrived, 120, "every event delivered to the three subscriptions")
        for name in formats:
            received = [e for r in world.hook.on(name) for e in _parsed(r)]
            _check(received, events, name)
        assert world.hook.bad_signatures == 0
        assert max(len(_parsed(r)) for r in world.hook.on("sb")) > 1  # batches, really


async def _stored(world: World) -> list[Stored]:
    """Every message of the world's storage topic. Positions are offsets on Kafka and encoded
    message ids on Pulsar (not dense): read each partition until its end position."""
    found: list[Stored] = []
    for partition, end in (await world.store.end_positions(world.storage)).items():
        position = 0
        while position < end:
            batch = await world.store.read(world.storage, partition, position, timeout=2)
            if not batch:
                break
            found += [m for m in batch if m.position < end]
            position = batch[-1].position + 1
    return found


def _endpoint(world: World, name: str) -> Endpoint:
    return Endpoint(url=world.hook.url_for(name))
