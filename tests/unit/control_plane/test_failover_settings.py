"""A topic's standby clusters (issue 20, ``failover``): set on create and update through the
admin API and the CLI, checked against the configured clusters, shown in the timeline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from core.model import Failover, FailoverMode, Segment, SegmentState
from tests.support.cli import as_json, embedded_control_plane_url, httpbus, ok, one_line_error
from tests.support.control_plane import embedded_control_plane


def test_the_model_names_each_cluster_once_and_defaults_to_ordered() -> None:
    assert Failover(clusters=("pulsar-main",)).mode is FailoverMode.ORDERED
    with pytest.raises(ValidationError, match="once"):
        Failover(clusters=("a", "a"))
    with pytest.raises(ValidationError):
        Failover(clusters=())


def test_an_unsealed_segment_is_not_finished() -> None:
    seg = Segment(
        id=1, cluster="k", backend="kafka", storage_topic="t", partitions=1,
        state=SegmentState.UNSEALED,
    )  # fmt: skip
    assert not seg.finished


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with embedded_control_plane(tmp_path) as cp:
        assert (await cp.client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        yield cp.client


async def test_set_on_create_and_update_through_the_api(client: httpx.AsyncClient) -> None:
    body = {"name": "orders", "failover": {"clusters": ["embedded"], "mode": "available"}}
    created = await client.post("/v1/projects/shop/topics", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["failover"] == {"clusters": ["embedded"], "mode": "available"}
    timeline = (await client.get("/v1/projects/shop/topics/orders/segments")).json()
    assert timeline["failover"]["mode"] == "available"
    update = {"version": created.json()["version"], "failover": None}
    cleared = await client.put("/v1/projects/shop/topics/orders", json=update)
    assert cleared.status_code == 200 and cleared.json()["failover"] is None


async def test_unknown_standby_clusters_are_refused_naming_the_field(
    client: httpx.AsyncClient,
) -> None:
    body = {"name": "orders", "failover": {"clusters": ["nowhere"]}}
    refused = await client.post("/v1/projects/shop/topics", json=body)
    assert refused.status_code == 422 and "failover.clusters" in refused.text
    created = await client.post("/v1/projects/shop/topics", json={"name": "orders"})
    update = {"version": created.json()["version"], "failover": {"clusters": ["nowhere"]}}
    refused = await client.put("/v1/projects/shop/topics/orders", json=update)
    assert refused.status_code == 422 and "nowhere" in refused.text
    bad_mode = {"version": created.json()["version"], "failover": {"clusters": ["embedded"],
                "mode": "sometimes"}}  # fmt: skip
    assert (await client.put("/v1/projects/shop/topics/orders", json=bad_mode)).status_code == 422


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def test_the_cli_sets_shows_and_clears_it(url: str) -> None:
    ok(httpbus(url, "project", "create", "p"))
    out = ok(httpbus(url, "topic", "create", "p", "t", "--failover-cluster", "embedded"))
    assert "failover ordered: embedded" in out, out
    assert "failover: ordered: embedded" in ok(httpbus(url, "topic", "show", "p", "t"))
    topic = as_json(
        httpbus(url, "topic", "update", "p", "t", "--failover-cluster", "embedded",
                "--failover-mode", "available", "-o", "json")
    )  # fmt: skip
    assert topic["failover"] == {"clusters": ["embedded"], "mode": "available"}
    status = ok(httpbus(url, "topic", "failover", "status", "p", "t"))
    assert "p/t: failover available to embedded" in status and "active segment 1" in status
    assert (
        as_json(httpbus(url, "topic", "failover", "status", "p", "t", "-o", "json"))["unsealed"]
        == []
    )
    topic = as_json(httpbus(url, "topic", "update", "p", "t", "--no-failover", "-o", "json"))
    assert topic["failover"] is None
    one_line_error(
        httpbus(url, "topic", "update", "p", "t", "--failover-cluster", "nowhere"), 1, "422"
    )
