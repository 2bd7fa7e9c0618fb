"""Send a test event (issue 40) on the real ZooKeeper and Kafka: the control plane asks
through ZooKeeper, the worker holding the subscription sends it with its delivery sender, and
a receiver double verifies the Standard Webhooks signature with the subscription's secret
(``core.signing.verify``, as docs/receiving.md shows receivers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.signing import verify
from tests.support.delivery import delivery_world
from tests.support.hook import SECRET
from tests.support.services import RealServices

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.timeout(120)]
SUB = "/v1/projects/shop/subscriptions/receiver"


async def test_a_test_event_reaches_the_receiver_signed_and_marked(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with delivery_world(real_services, unique, tmp_path, "kafka-main") as world:
        world.hook.behaviour = lambda mid, n: (200, {})
        world.hook.answer = lambda path, body: b'{"ok": true}'
        await world.topic("orders", partitions=2)
        await world.subscribe("receiver", "orders")
        await world.running("receiver")
        asked = time.monotonic()
        r = await world.cp.post(f"{SUB}/test-event")
        took_ms = (time.monotonic() - asked) * 1000
        assert r.status_code == 200, r.text
        result = r.json()
        [request] = world.hook.requests
        assert verify(SECRET, dict(request.headers), request.body)  # the receiver's check
        assert not verify("whsec_" + "A" * 43 + "=", dict(request.headers), request.body)
        assert request.headers["X-Test"] == "true"
        assert json.loads(request.body)["type"] == "httpbus.test"
        assert (result["delivered"], result["status"], result["answer"]) == (
            True,
            200,
            '{"ok": true}',
        )
        assert 0 < result["latency_ms"] < 10_000
        print(f"\ntest event: {result['latency_ms']} ms at the endpoint, {took_ms:.0f} ms asked")
        r = await world.cp.get(f"{SUB}/status")
        assert r.json()["totals"]["delivered"] == 0  # not a message of the topic
