"""A subscription's ``batch`` and a filter over ``body`` through the admin API and the CLI:
accepted at create, kept by ``httpbus sub update`` (client.SETTINGS_FIELDS), refused with a
422 naming the field when wrong."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.cli import TOKEN, embedded_control_plane_url, httpbus, ok

HOOK = "http://127.0.0.1:9/hook"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def _create(url: str, **fields: Any) -> httpx.Response:
    body = {"name": "bulk", "topic": "orders", "endpoint": {"url": HOOK}, **fields}
    return httpx.post(f"{url}/v1/projects/pb/subscriptions", json=body, headers=HEADERS)


def test_batch_and_body_filter_are_accepted_kept_and_checked(url: str) -> None:
    ok(httpbus(url, "project", "create", "pb"))
    ok(httpbus(url, "topic", "create", "pb", "orders"))
    refused = _create(url, filter='body.region == "eu" &&')
    assert refused.status_code == 422 and "filter" in refused.text
    too_big = _create(url, batch={"max_messages": 1001})
    assert too_big.status_code == 422 and "batch" in too_big.text
    batch = {"max_messages": 50, "max_bytes": 65536, "max_wait_ms": 200}
    expression = 'body.region == "eu" && body.amount > 100'
    created = _create(url, filter=expression, batch=batch)
    assert created.status_code == 201, created.text
    ok(httpbus(url, "sub", "update", "pb", "bulk", "--max-in-flight", "7"))
    after = httpx.get(f"{url}/v1/projects/pb/subscriptions/bulk", headers=HEADERS).json()
    assert (after["batch"], after["filter"], after["max_in_flight"]) == (batch, expression, 7)
