"""The admin API refuses nonsense circuit breaker policies with 422 naming the field, and
stores a sane one as written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.control_plane import create_shop, embedded_control_plane

SUBS = "/v1/projects/shop/subscriptions"
BASE = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client)
        yield cp.client


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        ({"circuit_breaker": {"failure_rate_threshold": 50}}, "failure_rate_threshold", "1"),
        ({"circuit_breaker": {"failure_rate_threshold": 0}}, "failure_rate_threshold", "0"),
        ({"circuit_breaker": {"min_calls": 0}}, "min_calls", "1"),
        ({"circuit_breaker": {"probe_per_second": -1}}, "probe_per_second", "0"),
        ({"circuit_breaker": {"cooldown_seconds": 0}}, "cooldown_seconds", "1"),
        (
            {"circuit_breaker": {"probe_per_second": 5, "floor_per_second": 2}},
            "circuit_breaker",
            "probe_per_second (5) must not exceed floor_per_second (2)",
        ),
        (
            {"rate_limit_per_second": 10, "circuit_breaker": {"floor_per_second": 20}},
            "circuit_breaker",
            "floor_per_second (20) must not exceed rate_limit_per_second (10)",
        ),
    ],
)
async def test_nonsense_is_422_naming_the_field(
    client: httpx.AsyncClient, extra: dict[str, Any], field: str, problem: str
) -> None:
    r = await client.post(SUBS, json={**BASE, **extra})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "validation_failed"
    [found] = body["details"]["fields"]
    assert found["field"].split(".")[-1] == field and problem in found["problem"], found
    assert (await client.get(f"{SUBS}/s1")).status_code == 404


async def test_a_sane_policy_is_stored_as_written(client: httpx.AsyncClient) -> None:
    policy = {
        "enabled": True,
        "failure_rate_threshold": 0.3,
        "window_seconds": 10,
        "min_calls": 5,
        "cooldown_seconds": 5,
        "probe_per_second": 0.5,
        "floor_per_second": 2.0,
    }
    r = await client.post(
        SUBS, json={**BASE, "rate_limit_per_second": 100, "circuit_breaker": policy}
    )
    assert r.status_code == 201, r.text
    assert (await client.get(f"{SUBS}/s1")).json()["circuit_breaker"] == policy
