"""A worker's runner restarts after an error, and never after it was stopped: when a stopped
runner's clean-up fails (the metastore is away), the clean-up's error replaces the
cancellation, and restarting on it let a worker deliver a subscription it no longer held
(tests/integration/test_zombie_worker_real.py, a paused worker resumed with its session
expired)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from core.errors import MetaStoreUnavailable
from core.model import Subscription
from delivery_workers import running as running_module
from delivery_workers.running import RestartBackoff, RunnerOptions, Running
from delivery_workers.stats import RunnerStats
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from tests.support.until import until
from tests.support.world import subscription

SUB = subscription(
    "s0", "http://receiver.test/hook", project="shop", topic_project="shop", topic="orders"
)


class TooManyStarts(BaseException):
    """Ends a runner loop that would restart for ever (not an ``Exception``: never retried)."""


class FakeRunner:
    """Runs until cancelled; its clean-up then fails as a last commit does with the
    metastore away. ``first_fails``: the first one also fails on its own at once."""

    started: list[FakeRunner] = []
    first_fails = False

    def __init__(self, *_: Any, **__: Any) -> None:
        self.stats = RunnerStats()
        FakeRunner.started.append(self)
        if len(FakeRunner.started) > 3:
            raise TooManyStarts

    async def run(self) -> None:
        n = len(FakeRunner.started)
        if FakeRunner.first_fails and n == 1:
            raise MetaStoreUnavailable("zookeeper failed on /topics: ConnectionLoss")
        if n > 1 + FakeRunner.first_fails:
            return  # one more than expected: ends at once, so a loop that restarts for ever
            # ends on TooManyStarts instead of hanging the test
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)
            raise MetaStoreUnavailable("zookeeper failed on /status: ConnectionLoss")


class FakeCatalog:
    async def get_subscription(self, project: str, name: str) -> Subscription:
        return SUB


class FakeDisabling:
    async def watch(self, key: str, sub: Subscription) -> None:
        return None


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> type[FakeRunner]:
    FakeRunner.started = []
    FakeRunner.first_fails = False
    monkeypatch.setattr(running_module, "SubscriptionRunner", FakeRunner)
    return FakeRunner


async def _following(meta: EmbeddedMetaStore) -> tuple[Running, asyncio.Task[None]]:
    nothing = cast(Any, None)
    running = Running(
        metastore=meta,
        catalog=cast(Any, FakeCatalog()),
        stores={},
        reader=nothing,
        sender=nothing,
        bodies=nothing,
        disabling=cast(Any, FakeDisabling()),
        member_id="w-1",
        audit=None,
        options=RunnerOptions(error_retry_s=0.05),
    )
    await meta.create(paths.subscription("shop", "s0"), SUB.model_dump_json().encode())
    return running, asyncio.create_task(running.follow("shop/s0", "shop", "s0"))


async def test_a_runner_stopped_while_its_clean_up_fails_is_not_started_again(
    tmp_path: Path, fake_runner: type[FakeRunner]
) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        running, follow = await _following(meta)
        await until(lambda: len(fake_runner.started) == 1, 5, "the runner started")
        follow.cancel()
        async with asyncio.timeout(5):  # waited for ever: the runner had restarted
            await asyncio.gather(follow, return_exceptions=True)
        assert len(fake_runner.started) == 1
        assert running.runners == {}


async def test_a_runner_failing_on_its_own_is_started_again(
    tmp_path: Path, fake_runner: type[FakeRunner]
) -> None:
    fake_runner.first_fails = True
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        running, follow = await _following(meta)
        await until(lambda: len(fake_runner.started) == 2, 5, "a second runner")
        follow.cancel()
        async with asyncio.timeout(5):
            await asyncio.gather(follow, return_exceptions=True)
        assert len(fake_runner.started) == 2
        assert running.runners == {}


def test_a_runner_failing_again_and_again_waits_longer_each_time() -> None:
    """1 000 units whose runners failed at once restarted every second each, for ever:
    most of a core (bench/scale.py). The wait doubles up to a bound; a runner that ran a
    while starts the row over."""
    now = [0.0]
    backoff = RestartBackoff(1.0, steady_s=60.0, clock=lambda: now[0])
    waits = []
    for _ in range(6):
        backoff.started()
        waits.append(backoff.failed())
        now[0] += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # 8 s at most: back soon after an outage
    backoff.started()
    now[0] += 60.0  # it ran a minute, then failed
    assert backoff.failed() == 1.0
