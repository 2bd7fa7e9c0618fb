"""Issue 39's last gap on real ZooKeeper and Kafka: a grouped subscription whose endpoint
always answers 500, under the default circuit policy (20 calls in 30 s). Its few heads fail
every attempt, fewer calls than the policy needs; the followers sidelined behind them open
the circuit. The status, the subscription list (API and ``httpbus sub list``) and the
overview (API and ``httpbus overview``) show what its DLQ holds as the worker counts it
(size, failed heads, sidelined), the open circuit and the last error; a purge (CLI) and an
unsideline (API) by the control plane are followed by the count, and so is a purge while
the subscription is paused (no runner: the worker follows the DLQ without one).

The control plane is served over HTTP (its own ZooKeeper session, in a thread) so the CLI
reaches it as it reaches any control plane; the worker runs in the test process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from typer.testing import Result

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.model import CircuitBreakerPolicy, RetryPolicy
from tests.support.cli import httpbus, ok
from tests.support.contract_api import served
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import worker_in_process
from tests.support.world import TOKEN, World, kafka_world, record, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
GROUPS, PER_GROUP = 5, 8
SUB = "/v1/projects/p/subscriptions/s"


async def _cli(url: str, *args: str) -> str:
    """``httpbus *args`` (in a thread: the worker runs on this loop meanwhile)."""
    result: Result = await asyncio.to_thread(httpbus, url, *args)
    return ok(result)


async def _settled(api: httpx.AsyncClient) -> dict[str, Any] | None:
    """The status once every message is in the DLQ, counted by the worker, and the circuit
    is open."""
    status: dict[str, Any] = (await api.get(f"{SUB}/status")).json()
    dlq = status.get("dlq") or {}
    done = (
        (status.get("circuit") or {}).get("state") == "open"
        and dlq.get("counted_by") == "worker"
        and dlq.get("failed_heads") == GROUPS
        and dlq.get("size") == GROUPS * PER_GROUP
    )
    return status if done else None


async def _counted(api: httpx.AsyncClient, size: int) -> dict[str, Any] | None:
    """The list's row once the worker's count says ``size`` (the list reads no DLQ)."""
    (row,) = (await api.get("/v1/projects/p/subscriptions")).json()["items"]
    return row if (row.get("dlq") or {}).get("size") == size else None


async def _stored(api: httpx.AsyncClient) -> dict[str, Any]:
    found: dict[str, Any] = (await api.get(f"{SUB}/dlq/messages/summary")).json()
    return found


def _settings(world: World) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        admin_token=TOKEN,
        metastore=world.zk,
        clusters={world.cluster: world.config},
        default_cluster=world.cluster,
        assign_interval_s=0.2,
    )


async def test_an_always_failing_grouped_subscription_shows_its_dlq_and_open_circuit(
    real_services: RealServices, unique: str
) -> None:
    started = time.monotonic()
    async with kafka_world(real_services, unique, partitions=2, grouped=True) as world:
        world.hook.behaviour = lambda mid, n: (500, {})
        await subscribe(
            world,
            retry=RetryPolicy(max_attempts=2, backoff="fixed", initial_delay_ms=100),
            # the defaults but the cooldown, so it stays open while the test looks
            circuit_breaker=CircuitBreakerPolicy(cooldown_seconds=600),
        )
        records = [record(f"m{g}-{i}", f"g{g}") for i in range(PER_GROUP) for g in range(GROUPS)]
        for result in await world.store.produce_many(world.storage, records):
            assert not isinstance(result, Exception), result
        options = {"commit_every_s": 0.2, "lock_retry_s": 0.2, "status_interval_s": 0.2}
        with served(create_app(_settings(world))) as url:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                worker_in_process(world.meta, world.stores, f"w-{unique}", **options),
                httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as api,
            ):
                try:
                    status = await until(lambda: _settled(api), 40, "every message in the DLQ")
                except AssertionError:
                    seen = (await api.get(f"{SUB}/status")).json()
                    raise AssertionError(
                        {k: seen.get(k) for k in ("dlq", "circuit", "lag", "totals")}
                    ) from None
                attempted = {r.id for r in world.hook.requests}
                assert len(attempted) == GROUPS  # only the heads were ever sent
                totals = status["totals"]
                assert totals["failed"] == GROUPS * 2  # fewer calls than min_calls (20)
                assert (totals["dead_lettered"], totals["sidelined"]) == (GROUPS, 35)
                stored = await _stored(api)
                dlq = status["dlq"]
                assert (dlq["size"], dlq["failed_heads"], dlq["sidelined"]) == (
                    stored["size"],
                    stored["failed_heads"],
                    stored["sidelined"],
                )
                assert dlq["sidelined"] == GROUPS * (PER_GROUP - 1)
                assert status["last_failure"]["status"] == 500
                assert "500" in status["last_failure"]["error"]

                # the list: API and CLI
                (row,) = (await api.get("/v1/projects/p/subscriptions")).json()["items"]
                assert row["circuit"] == "open" and row["last_failure"]["status"] == 500
                assert (row["dlq"]["size"], row["dlq"]["sidelined"]) == (40, 35)
                listed = await _cli(url, "sub", "list", "p")
                assert "circuit open" in listed and "40 (5 failed, 35 sidelined)" in listed
                assert "HTTP 500" in listed

                # the overview: API and CLI
                seen = (await api.get("/v1/overview")).json()
                (failing,) = [r for r in seen["failing"] if r["subscription"] == "s"]
                assert failing["circuit"] == "open" and failing["last_failure"]["status"] == 500
                assert (failing["dlq"]["size"], failing["dlq"]["sidelined"]) == (40, 35)
                (growing,) = [r for r in seen["dlq_growing"] if r["subscription"] == "s"]
                assert growing["last_hour"] == 40  # heads and followers: the chart is not flat
                overview = await _cli(url, "overview")
                assert "p/s" in overview and "dlq 40 (5 failed, 35 sidelined)" in overview
                status_text = await _cli(url, "sub", "status", "p", "s")
                assert "dlq      40 (5 failed, 35 sidelined)" in status_text
                assert "HTTP 500" in status_text

                # a purge (CLI) and an unsideline (API): the worker's count follows
                await _cli(url, "dlq", "purge", "p", "s", "--group", "g0", "--yes")
                row = await until(lambda: _counted(api, 40 - PER_GROUP), 15, "the purge counted")
                assert row["dlq"]["sidelined"] == 35 - (PER_GROUP - 1)
                r = await api.post(f"{SUB}/dlq/messages/unsideline", json={"group_ids": ["g1"]})
                assert r.json()["unsidelined"] == PER_GROUP, r.text
                left = 40 - 2 * PER_GROUP
                row = await until(lambda: _counted(api, left), 15, "the unsideline counted")
                assert row["dlq"]["failed_heads"] == GROUPS - 2
                assert (await _stored(api))["size"] == left
                status = (await api.get(f"{SUB}/status")).json()
                assert status["dlq"]["size"] == left and status["dlq"]["counted_by"] == "worker"
                listed = await _cli(url, "sub", "list", "p")
                assert f"{left} (3 failed, {left - 3} sidelined)" in listed

                # paused, no runner: the worker still follows the DLQ, a purge is counted
                assert (await api.post(f"{SUB}/stop")).status_code == 200
                r = await api.delete(f"{SUB}/dlq/messages", params={"group_id": "g2"})
                assert r.json()["purged"] == PER_GROUP, r.text
                left -= PER_GROUP
                row = await until(lambda: _counted(api, left), 15, "the paused purge counted")
                assert row["dlq"]["live"] is True and row["dlq"]["failed_heads"] == GROUPS - 3
                status = (await api.get(f"{SUB}/status")).json()
                assert status["state"] == "paused" and status["dlq"]["counted_by"] == "worker"
    assert time.monotonic() - started < 60
