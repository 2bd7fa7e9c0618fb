"""Test events (``core.sample_event``): the worker that holds a subscription (its whole, or its
shard 0) answers each request under ``/test-events`` for it (one watch per worker), by
sending the event through the sender every delivery of this worker uses, so it is built,
signed and guarded exactly as a real delivery (``X-Attempt: 1``, one more header:
``X-Test: true``). It is not a message of the topic: nothing is stored, committed, retried
or audited, and a paused or disabled subscription answers too (its endpoint may be what is
being debugged)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from core.envelope import CONTENT_TYPE, MESSAGE_ID, PRODUCED_AT
from core.errors import HttpbusError
from core.model import Subscription
from core.result import DeliveryResult
from core.sample_event import CONTENT_TYPE as JSON
from core.sample_event import (
    MAX_ANSWER_CHARS,
    TEST_HEADER,
    SampleNode,
    SampleRequest,
    SampleResult,
    sample_payload,
)
from core.tasks import TaskSet, cancel
from metastore import paths
from metastore.catalog import Catalog
from segments.protocol import Stored

from .sender import Delivery, EndpointSender

log = logging.getLogger(__name__)
RESCAN_S = 0.5  # how often the requests are matched again with what this worker holds


async def serve(
    catalog: Catalog,
    sender: EndpointSender,
    member: str,
    holds: Callable[[str, str], bool],
    tasks: TaskSet,
) -> None:
    """Answer, until cancelled, the test events of every subscription ``holds(project,
    name)`` says this worker answers for: one watch on the requests' parent for the whole
    worker, not one per subscription it holds (10^5 watches at platform scale,
    bench/scale.py)."""
    answering: set[str] = set()
    listed: list[str] = []
    changed = asyncio.Event()

    async def follow() -> None:
        async for children in catalog.store.watch_children(paths.TEST_EVENTS):
            listed[:] = children
            changed.set()

    follower = asyncio.create_task(follow())
    try:
        while not follower.done():
            # Also every RESCAN_S: a request that came before this worker held its
            # subscription (just assigned, or moved here) is answered once it does.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESCAN_S):
                    await changed.wait()
            changed.clear()
            for child in listed:
                project, _, name = child.partition(":")
                if child not in answering and holds(project, name):
                    answering.add(child)
                    tasks.spawn(_answer(catalog, sender, member, project, name, answering))
        follower.result()
    finally:
        await cancel(follower)


async def _answer(
    catalog: Catalog,
    sender: EndpointSender,
    member: str,
    project: str,
    name: str,
    answering: set[str],
) -> None:
    path = paths.test_event(project, name)
    try:
        node = await catalog.store.get(path)
        if node is None:
            return
        asked = SampleNode.model_validate_json(node.data)
        if asked.result is not None:
            return
        sub = await catalog.get_subscription(project, name)
        result = await send(sender, sample(sub, asked.request), member)
        done = asked.model_copy(update={"result": result})
        await catalog.store.update(
            path, done.model_dump_json().encode(), expected_version=node.version
        )
    except (HttpbusError, ValueError) as exc:  # gone, changed or malformed: the asker times out
        log.warning("test event of %s/%s not answered: %s", project, name, exc)
    finally:
        answering.discard(f"{project}:{name}")


def sample(sub: Subscription, request: SampleRequest) -> Delivery:
    """The test event as a delivery of ``sub`` (attempt 1)."""
    now_ms = int(time.time() * 1000)
    qualified = f"{sub.topic_project}/{sub.topic}"
    headers = (
        (MESSAGE_ID, f"test_{request.id}".encode()),
        (CONTENT_TYPE, JSON.encode()),
        (PRODUCED_AT, str(now_ms).encode()),
        (TEST_HEADER, b"true"),
    )
    body = sample_payload(request, f"{sub.project}/{sub.name}", qualified)
    message = Stored(partition=0, position=0, timestamp_ms=now_ms, value=body, headers=headers)
    return Delivery(sub, qualified, message)


async def send(sender: EndpointSender, delivery: Delivery, member: str) -> SampleResult:
    """Send it once and say how it went."""
    started = time.perf_counter()
    try:
        result = await sender.send(delivery)
    except Exception as exc:  # a bug must not leave the asker waiting for nothing
        log.exception("test event %s failed in the worker", delivery.message_id)
        result = DeliveryResult.from_exception(exc, time.perf_counter() - started)
    answer = result.answer
    return SampleResult(
        message_id=delivery.message_id,
        delivered=result.succeeded,
        status=result.status,
        latency_ms=round(result.latency_s * 1000, 1),
        error=result.error,
        answer=answer[:MAX_ANSWER_CHARS] if answer else answer,
        worker=member,
    )
