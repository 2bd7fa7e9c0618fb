"""A failed commit does not restart the runner (issue 34 item 5): with the storage away, the
runner delivers on from its positions in memory, counts and reports the failures, and the
next commit supersedes the failed ones. Restarting re-read 500 subscriptions' positions at
once as a frozen broker woke (tests/chaos/test_frozen_broker.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from core.errors import StorageUnavailable
from delivery_workers.commit import Committer
from delivery_workers.stats import RunnerStats
from delivery_workers.tracking import CommitPolicy
from segments.reader import commit_group
from tests.support.until import until
from tests.support.world import embedded_world, produce, start_runner, stop_runner, subscribe

COUNT = 20


class _Path:
    """A retry path whose commits fail while ``away`` is set."""

    def __init__(self) -> None:
        self.away = True
        self.tries = self.commits = 0

    async def commit(self, barrier: object = None) -> bool:
        self.tries += 1
        if self.away:
            raise StorageUnavailable("kafka: commit of g on t got no answer within 10s")
        self.commits += 1
        return True


async def test_a_committer_goes_on_after_failed_commits_and_reports_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="delivery_workers.commit")
    policy, path, stats = CommitPolicy(every_n=1, every_s=0.01), _Path(), RunnerStats()
    task = asyncio.create_task(Committer(policy, "p/s", path, stats=stats).run())
    try:
        policy.record()
        # counted once the failure is handled, a moment after the try itself
        await until(lambda: stats.failed_commits >= 3, timeout=5, what="failures counted")
        assert not task.done()  # a failed commit ends neither the committer nor its runner
        assert path.tries >= 3
        assert stats.commit_failing_since_ms is not None
        assert caplog.text.count("commit failed") == 1  # rate-limited
        path.away = False
        await until(lambda: path.commits >= 1, timeout=5, what="the commit once it is back")
        await until(lambda: stats.commit_failing_since_ms is None, timeout=5, what="cleared")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_commits_of_one_runner_never_overtake_each_other() -> None:
    """Two commits at once (the periodic one and a segment's last) are written in turn, so a
    later position is never overtaken by an earlier one."""
    order: list[int] = []

    class Slow:
        calls = 0

        async def commit(self, barrier: object = None) -> bool:
            self.calls += 1
            n = self.calls
            await asyncio.sleep(0.1 if n == 1 else 0)
            order.append(n)
            return True

    committer = Committer(CommitPolicy(), "p/s", Slow())
    await asyncio.gather(committer.commit(), committer.commit())
    assert order == [1, 2]


async def test_a_runner_delivers_on_while_its_commits_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with embedded_world(tmp_path, partitions=2, grouped=False) as world:
        sub = await subscribe(world)
        group = commit_group(sub)
        inner_commit = world.store.commit
        away = asyncio.Event()
        away.set()
        failed: list[dict[int, int]] = []

        async def failing_commit(name: str, group_: str, positions: dict[int, int]) -> None:
            if away.is_set() and group_ == group:
                failed.append(positions)
                raise StorageUnavailable("kafka: commit got no answer within 10s")
            await inner_commit(name, group_, positions)

        monkeypatch.setattr(world.store, "commit", failing_commit)
        runner, task, sender = await start_runner(world, sub, CommitPolicy(every_n=5, every_s=0.05))
        try:
            for i in range(COUNT):
                await produce(world, f"m{i}", None)
            await until(lambda: len(set(world.hook.delivered())) >= COUNT, 10, "delivered")
            await until(lambda: len(failed) >= 3 or task.done(), 10, "failed commits")
            assert not task.done()  # it was: the first failed commit ended the runner
            assert runner.stats.failed_commits == len(failed)
            away.clear()  # the storage is back: the next commit supersedes the failed ones

            async def committed() -> bool:
                found = await world.store.committed(world.storage, group)
                return sum(found.values()) == COUNT

            await until(committed, 10, "all committed once the storage is back")
            assert runner.stats.commit_failing_since_ms is None
        finally:
            await stop_runner(task, sender)
    assert sorted(world.hook.delivered()) == sorted(f"m{i}" for i in range(COUNT))  # once each
