"""A leader is fenced by its metastore session's lease (control_plane/leaders/election.py):
when the lease lapses (the connection is down: the server may expire the session while the
process cannot hear of it) the role steps down at once, before another process could be
elected in its place, and leads again once the session is confirmed. Before this, a leader
cut off from ZooKeeper went on leading through the partition (docs/reliability.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from control_plane.leaders.election import LeaderElection
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from tests.support.until import until


class _Role(LeaderElection):
    def __init__(self, meta: EmbeddedMetaStore) -> None:
        super().__init__(meta, "fenced", "m1")
        self.terms = 0
        self.ended = 0

    async def lead(self, lost: asyncio.Event) -> None:
        self.terms += 1
        await lost.wait()
        self.ended += 1


async def test_a_leader_steps_down_when_its_lease_lapses_and_leads_again_once_confirmed(
    tmp_path: Path,
) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db"), poll_interval_s=0.02) as meta:
        role = _Role(meta)
        async with role:
            await until(lambda: role.is_leader and role.terms == 1, 5, "the role leading")
            meta.lease.suspend()  # what a suspended ZooKeeper connection does
            await until(lambda: role.ended == 1, 5, "the leader stepping down")
            # Its node is still its own (the session lives): the next heartbeat confirms the
            # lease, and the same process leads again.
            await until(lambda: role.is_leader and role.terms == 2, 10, "the role led again")
            node = await meta.get(paths.leader("fenced"))
            assert node is not None and b"m1" in node.data


class _Stuck(LeaderElection):
    """A role whose round is blocked (a metastore call that fails only at its timeout)."""

    def __init__(self, meta: EmbeddedMetaStore) -> None:
        super().__init__(meta, "stuck", "m1")
        self.cancelled = asyncio.Event()

    async def lead(self, lost: asyncio.Event) -> None:
        try:
            await asyncio.Event().wait()  # never looks at lost
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def test_a_round_blocked_when_the_lease_lapses_is_cancelled(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db"), poll_interval_s=0.02) as meta:
        async with _Stuck(meta) as role:
            await until(lambda: role.is_leader, 5, "the role leading")
            meta.lease.suspend()
            await until(lambda: role.cancelled.is_set(), 5, "the blocked round cancelled")
