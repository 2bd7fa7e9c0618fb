"""A worker cut off from ZooKeeper but not from its endpoint or Kafka (issue 34's zombie): it
must stop delivering before its session can have expired on the server, so that the worker
that takes the lock next never delivers a group at the same time, and nothing acknowledged
is lost. Two worker processes on real ZooKeeper and Kafka, both assigned the one
subscription. The holder reaches ZooKeeper through a proxy the test partitions (a blackhole:
its connection stays open and goes silent), then heals; or it is paused past its session
and resumed."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from metastore import paths
from segments.protocol import Record
from segments.reader import commit_group
from tests.chaos.checker import History, check, from_requests
from tests.support.hook import Request
from tests.support.peers import owner
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices
from tests.support.stored import read_to_end
from tests.support.tcp_proxy import TcpProxy
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 4.0
HEIR_SESSION_S = 15.0
GROUPS = 8
RATE = 200  # messages per second, while producing
BURST = 1_000  # published at once just before the cut
LOOKUPS = 3  # tries to name a connection's sender (see Senders.identify)


@dataclass
class Senders:
    """Which worker process sent each request the endpoint got: the hook asks
    :meth:`identify` once per connection, at its first request, while the connection is
    surely open (a /proc lookup, 80 ms under load: once per request on the test's loop it
    starved the endpoint double; after the fact, a connection already closed has no owner)."""

    pids: dict[int, str]  # pid → member

    def identify(self, port: int) -> str:
        # /proc/net/tcp is read in pages, not as one snapshot: a socket can be skipped while
        # connections come and go (two requests went unnamed so in two of four CI runs, at
        # the redeliveries' peak), so a miss is looked up again before it counts.
        for _ in range(LOOKUPS):
            pid = owner(port, list(self.pids))
            if pid is not None:
                return self.pids[pid]
        return "?"

    @staticmethod
    def who(requests: list[Request]) -> list[str]:
        return [r.sender for r in requests]


def _record(i: int) -> Record:
    group, mid = f"g{i % GROUPS}", f"m{i:06d}"
    headers = (("x-message-id", mid.encode()), ("x-group-id", group.encode()))
    return Record(mid.encode(), key=group.encode(), headers=headers)


class Producer:
    """Publishes ``RATE`` messages a second to the world's storage until stopped."""

    def __init__(self, world: ProcessWorld) -> None:
        self.world = world
        self.sent = 0
        self.stopped = asyncio.Event()

    def ids(self) -> Iterator[str]:
        return (f"m{i:06d}" for i in range(self.sent))

    def history(self, delivered: list[Request]) -> History:
        """Every message produced (each acknowledged by Kafka), per group in produce order,
        and the endpoint's deliveries with their senders."""
        published: dict[str, list[str]] = {}
        for i in range(self.sent):
            published.setdefault(f"g{i % GROUPS}", []).append(f"m{i:06d}")
        return History(published, set(self.ids()), [], from_requests(delivered))

    async def burst(self, count: int) -> None:
        await self.world.produce_many(self._take(count))

    def _take(self, count: int) -> list[Record]:
        """The next ``count`` messages, their ids taken before any await: a burst and the
        paced batches run concurrently."""
        start, self.sent = self.sent, self.sent + count
        return [_record(start + i) for i in range(count)]

    async def run(self) -> None:
        while not self.stopped.is_set():
            await self.world.produce_many(self._take(RATE // 10))
            await asyncio.sleep(0.1)  # a pace, not a synchronisation


@dataclass
class Pair:
    """The zombie-to-be (holding s0, reaching ZooKeeper through ``proxy``) and its heir."""

    world: ProcessWorld
    proxy: TcpProxy
    zombie: WorkerProcess
    heir: WorkerProcess
    members: dict[str, str]
    senders: Senders
    producer: Producer


@asynccontextmanager
async def _pair(real: RealServices, unique: str, tmp_path: Path) -> AsyncIterator[Pair]:
    """Both workers assigned s0, the zombie holding it, messages flowing; then a backlog the
    zombie has read and not delivered yet (a slow endpoint, a burst) for the test's fault."""
    async with (
        process_world(real, unique, tmp_path, grouped=True, session_timeout_s=SESSION_S) as world,
        TcpProxy(real.zookeeper) as proxy,
    ):
        await world.subscribe("s0", max_in_flight=4)
        members = {"zombie": f"wz-{unique}", "heir": f"wh-{unique}"}
        for member in members.values():
            await world.assign(member, "s0")
        options = {"commit_every_s": 0.2, "lock_retry_s": 0.2}
        cut_off = world.settings(**options)
        cut_off["metastore"] = {**cut_off["metastore"], "hosts": proxy.address}
        zombie = world.worker(members["zombie"], cut_off)
        await zombie.ready()
        await until(lambda: _holds(world, members["zombie"]), 30, "the zombie holding s0")
        # The heir's own session is long, so that what the test sees is the zombie's: with a
        # 4 s one, a lapse of the heir's under load would hand s0 back to the resumed zombie
        # and read as the zombie delivering late. (CI's "last delivery 19.6 s after the
        # fault" was not that: the zombie's runner restarted after its cancellation; see
        # core.tasks.stop_if_cancelled.)
        heir_meta = world.metastore(session_timeout_s=HEIR_SESSION_S)
        [heir] = world.workers([members["heir"]], **options, metastore=heir_meta)
        await heir.ready()
        senders = Senders({zombie.proc.pid: "zombie", heir.proc.pid: "heir"})
        world.hook.identify = senders.identify  # before the first delivery
        producer = Producer(world)
        tasks = [asyncio.create_task(producer.run())]
        try:
            await until(lambda: len(world.hook.on("s0")) >= RATE, 30, "deliveries flowing")
            world.hook.delay = lambda path: 0.02
            await producer.burst(BURST)
            yield Pair(world, proxy, zombie, heir, members, senders, producer)
            producer.stopped.set()
            await tasks[0]
            expected = set(producer.ids())
            try:
                await until(
                    lambda: expected <= set(world.hook.ids("s0")), 60, "every message delivered"
                )
            except AssertionError:
                raise AssertionError(await _diagnosis(world, expected)) from None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _check(pair: Pair, fault_at: float, took_over: float, fault: str) -> None:
    """Nothing lost, nothing reordered, the zombie silent before its session could expire
    and before the heir's first delivery; the figures printed."""
    by = [(r.at - fault_at, r.sender) for r in pair.world.hook.on("s0")]
    delivered = pair.world.hook.on("s0")
    last_zombie = max((at for at, who in by if who == "zombie" and at > 0), default=0.0)
    first_heir = min(at for at, who in by if who == "heir")
    print(
        f"\n{fault} at 0: the zombie's last delivery {last_zombie:.2f}s, the heir's lock "
        f"{took_over:.2f}s, its first delivery {first_heir:.2f}s (session {SESSION_S}s); "
        f"{len(delivered)} deliveries of {pair.producer.sent} messages, "
        f"{len(delivered) - len({r.id for r in delivered})} duplicates"
    )
    unknown = [
        (round(at, 2), r.peer) for (at, who), r in zip(by, delivered, strict=True) if who == "?"
    ]
    assert not unknown, f"deliveries from an unknown sender (time, port): {unknown[:20]}"
    assert last_zombie < first_heir, "two workers delivered the subscription at once"
    assert last_zombie < SESSION_S, "the zombie delivered after its session could expire"
    verdict = check(pair.producer.history(delivered))
    print(verdict.summary())
    verdict.assert_sound(back_within_s=None)  # 0 loss, 0 inversions, 0 overlapping senders


async def test_a_worker_cut_off_from_zookeeper_stops_before_its_successor_starts(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with _pair(real_services, unique, tmp_path) as pair:
        pair.proxy.partition()
        cut_at = time.time()
        await until(lambda: _holds(pair.world, pair.members["heir"]), SESSION_S * 5, "the heir")
        took_over = time.time() - cut_at
        await asyncio.sleep(2)  # publishing on while the zombie is still cut off
        pair.proxy.heal()
        await asyncio.sleep(2)  # and after it is back: it finds its session gone
    _check(pair, cut_at, took_over, "cut off from ZooKeeper")


async def test_a_worker_paused_past_its_session_sends_nothing_when_it_resumes(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    """SIGSTOP (a long GC pause, a frozen VM) with a backlog in memory; SIGCONT once the heir
    delivers. Resumed, the zombie's event loop runs its ready tasks before it can hear from
    ZooKeeper that its session is gone: its lease, on the monotonic clock, has lapsed."""
    async with _pair(real_services, unique, tmp_path) as pair:
        pair.zombie.proc.send_signal(signal.SIGSTOP)
        paused_at = time.time()
        try:
            await until(lambda: _holds(pair.world, pair.members["heir"]), SESSION_S * 5, "the heir")
            took_over = time.time() - paused_at
            await until(
                lambda: "heir" in Senders.who(pair.world.hook.requests),
                30,
                "the heir delivering",
            )
        finally:
            pair.zombie.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(3)  # the resumed zombie's chance to deliver what it held
    _check(pair, paused_at, took_over, "paused")


async def _diagnosis(world: ProcessWorld, expected: set[str]) -> str:
    missing = sorted(expected - set(world.hook.ids("s0")))
    stored = await read_to_end(
        world.store, world.storage, until=lambda read: expected <= {m.value.decode() for m in read}
    )
    where = {m.value.decode(): (m.partition, m.position) for m in stored}
    sub = await world.catalog.get_subscription("shop", "s0")
    committed = await world.store.committed(world.storage, commit_group(sub))
    status = await world.meta.get(paths.subscription_status("shop", "s0"))
    answers = Counter(r.status for r in world.hook.requests if r.path == "s0")
    lines = [
        f"missing {len(missing)}: {[(m, where.get(m)) for m in missing[:20]]}",
        f"holder: {await world.holder('s0')}; committed {committed}",
        f"ends {await world.store.end_positions(world.storage)}; stored {len(stored)}",
        f"the endpoint's answers by status: {dict(answers)}",
        f"the holder's status: {status.data.decode() if status else None}",
    ]
    for worker in world.processes:
        lines += [f"--- {worker.member}", worker.log.read_text()[-12000:]]
    return "\n".join(lines)


async def _holds(world: ProcessWorld, member: str) -> bool:
    return await world.holder("s0") == member
