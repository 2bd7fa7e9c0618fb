"""Test events (``core.sample_event``): the worker that holds a subscription (its whole, or its
shard 0) watches the subscription's test-event node and answers each request there, by
sending the event through the sender every delivery of this worker uses, so it is built,
signed and guarded exactly as a real delivery (``X-Attempt: 1``, one more header:
``X-Test: true``). It is not a message of the topic: nothing is stored, committed, retried
or audited, and a paused or disabled subscription answers too (its endpoint may be what is
being debugged)."""

from __future__ import annotations

import logging
import time

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
from metastore import paths
from metastore.catalog import Catalog
from segments.protocol import Stored

from .sender import Delivery, EndpointSender

log = logging.getLogger(__name__)


async def serve(
    catalog: Catalog, sender: EndpointSender, member: str, project: str, name: str
) -> None:
    """Answer the test events of ``project/name`` until cancelled."""
    path = paths.test_event(project, name)
    async for node in catalog.store.watch(path):
        if node is None:
            continue
        try:
            asked = SampleNode.model_validate_json(node.data)
            if asked.result is not None:
                continue
            sub = await catalog.get_subscription(project, name)
            delivery = sample(sub, asked.request)
            result = await send(sender, delivery, member)
            done = asked.model_copy(update={"result": result})
            await catalog.store.update(
                path, done.model_dump_json().encode(), expected_version=node.version
            )
        except (HttpbusError, ValueError) as exc:  # gone, changed or malformed: the asker times out
            log.warning("test event of %s/%s not answered: %s", project, name, exc)


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
