"""The leading control plane partitioned from ZooKeeper in the middle of a cutover or a
failover (issue 34): two control plane processes, the leader of every role in a network
namespace of its own (scripts/realservices/netns.py), the other in the root namespace; two
producer services publish grouped sequences (4 clients each, one per group) and a worker
delivers them. A cutover to a new Kafka segment of 2 partitions is started through the
follower's API, or a failover (the old segment left UNSEALED, sealed later by the failover
leader) is begun through the facade as the failover leader begins one, on a healthy Kafka.
A kazoo watch of the cutover record drops the packets between the leader's namespace and
ZooKeeper both ways (``cutover-in``: only those from ZooKeeper) once the record says
SWITCH and both producers acknowledged it (a cutover: they drained and wait for the
commit) or both acknowledged PREPARE (a failover). A third member of the producers'
group, the test's own session, holds that phase open until the cut (it acknowledges a
cutover's PREPARE, not its SWITCH; a failover's nothing) and then leaves, so the cut
cannot come after the phase whatever the load (a cutover's SWITCH and COMMIT once ran
through before a busy test's watch saw them); Kafka and the leader's
HTTP port stay reachable. The partition heals 10 s after the cut, once the other control
plane leads and the cutover is over (the leader's 4 s session long expired). In the
``rollback`` case a cutover is cut off in PREPARE as a failover is (a silent member of the
producers' group holds it open, and stays), with a PREPARE timeout shorter than the takeover:
the other control plane must roll it back, and publishing goes on in the old segment.

What must hold: the other control plane is elected once ZooKeeper expires the leader's
session, and completes the cutover (its phase timeouts outlast the takeover); the cut-off
one stops claiming any role before that election (its lease, metastore/lease.py), writes
nothing to the cutover record once cut off (every version seen between the cut and the
election differs from the one before only by producers' acknowledgements) nor after the
heal (the record's version stays), and does not lead again; and the checker
(tests/chaos/checker.py) finds no acknowledged message lost, no group out of order, no
overlap, and publishing and delivery back within 15 s of the heal. It prints how long
publishing stalled and answered 503. Single-node servers; root (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.client import KazooClient

from control_plane.services.cutovers import PRODUCERS, Cutovers
from core.errors import NotFound
from metastore import paths
from metastore.config import open_metastore
from metastore.protocol import MetaStore
from scripts.realservices.netns import Direction, Namespace
from segments.cutover.machine import Cutover, Phase, Timeouts
from segments.cutover.records import CutoverRecords
from tests.chaos.checker import check, from_requests, longest_gap
from tests.chaos.conftest import CutOffWorld
from tests.chaos.faults import ADMIN, Load, merged
from tests.support.machine import load_average
from tests.support.processes import ControlPlaneProcess, ProducerProcess, ready_now
from tests.support.until import until
from tests.support.workers import ProcessWorld

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 4.0  # the leader's session: ZooKeeper expires it 4 s after the cut
OTHER_SESSION_S = 15.0  # the follower's and the producers': no lapse of their own under load
GROUPS = 4  # per producer
PARTITION_S = 10.0  # at least; and until the cutover is over
AFTER_HEAL_S = 6.0
BACK_WITHIN_S = 15.0
SILENT = "silent-member"  # holds the phase of the cut open until the cut (_cut_now)
DONE = {Phase.COMPLETE, Phase.ROLLED_BACK, Phase.ABORTED}
# A phase outlasts the takeover (session expiry and an election): the new leader finishes
# the cutover rather than rolling it back at the deadline.
TIMEOUTS = {
    "cutover_prepare_timeout_s": 30.0,
    "cutover_switch_timeout_s": 20.0,
    "cutover_complete_timeout_s": 30.0,
}
# ... except in the rollback case: PREPARE ends before anyone can take over (the lease
# lapses 2 s after the cut, the session 4 s after it): the new leader finds it late.
ROLLBACK_TIMEOUTS = {**TIMEOUTS, "cutover_prepare_timeout_s": 3.5}
# What a producer's acknowledgement changes in the record; anything else is the coordinator's.
ACK_FIELDS = {"producers", "participants", "updated_at"}


@dataclass
class Versions:
    """Every version of the cutover record the test's watch saw: (time, version, state)."""

    seen: list[tuple[float, int, Cutover]] = field(default_factory=list)

    def coordinator_writes(self, since: float, until_: float) -> list[str]:
        """The versions seen in [since, until_) that changed more than acknowledgements
        (times: ``time.time()``)."""
        found = []
        for (_, _, before), (at, version, after) in zip(self.seen, self.seen[1:], strict=False):
            if since <= at < until_:
                a, b = before.model_dump(), after.model_dump()
                changed = {k for k in a if a[k] != b[k]} - ACK_FIELDS
                if changed:
                    found.append(f"v{version} seen at {at:.3f}: {sorted(changed)}")
        return found


async def _watch_record(world: ProcessWorld, versions: Versions) -> None:
    async for node in world.meta.watch(paths.cutover("shop", "orders")):
        if node is not None:
            state = Cutover.model_validate_json(node.data)
            versions.seen.append((time.time(), node.version, state))


class _Trigger:
    """Partitions ``ns`` from ZooKeeper at the first version of the cutover record for which
    ``when`` is true: a kazoo data watch of its own, whose callback runs on kazoo's thread,
    so the cut does not wait for the test's busy event loop (which lagged by up to 0.6 s
    and saw a failover already COMPLETE)."""

    def __init__(
        self,
        world: ProcessWorld,
        when: Callable[[Cutover], bool],
        ns: Namespace,
        port: int,
        direction: Direction,
    ) -> None:
        self.client = KazooClient(hosts=world.zk.hosts)
        self.path = f"{world.zk.root}{paths.cutover('shop', 'orders')}"
        self.when, self.ns, self.port, self.direction = when, ns, port, direction
        self.cut_at: float | None = None

    def arm(self) -> None:
        self.client.start(10)
        self.client.DataWatch(self.path, self._changed)

    def _changed(self, data: bytes | None, stat: object) -> bool:
        if self.cut_at is None and data and self.when(Cutover.model_validate_json(data)):
            self.ns.partition([self.port], self.direction)
            self.cut_at = time.time()
        return self.cut_at is None  # False: no more calls

    def disarm(self) -> None:
        self.client.stop()
        self.client.close()


async def _leader(world: ProcessWorld, role: str) -> str | None:
    node = await world.meta.get(paths.leader(role))
    return None if node is None else str(json.loads(node.data)["member"])


def _elected_at(world: ProcessWorld, role: str) -> float:
    """When ZooKeeper created the node of ``role``'s current leader (its clock, this host's):
    the moment the other control plane was elected, whatever the test's polls saw."""
    client = KazooClient(hosts=world.zk.hosts)
    client.start(10)
    try:
        _, stat = client.get(f"{world.zk.root}{paths.leader(role)}")
        return float(stat.ctime) / 1000
    finally:
        client.stop()
        client.close()


async def _leads(world: ProcessWorld, role: str, member: str) -> bool:
    return await _leader(world, role) == member


async def _claims(cp: ControlPlaneProcess) -> set[str] | None:
    """The roles ``cp``'s /metrics says it leads (None: no answer)."""
    async with httpx.AsyncClient(timeout=2) as client:
        try:
            r = await client.get(f"{cp.url}/metrics")
        except httpx.HTTPError:
            return None
    found = re.findall(r'^httpbus_control_plane_leader\{role="([^"]+)"\} 1\.0$', r.text, re.M)
    return set(found)


async def _follow_claims(
    cp: ControlPlaneProcess, stop: asyncio.Event, seen: list[tuple[float, set[str]]]
) -> None:
    """Record when ``cp`` said it leads some role, and which (a poll: /metrics has no watch)."""
    while not stop.is_set():
        if roles := await _claims(cp):
            seen.append((time.time(), roles))
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("case", ["cutover", "cutover-in", "failover", "rollback"])
async def test_the_leading_control_plane_partitioned_during_a_cutover(
    case: str, unique: str, tmp_path: Path, cut_off: CutOffWorld
) -> None:
    # "-in": only what ZooKeeper sends the leader is dropped; its own packets still arrive.
    kind, direction = case.removesuffix("-in"), "in" if case.endswith("-in") else "both"
    async with cut_off("cp", SESSION_S) as (ns, world, zk_port):
        await world.subscribe("s0", max_in_flight=8)
        other_zk = world.metastore(session_timeout_s=OTHER_SESSION_S)
        members = {"cut": f"cpn-{unique}", "other": f"cpr-{unique}"}

        def cp_settings(who: str, **more: Any) -> dict[str, Any]:
            return world.settings(
                admin_token=ADMIN,
                member_id=members[who],
                default_cluster="kafka-main",
                trace_index=False,
                database_url=f"sqlite:///{tmp_path / who}.db",
                assign_interval_s=0.5,
                **(ROLLBACK_TIMEOUTS if kind == "rollback" else TIMEOUTS),
                **more,
            )

        cut = ControlPlaneProcess(cp_settings("cut"), tmp_path, ns.exec_argv, ns.address)
        other = ControlPlaneProcess(cp_settings("other", metastore=other_zk), tmp_path)
        producer_settings = world.settings(admin_token=ADMIN, metastore=other_zk)
        producers = [
            ProducerProcess({**producer_settings, "member_id": f"p{i}-{unique}"}, tmp_path)
            for i in range(2)
        ]
        started: list[ProducerProcess] = [cut, other, *producers]
        versions, stop_claims = Versions(), asyncio.Event()
        claims: list[tuple[float, set[str]]] = []  # when the cut-off one said it leads, what

        when = lambda state: _cut_now(kind, state)  # noqa: E731
        trigger = _Trigger(world, when, ns, zk_port, direction)
        stack = AsyncExitStack()
        try:
            cut.start(timeout=60)
            await until(
                lambda: _leads(world, "cutover", members["cut"]),
                30,
                "the namespaced control plane leading the cutovers",
            )
            await asyncio.gather(*(asyncio.to_thread(p.start, 60) for p in started[1:]))
            [worker] = world.workers(["w0"], commit_every_s=0.2, metastore=other_zk)
            await worker.ready()
            loads = [Load(p.url) for p in producers]
            clients = [
                asyncio.create_task(load.group(f"{tag}{i}"))
                for load, tag in zip(loads, ("a", "b"), strict=True)
                for i in range(GROUPS)
            ]
            await asyncio.to_thread(trigger.arm)
            recorder = asyncio.create_task(_watch_record(world, versions))
            follower = asyncio.create_task(_follow_claims(cut, stop_claims, claims))
            try:
                await until(lambda: len(world.hook.on("s0")) >= 100, 30, "deliveries flowing")
                # A member that holds the phase of the cut open (see _cut_now).
                silent = await stack.enter_async_context(open_metastore(world.zk))
                await silent.join(PRODUCERS, SILENT, b"{}")
                acked = asyncio.create_task(_ack_prepare(silent)) if kind == "cutover" else None
                await _start(kind, world, other, unique)
                fault_at = await until(lambda: trigger.cut_at, 30, "the leader cut off")
                if acked is not None:
                    await acked
                if kind != "rollback":  # its session ends: it leaves, the phase goes on
                    await stack.aclose()
                await until(
                    lambda: _leads(world, "cutover", members["other"]),
                    SESSION_S * 5,
                    "the other control plane leading the cutovers",
                )
                last = await until(lambda: _terminal(versions), 60, "the cutover over")
                over_at = time.time()
                await until(
                    lambda: _no_active(world), 30, "the cutover unmarked (nothing more to do)"
                )
                # The partition lasts a while past the takeover (a pace, not a sync).
                await asyncio.sleep(max(0.0, fault_at + PARTITION_S - time.time()))
                claimed_in_partition = await _claims(cut)
                version_at_heal = versions.seen[-1][1]
                ns.heal()
                heal_at = time.time()
                await until(
                    lambda: ready_now(cut.url), BACK_WITHIN_S, "the cut-off control plane ready"
                )
                ready_after = time.time() - heal_at
                await asyncio.sleep(AFTER_HEAL_S)  # publishing on after the heal (a pace)
                claims_after_heal = [roles for t, roles in claims if t > heal_at]
                sealed_at = None
                if kind != "rollback":
                    sealed_at = await until(lambda: _old_finished(world), 60, "segment 1 sealed")
            finally:
                await stack.aclose()
                for load in loads:
                    load.stop.set()
                stop_claims.set()
                await asyncio.gather(*clients, follower, return_exceptions=True)
                recorder.cancel()
                await asyncio.gather(recorder, return_exceptions=True)
                trigger.disarm()
            history = merged(loads, [])
            await until(
                lambda: history.acked <= set(world.hook.ids("s0")), 60, "every acked delivered"
            )
            leader_at_end = await _leader(world, "cutover")
            took_over = await asyncio.to_thread(_elected_at, world, "cutover")
            aborted = [p.url for p in started if p.proc is None or p.proc.poll() is not None]
            aborted += ["worker"] if worker.proc.poll() is not None else []
        finally:
            for process in started:
                process.stop()
        topic = await world.catalog.get_topic("shop", "orders")
        produce_segment = topic.produce_pointer.segment_id if topic.produce_pointer else None
        for seg in topic.segments[1:]:
            with contextlib.suppress(NotFound):  # a rollback deleted its target already
                await world.store.delete_topic(seg.storage_topic)
    history.deliveries = from_requests(world.hook.on("s0"), lambda r: "worker")
    verdict = check(history, heal_at=heal_at)
    deposed = versions.coordinator_writes(fault_at + 0.5, took_over)
    after_heal = [v for at, v, _ in versions.seen if at > heal_at]
    last_claim = max((t for t, _ in claims), default=0.0) - fault_at
    last_roles = sorted(claims[-1][1]) if claims else []
    windows = sorted(b - a for a, b in verdict.unavailable)
    phase_at_cut = max((t, p) for p, t in last.phase_times.items() if t.timestamp() <= fault_at)[1]
    stalled = longest_gap([t for t, s in history.answers if s == 201], fault_at)
    print(
        f"\n{case}: cut at 0 in {phase_at_cut}: the cut-off leader last claimed a role at "
        f"{last_claim:.2f}s ({last_roles}), the other leads at {took_over - fault_at:.2f}s, "
        f"the cutover "
        f"{last.phase} at {over_at - fault_at:.2f}s (phases {_phases(last, fault_at)}), "
        f"segment 1 {_sealed(sealed_at, fault_at)}, "
        f"healed at {heal_at - fault_at:.2f}s, the cut-off control plane ready "
        f"{ready_after:.2f}s after; record versions {[v for _, v, _ in versions.seen]} "
        f"(at the heal v{version_at_heal}); coordinator writes between the cut and the "
        f"takeover {deposed}; 503 windows {[f'{w:.2f}s' for w in windows]}, longest time "
        f"without a 201 from the cut {stalled:.2f}s\n"
        f"{verdict.summary()}; load average {load_average()}"
    )
    assert not aborted, f"processes exited: {aborted}"
    assert phase_at_cut not in DONE, f"the cut came after the end ({phase_at_cut}): no test"
    if kind == "rollback":
        assert last.phase is Phase.ROLLED_BACK, last
        assert produce_segment == 1, f"published to segment {produce_segment} after a rollback"
    else:
        assert last.phase in (Phase.COMPLETE, Phase.ROLLED_BACK), last
    assert leader_at_end == members["other"], "the cut-off control plane took the role back"
    assert not claimed_in_partition, f"still leading while cut off: {claimed_in_partition}"
    assert not claims_after_heal, f"leading again after the heal: {claims_after_heal}"
    assert last_claim < took_over - fault_at, f"two leaders at once: {last_roles} and cutover"
    assert not deposed, f"the cut-off leader wrote to the record: {deposed}"
    assert not after_heal, f"the record changed after the heal: {after_heal}"
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)


def _cut_now(kind: str, state: Cutover) -> bool:
    """When to cut the leader off: a cutover once both producers acknowledged SWITCH (they
    drained; the commit waits); a failover, or a cutover to be rolled back, once both
    acknowledged PREPARE. Either way the test's own member of the producers' group
    (``SILENT``) has not acknowledged that phase, so it stays open (up to its timeout)
    until the cut: a failover's protocol runs through in about 0.1 s, a cutover's SWITCH
    and COMMIT in a few tenths, faster than a busy test's watch and a partition. The test
    asserts that the cut came before the end and prints the phase it came in."""
    phase = Phase.SWITCH if kind == "cutover" else Phase.PREPARE
    if state.phase is not phase:
        return False
    acks = [state.producers.get(m) for m in state.participants if m != SILENT]
    return bool(acks) and all(a is not None and a.has(phase) for a in acks)


async def _ack_prepare(silent: MetaStore) -> None:
    """Acknowledge the cutover's PREPARE as ``SILENT`` once its target exists (and no
    later phase): the silent member then holds SWITCH open."""
    records = CutoverRecords(silent)
    async for state in records.watch("shop", "orders"):
        if state is not None and state.phase is Phase.PREPARE and state.target_ready:
            now = datetime.now(UTC)
            if await records.ack("shop", "orders", state.id, SILENT, Phase.PREPARE, now):
                return


async def _start(kind: str, world: ProcessWorld, other: ControlPlaneProcess, unique: str) -> None:
    """A cutover to 2 partitions through the follower's API; or a failover (no seal: the
    old segment is left UNSEALED for the failover leader to seal), begun through the
    facade as the failover leader begins one, with no broker taken down (its trigger, the
    producers' health reports, is tests/integration/test_failover_real.py's)."""
    if kind != "failover":
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.post(
                f"{other.url}/v1/projects/shop/topics/orders/cutover",
                json={"cluster": "kafka-main", "partitions": 2},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
        assert r.status_code in (200, 201, 202), r.text
    else:
        clusters: dict[str, Any] = {"kafka-main": world.kafka}
        cutovers = Cutovers(world.meta, world.catalog, clusters, Timeouts(), f"chaos{unique}")
        reason = "chaos test: a failover begun by hand"
        await cutovers.start("shop", "orders", "kafka-main", 2, failover=reason, from_segment=1)


async def _old_finished(world: ProcessWorld) -> float | None:
    """When segment 1 was sealed (its record's ``sealed_at``) once it is sealed with its
    final ends (None: not yet)."""
    old = (await world.catalog.get_topic("shop", "orders")).segment(1)
    done = old is not None and old.finished and old.sealed_at is not None
    return old.sealed_at.timestamp() if done and old.sealed_at else None


async def _terminal(versions: Versions) -> Cutover | None:
    last = versions.seen[-1][2] if versions.seen else None
    return last if last is not None and last.phase in DONE else None


async def _no_active(world: ProcessWorld) -> bool:
    return await world.meta.get(paths.active_cutover("shop", "orders")) is None


def _sealed(sealed_at: float | None, since: float) -> str:
    return "not sealed" if sealed_at is None else f"sealed at {sealed_at - since:.2f}s"


def _phases(state: Cutover, since: float) -> str:
    return ", ".join(f"{p} {t.timestamp() - since:.2f}s" for p, t in state.phase_times.items())
