"""Endpoint lifecycle on the embedded backend (delivery_workers/disabling.py): what counts as
a failure, the failing streak and its record in the metastore, and a Worker that disables a
subscription whose endpoint failed every attempt for ``disable_after_s`` (on an injected
clock), notifies the project once, signed, keeps the position and delivers everything after
``enable``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from control_plane.services.operations import SubscriptionOps
from core.audit import AuditType
from core.model import (
    CircuitBreakerPolicy,
    Endpoint,
    NoticeKind,
    Notifications,
    Project,
    RetryPolicy,
    Subscription,
)
from core.result import DeliveryResult, ErrorKind
from delivery_workers.app import WorkerCollector
from delivery_workers.disabling import (
    Change,
    EndpointWatch,
    FailureStreak,
    endpoint_failed,
)
from delivery_workers.worker import Worker
from metastore import paths
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from tests.support.clock import ManualClock
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until
from tests.support.workers import WorkersWorld, workers_world
from tests.support.world import subscription

NOTIFY_SECRET = "whsec_bm90aWZpY2F0aW9uLXNlY3JldC0zMi1ieXRlcyEh"
NOW = 1_800_000_000.0  # the manual clock's start: a wall-clock time, in seconds


def test_what_counts_as_an_endpoint_failure() -> None:
    assert endpoint_failed(DeliveryResult.from_response(204, {}, 0.01)) is False
    assert endpoint_failed(DeliveryResult.from_response(503, {}, 0.01)) is True
    assert endpoint_failed(DeliveryResult.from_response(404, {}, 0.01)) is True
    assert endpoint_failed(DeliveryResult.from_response(429, {}, 0.01)) is True
    pacing = DeliveryResult.from_response(429, {"Retry-After": "3"}, 0.01)
    assert endpoint_failed(pacing) is None  # alive, pacing us
    assert endpoint_failed(DeliveryResult.failure(ErrorKind.TIMEOUT, "t")) is True
    assert endpoint_failed(DeliveryResult.failure(ErrorKind.CONNECTION, "c")) is True
    assert endpoint_failed(DeliveryResult.invalid("bad secret")) is None  # never sent
    assert endpoint_failed(DeliveryResult.failure(ErrorKind.UNEXPECTED, "bug")) is None


def test_the_streak_begins_at_the_first_failure_after_a_success() -> None:
    streak = FailureStreak()
    assert streak.record(False, 10.0) is None
    assert streak.record(True, 20.0) is Change.BEGAN
    assert streak.record(True, 50.0) is None
    assert streak.since_s == 20.0 and streak.lasted(50.0) == 30.0
    assert not streak.due(60, 50.0) and streak.due(30, 50.0)
    assert not streak.due(None, 10_000.0)  # disable_after_s null: never
    assert streak.record(False, 55.0) is Change.ENDED
    assert streak.since_s is None and not streak.due(1, 1_000.0)
    assert streak.record(True, 70.0) is Change.BEGAN and streak.since_s == 70.0


async def test_the_watch_records_the_streak_and_asks_once_when_due(tmp_path: Path) -> None:
    meta = EmbeddedMetaStore(str(tmp_path / "meta.db"))
    async with meta:
        catalog = Catalog(meta)
        sub = subscription("s", endpoint=Endpoint(url="http://127.0.0.1:9/", disable_after_s=60))
        asked: list[tuple[str, float, str | None]] = []
        pending: list[Any] = []

        async def disable(s: Subscription, since: float, error: str | None) -> None:
            asked.append((s.name, since, error))

        clock = ManualClock(NOW)
        watch = EndpointWatch(sub, catalog, disable, pending.append, clock=clock)
        fail = DeliveryResult.from_response(503, {}, 0.01)

        async def settle() -> None:
            while pending:
                await pending.pop(0)

        watch.record(fail)
        await settle()
        node = await meta.get(paths.endpoint_failing("p", "s"))
        assert node is not None and json.loads(node.data) == {"since_ms": int(clock.now * 1000)}
        began = clock.now
        clock.now += 59
        watch.record(fail)
        await settle()
        assert asked == []
        clock.now += 1
        watch.record(fail)
        watch.record(fail)  # asked once per streak
        await settle()
        assert asked == [("s", began, "HTTP 503")]

        # A new owner (a restart, another worker) adopts the recorded streak.
        again = EndpointWatch(sub, catalog, disable, pending.append, clock=clock)
        await again.load()
        assert again.streak.since_s == began

        watch.record(DeliveryResult.from_response(200, {}, 0.01))  # a success ends it
        await settle()
        assert await meta.get(paths.endpoint_failing("p", "s")) is None
        clock.now += 1_000
        watch.record(fail)  # a new streak: not due yet
        await settle()
        assert len(asked) == 1 and watch.streak.since_s == clock.now


async def _notification_project(world: WorkersWorld, *events: NoticeKind) -> None:
    """Project p with the hook's path ``notify`` as its notification endpoint (for
    ``events``, or the default: disabled only)."""
    project = await world.catalog.get_project("p")
    fields = {
        **project.model_dump(),
        "notification_url": world.hook.url_for("notify"),
        "notification_secret": NOTIFY_SECRET,
    }
    if events:
        fields["notifications"] = Notifications(events=events)
    await world.catalog.update_project(Project.model_validate(fields))


def _failing_fast(window_s: int, url: str) -> dict[str, Any]:
    """A subscription that retries in place every 20 ms, without a breaker: a failing endpoint
    sees an attempt every few milliseconds."""
    return {
        "endpoint": Endpoint(url=url, disable_after_s=window_s),
        "retry": RetryPolicy(max_attempts=1_000, backoff="fixed", initial_delay_ms=20, jitter=0),
        "circuit_breaker": CircuitBreakerPolicy(enabled=False),
    }


async def _worker(
    world: WorkersWorld, member: str, clock: ManualClock, audit: MemoryAudit
) -> Worker:
    return await world.worker(member, audit, notify_backoff_s=(0.05, 0.05), clock=clock)


async def test_a_failing_endpoint_disables_and_enable_delivers_everything(
    tmp_path: Path,
) -> None:
    async with workers_world(tmp_path) as world:
        await _notification_project(world, NoticeKind.DISABLED, NoticeKind.ENABLED)
        clock, audit = ManualClock(NOW), MemoryAudit({AuditType.DISABLED, AuditType.ENABLED})
        world.hook.down.add("s0")
        await world.catalog.create_subscription(
            subscription("s0", **_failing_fast(60, world.hook.url_for("s0")))
        )
        worker = await _worker(world, "w1", clock, audit)
        ids = await world.produce("m", 6)
        failing = paths.endpoint_failing("p", "s0")
        await until(lambda: world.catalog.store.get(failing), what="the streak recorded")
        assert (await world.catalog.get_subscription("p", "s0")).disabled is None
        began = clock.now
        clock.now += 60  # the window has passed: the next failed attempt disables

        async def disabled() -> Subscription | None:
            sub = await world.catalog.get_subscription("p", "s0")
            return sub if sub.disabled is not None else None

        sub = await until(disabled, what="s0 disabled")
        assert sub.disabled is not None
        assert sub.disabled.failing_since.timestamp() == began
        assert sub.disabled.last_error == "HTTP 503" and sub.disabled.by == "w1"
        await until(lambda: "p/s0" not in worker.runners, what="the runner stopped")

        # One notice, signed with the project's notification secret.
        await until(lambda: world.hook.on("notify"), what="the notice")
        [notice] = world.hook.on("notify")
        body = notice.signed_json(NOTIFY_SECRET)
        assert body["type"] == "subscription.disabled"
        assert (body["project"], body["subscription"], body["topic"]) == ("p", "s0", "p/t")
        assert body["enable"] == "POST /v1/projects/p/subscriptions/s0/enable"
        assert [e.type for e in audit.events] == [AuditType.DISABLED]
        assert audit.events[0].failing_since_ms == int(began * 1000)

        ops = SubscriptionOps(world.catalog, world.world.stores, "cp-test")
        status = await ops.status("p", "s0")
        assert status["state"] == "disabled"
        assert status["state_detail"].startswith("disabled (endpoint failing since 20")
        await until(lambda: worker.disabling.notifier.sent == 1, what="the notice acknowledged")
        metrics = {m.name: m for m in WorkerCollector(worker).collect()}
        assert metrics["httpbus_subscription_disabled"].samples[0].value == 1.0
        assert metrics["httpbus_subscription_disablings"].samples[0].value == 1
        assert metrics["httpbus_subscription_endpoint_failing_seconds"].samples[0].value >= 60

        # Disabled survives the worker: a new one holds it and runs nothing.
        await world.stop(worker)
        worker = await _worker(world, "w2", clock, audit)
        # Held first, then seen disabled by the runner's follower (a moment later under load).
        await until(lambda: worker.disabled() == {"p/s0"}, what="w2 holds s0, disabled")
        assert "p/s0" not in worker.runners

        # Enabled: the clock starts over and every message is delivered.
        world.hook.down.clear()
        enabled = await ops.enable("p", "s0")
        assert enabled.disabled is None
        assert await world.catalog.store.get(failing) is None
        await until(lambda: sorted(set(world.hook.ids("s0"))) == sorted(ids), what="all delivered")
        assert [e.type for e in audit.events] == [AuditType.DISABLED, AuditType.ENABLED]
        # ... and the project, which asked for it, hears that it is enabled (once).
        await until(lambda: len(world.hook.on("notify")) == 2, what="the enabled notice")
        body = world.hook.on("notify")[1].signed_json(NOTIFY_SECRET)
        assert (body["type"], body["subscription"], body["worker"]) == (
            "subscription.enabled",
            "s0",
            "w2",
        )
        assert (await ops.status("p", "s0"))["state"] != "disabled"


async def test_a_success_within_the_window_keeps_the_subscription_enabled(
    tmp_path: Path,
) -> None:
    async with workers_world(tmp_path) as world:
        clock, audit = ManualClock(NOW), MemoryAudit({AuditType.DISABLED})
        # Every message fails twice, then succeeds: each success ends the streak.
        world.hook.behaviour = lambda mid, n: (503, {}) if n <= 2 else (204, {})
        await world.catalog.create_subscription(
            subscription("s0", **_failing_fast(60, world.hook.url_for("s0")))
        )
        worker = await _worker(world, "w1", clock, audit)
        ids = await world.produce("m", 3)
        await until(lambda: len(set(world.hook.ids("s0"))) == 3, what="all delivered")
        clock.now += 3_600  # long after: no failure in a row lasted the window
        more = await world.produce("n", 3)
        await until(
            lambda: set(world.hook.ids("s0")) == set(ids + more), what="the next ones delivered"
        )
        assert (await world.catalog.get_subscription("p", "s0")).disabled is None
        assert audit.events == [] and "p/s0" in worker.runners


@pytest.mark.parametrize(
    ("field", "value"),
    [("disable_after_s", 0), ("disable_after_s", 31 * 24 * 3_600), ("timeout_ms", 900_001)],
)
def test_endpoint_bounds(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        Endpoint.model_validate({"url": "http://e.example/", field: value})


def test_endpoint_defaults_and_the_long_timeout() -> None:
    endpoint = Endpoint.model_validate({"url": "http://e.example/", "timeout_ms": 900_000})
    assert endpoint.timeout_ms == 900_000 and endpoint.disable_after_s == 24 * 3_600
    assert Endpoint.model_validate({"url": "http://e.example/", "disable_after_s": None})
    assert Project(name="p").notification_url is None
