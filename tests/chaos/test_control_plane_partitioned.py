"""The leading control plane partitioned from ZooKeeper in the middle of a cutover (issue 34):
two control plane processes, the leader of every role in a network namespace of its own
(scripts/realservices/netns.py), the other in the root namespace; two producer services
publish grouped sequences (4 clients each, one per group) and a worker delivers them. A
cutover to a new Kafka segment of 2 partitions is started through the follower's API; as
soon as every producer has acknowledged PREPARE (a watch on the cutover record), the
packets between the leader's namespace and ZooKeeper are dropped both ways (Kafka and its
HTTP port stay reachable). The partition heals once the other control plane has taken over
and finished the cutover, and at least 10 s after the cut (its 4 s session long expired).

What must hold: the other control plane takes the cutover role once ZooKeeper expires the
leader's session, and completes (or rolls back) the cutover; the partitioned one stops
claiming the lead before the other takes it (its lease, metastore/lease.py), writes nothing
to the cutover record once cut off (every version of the record seen between the cut and
the takeover differs from the one before only by producers' acknowledgements) nor after the
heal (the record's version stays), and does not take the role back; and the checker
(tests/chaos/checker.py) finds no acknowledged message lost, no group out of order, no
overlap, and publishing and delivery back within 15 s of the heal. It prints how long
publishing answered 503. Single-node servers; root."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from metastore import paths
from scripts.realservices.netns import Namespace
from segments.cutover.machine import Cutover, Phase
from tests.chaos.checker import check, from_requests, longest_gap
from tests.chaos.faults import ADMIN, Load, merged
from tests.support.processes import ControlPlaneProcess, ProducerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 4.0  # the leader's session: ZooKeeper expires it 4 s after the cut
OTHER_SESSION_S = 15.0  # the follower's and the producers': no lapse of their own under load
GROUPS = 4  # per producer
PARTITION_S = 10.0  # at least; and until the cutover is over
AFTER_HEAL_S = 6.0
BACK_WITHIN_S = 15.0
DONE = {Phase.COMPLETE, Phase.ROLLED_BACK, Phase.ABORTED}
# A phase outlasts the takeover (session expiry and an election): the new leader finishes
# the cutover rather than rolling it back at the deadline.
TIMEOUTS = {
    "cutover_prepare_timeout_s": 30.0,
    "cutover_switch_timeout_s": 20.0,
    "cutover_complete_timeout_s": 30.0,
}
# What a producer's acknowledgement changes in the record; anything else is the coordinator's.
ACK_FIELDS = {"producers", "participants", "updated_at"}


@dataclass
class Versions:
    """Every version of the cutover record the test's watch saw: (time, version, state)."""

    seen: list[tuple[float, int, Cutover]] = field(default_factory=list)

    def coordinator_writes(self, since: float, until_: float) -> list[str]:
        """The versions seen in [since, until_) that changed more than acknowledgements."""
        found = []
        for (_, _, before), (at, version, after) in zip(self.seen, self.seen[1:], strict=False):
            if since <= at < until_:
                a, b = before.model_dump(), after.model_dump()
                changed = {k for k in a if a[k] != b[k]} - ACK_FIELDS
                if changed:
                    found.append(f"v{version} at {at - since:.2f}s: {sorted(changed)}")
        return found


async def _watch_record(
    world: ProcessWorld, versions: Versions, prepared: Callable[[Cutover], None]
) -> None:
    async for node in world.meta.watch(paths.cutover("shop", "orders")):
        if node is None:
            continue
        state = Cutover.model_validate_json(node.data)
        versions.seen.append((time.time(), node.version, state))
        prepared(state)


async def _leader(world: ProcessWorld, role: str) -> str | None:
    node = await world.meta.get(paths.leader(role))
    return None if node is None else str(json.loads(node.data)["member"])


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


async def _ready(process: ProducerProcess) -> bool:
    async with httpx.AsyncClient(timeout=3) as client:
        try:
            return (await client.get(f"{process.url}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False


async def _follow_claims(
    cp: ControlPlaneProcess, stop: asyncio.Event, seen: list[tuple[float, set[str]]]
) -> None:
    """Record when ``cp`` said it leads some role, and which (a poll: /metrics has no watch)."""
    while not stop.is_set():
        if roles := await _claims(cp):
            seen.append((time.time(), roles))
        await asyncio.sleep(0.1)


async def test_the_leading_control_plane_partitioned_during_a_cutover(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    namespaces: Callable[[str], Namespace],
) -> None:
    ns = namespaces("cp")
    zk_port = int(real_services.zookeeper.rsplit(":", 1)[1])
    async with process_world(
        real_services, unique, tmp_path, grouped=True, session_timeout_s=SESSION_S
    ) as world:
        await world.subscribe("s0", max_in_flight=8)
        other_zk = {**world.zk.model_dump(), "session_timeout_s": OTHER_SESSION_S}
        members = {"cut": f"cpn-{unique}", "other": f"cpr-{unique}"}

        def cp_settings(who: str, **more: Any) -> dict[str, Any]:
            return world.settings(
                admin_token=ADMIN,
                member_id=members[who],
                default_cluster="kafka-main",
                trace_index=False,
                database_url=f"sqlite:///{tmp_path / who}.db",
                assign_interval_s=0.5,
                **TIMEOUTS,
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
        cut_at: list[float] = []

        def on_record(state: Cutover) -> None:
            acks = [state.producers.get(m) for m in state.participants]
            if not cut_at and acks and all(a is not None and a.prepared_at for a in acks):
                ns.partition([zk_port])  # at once, in the watch: before the SWITCH round
                cut_at.append(time.time())

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
            recorder = asyncio.create_task(_watch_record(world, versions, on_record))
            follower = asyncio.create_task(_follow_claims(cut, stop_claims, claims))
            try:
                await until(lambda: len(world.hook.on("s0")) >= 100, 30, "deliveries flowing")
                async with httpx.AsyncClient(timeout=10) as client:
                    r = await client.post(
                        f"{other.url}/v1/projects/shop/topics/orders/cutover",
                        json={"cluster": "kafka-main", "partitions": 2},
                        headers={"Authorization": f"Bearer {ADMIN}"},
                    )
                assert r.status_code in (200, 201, 202), r.text
                await until(lambda: bool(cut_at), 30, "every producer's PREPARE acknowledged")
                fault_at = cut_at[0]
                phase_at_cut = versions.seen[-1][2].phase
                await until(
                    lambda: _leads(world, "cutover", members["other"]),
                    SESSION_S * 5,
                    "the other control plane leading the cutovers",
                )
                took_over = time.time()
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
                await until(lambda: _ready(cut), BACK_WITHIN_S, "the cut-off control plane ready")
                ready_after = time.time() - heal_at
                await asyncio.sleep(AFTER_HEAL_S)  # publishing on after the heal (a pace)
                claims_after_heal = [roles for t, roles in claims if t > heal_at]
            finally:
                for load in loads:
                    load.stop.set()
                stop_claims.set()
                await asyncio.gather(*clients, follower, return_exceptions=True)
                recorder.cancel()
                await asyncio.gather(recorder, return_exceptions=True)
            history = merged(loads, [])
            await until(
                lambda: history.acked <= set(world.hook.ids("s0")), 60, "every acked delivered"
            )
            leader_at_end = await _leader(world, "cutover")
            aborted = [p.url for p in started if p.proc is None or p.proc.poll() is not None]
            aborted += ["worker"] if worker.proc.poll() is not None else []
        finally:
            for process in started:
                process.stop()
        topic = await world.catalog.get_topic("shop", "orders")
        for seg in topic.segments[1:]:
            await world.store.delete_topic(seg.storage_topic)
    history.deliveries = from_requests(world.hook.on("s0"), lambda r: "worker")
    verdict = check(history, heal_at=heal_at)
    deposed = versions.coordinator_writes(fault_at + 0.5, took_over)
    after_heal = [v for at, v, _ in versions.seen if at > heal_at]
    last_claim = max((t for t, _ in claims), default=0.0) - fault_at
    last_roles = sorted(claims[-1][1]) if claims else []
    windows = sorted(b - a for a, b in verdict.unavailable)
    stalled = longest_gap([t for t, s in history.answers if s == 201], fault_at)
    print(
        f"\ncut at 0 in {phase_at_cut}: the cut-off leader last claimed a role at "
        f"{last_claim:.2f}s ({last_roles}), the other leads at {took_over - fault_at:.2f}s, "
        f"the cutover "
        f"{last.phase} at {over_at - fault_at:.2f}s (phases {_phases(last, fault_at)}), "
        f"healed at {heal_at - fault_at:.2f}s, the cut-off control plane ready "
        f"{ready_after:.2f}s after; record versions {[v for _, v, _ in versions.seen]} "
        f"(at the heal v{version_at_heal}); coordinator writes between the cut and the "
        f"takeover {deposed}; 503 windows {[f'{w:.2f}s' for w in windows]}, longest time "
        f"without a 201 from the cut {stalled:.2f}s\n"
        f"{verdict.summary()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    assert not aborted, f"processes exited: {aborted}"
    assert last.phase in (Phase.COMPLETE, Phase.ROLLED_BACK), last
    assert leader_at_end == members["other"], "the cut-off control plane took the role back"
    assert not claimed_in_partition, f"still leading while cut off: {claimed_in_partition}"
    assert not claims_after_heal, f"leading again after the heal: {claims_after_heal}"
    assert last_claim < took_over - fault_at, f"two leaders at once: {last_roles} and cutover"
    assert not deposed, f"the cut-off leader wrote to the record: {deposed}"
    assert not after_heal, f"the record changed after the heal: {after_heal}"
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)


async def _terminal(versions: Versions) -> Cutover | None:
    last = versions.seen[-1][2] if versions.seen else None
    return last if last is not None and last.phase in DONE else None


async def _no_active(world: ProcessWorld) -> bool:
    return await world.meta.get(paths.active_cutover("shop", "orders")) is None


def _phases(state: Cutover, since: float) -> str:
    return ", ".join(f"{p} {t.timestamp() - since:.2f}s" for p, t in state.phase_times.items())
