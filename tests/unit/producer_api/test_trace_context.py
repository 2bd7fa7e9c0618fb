"""W3C trace context (issue 18): ``traceparent`` and ``tracestate`` sent with a publish reach
the endpoint byte for byte, single and batch, like an X- header."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.model import Endpoint, Subscription
from delivery_workers.sender import Delivery, build_request
from tests.support.producer import ADMIN, ProducerEnv, produce_url, producer_env

TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[ProducerEnv]:
    async with producer_env(tmp_path, {"orders": {}}) as found:
        yield found


def _sent(env: ProducerEnv, stored: object) -> dict[str, str]:
    sub = Subscription(
        project="shop",
        name="s",
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url="https://hooks.example.com/in"),  # type: ignore[arg-type]
        signing_secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    request = build_request(Delivery(sub, "shop/orders", stored), 1_700_000_000)  # type: ignore[arg-type]
    return {name.lower(): value for name, value in request.headers}


async def test_trace_context_reaches_the_endpoint_unchanged(env: ProducerEnv) -> None:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = await env.client.post(produce_url("orders"), content=b"{}", headers={**auth, **TRACE})
    assert r.status_code == 201, r.text
    batch = {"messages": [{"payload": "{}", "headers": TRACE}]}
    r = await env.client.post(produce_url("orders") + "/batch", json=batch, headers=auth)
    assert r.status_code == 200, r.text
    stored = await env.stored("orders")
    assert len(stored) == 2
    for message in stored:
        sent = _sent(env, message)
        assert {k: sent[k] for k in TRACE} == TRACE
