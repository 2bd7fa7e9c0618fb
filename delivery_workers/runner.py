"""One subscription's delivery, wired: read → route → dispatch → attempt → commit.

A :class:`SubscriptionRunner` builds its subscription's parts and runs them, segment by
segment, with the durable retry path alongside across segment changes. Follow a message
through the modules in this order:

1. :mod:`.reading` reads the consume segment from the committed positions, filters, and
   admits each message to the routing;
2. :mod:`.routing` queues it for delivery, or routes it into a delay level (a delayed
   message), behind its blocked group (hold topic), or into the DLQ behind its sidelined
   group; :mod:`.routing_readers` bring those back when their time comes;
3. :mod:`.dispatch` lets it go when its group's turn comes, within ``max_in_flight``, the
   rate limit and the circuit breaker;
4. :mod:`.attempt` pushes it through the :class:`~.sender.EndpointSender`
   (:mod:`.fast_sender`; :mod:`.batch_attempt` a batch of them, if ``batch`` is set) and
   carries out :func:`core.retry.decide`'s verdict: delivered, retried in place, to a delay
   level, or to the DLQ (through the routing);
5. :mod:`.commit` commits, in batches, per source, the highest position below which every
   message is terminal: delivered, filtered, or durably handed to a level, hold or DLQ.

When the segment is sealed and every partition is committed to its end, the runner moves
the subscription's consume pointer to the next segment (by compare-and-set) and goes on;
the group state lives in the routing, so it survives the change. In ``available`` failover
mode a segment a failover left unsealed is passed at once, and read beside the consume
segment once it is sealed (:meth:`SubscriptionRunner._behind`, docs/failover.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import HttpbusError
from core.filters import compile_filter
from core.model import Segment, SegmentState, Subscription, Topic
from core.shards import WHOLE, Shard
from segments.audit import AuditSink
from segments.reader import SegmentReader, left_behind

from .attempt import Attempts, HealthRecorder
from .audit import SubscriptionAudit
from .batch_attempt import BatchAttempts
from .bodies import BodyCache
from .commit import COMMIT_DRAIN_S, CommitPolicy, Committer
from .dispatch import Dispatch
from .filter_budget import FilterBudget
from .latency import LatencyHistogram
from .reading import IDLE_REFRESH_S, SegmentReading
from .routing import Routing
from .sender import EndpointSender

log = logging.getLogger(__name__)
LAG_S = 5.0  # how often a runner samples its lag (a storage call)
BEHIND_S = 1.0  # how often a runner looks for segments a failover left behind
DRAIN_S = 5.0  # on stopping, how long the deliveries in flight may take to end


@dataclass
class RunnerStats:
    delivered: int = 0
    filtered: int = 0
    filter_errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    retried: int = 0
    dead_lettered: int = 0
    delayed: int = 0
    in_flight: int = 0
    held: int = 0
    blocked_groups: int = 0
    segment: int = 0
    circuit_state: str | None = None  # closed | open | half_open; None: no breaker
    circuit_rate: float | None = None  # attempts a second the circuit allows now
    lag: int | None = None  # messages of the consume segment not committed (every LAG_S)
    oldest_unacked_ms: int | None = None  # storage time of the oldest read, not terminal
    disabled: bool = False  # its endpoint failed too long (.disabling); no runner runs
    failing_s: float | None = None  # how long its endpoint has failed every attempt
    disablings: int = 0  # the times this worker disabled it
    # Accepted -> 2xx; the worker hands each runner its subscription's (kept over restarts).
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class SubscriptionRunner:
    """Delivers ``sub`` (the slice ``shard`` of it) from ``reader`` through ``sender``."""

    def __init__(
        self,
        sub: Subscription,
        reader: SegmentReader,
        sender: EndpointSender,
        *,
        audit: AuditSink | None = None,
        commit_policy: CommitPolicy | None = None,
        read_batch: int = 500,
        shard: Shard = WHOLE,
        poisoned: Mapping[str, str] | None = None,
        health: HealthRecorder | None = None,
        in_flight_cap: int | None = None,
        bodies: BodyCache | None = None,
        drain_s: float = DRAIN_S,
    ) -> None:
        self.sub = sub
        self.drain_s = drain_s  # on stopping, how long deliveries in flight may end (_drain)
        self.bodies = bodies or BodyCache()  # parsed payloads, the worker's (.bodies)
        self.health = health  # told every attempt's result (.disabling)
        self.poisoned = poisoned or {}  # origins to dead-letter unseen (.poison)
        self.shard = shard  # the slice of the subscription this runner delivers
        self.reader = reader
        self.sender = sender
        self.read_batch = read_batch
        self.stats = RunnerStats()
        self.name = f"{sub.topic_project}/{sub.topic}"
        self.audit = SubscriptionAudit(audit, sub)
        self.dispatch = Dispatch(sub, self.stats, audit, in_flight_cap, shard)
        self._policy = commit_policy or CommitPolicy()
        self.routing: Routing | None = None
        self.reading: SegmentReading | None = None  # of the current consume segment

    async def run(self) -> None:
        """Deliver until cancelled."""
        _, segment = await self.reader.consume_segment(self.sub)
        routing = self.routing = await Routing.open(
            self.sub,
            self.reader.catalog.store,
            dict(self.reader.stores),
            segment.cluster,
            self.dispatch,
            self.audit,
            self._policy,
            self.stats,
            self.shard,
        )
        routing.start()
        committer = Committer(self._policy, self.name, routing, self.audit.sink)
        parts = (self.sub, self.sender, self.dispatch, routing, self.stats, self.audit)
        if self.sub.batch is None:
            attempts = Attempts(*parts, self.poisoned, self.health)
            dispatching = self.dispatch.run(attempts.run)
        else:
            batches = BatchAttempts(*parts, self.poisoned, self.health)
            dispatching = self.dispatch.run_batches(batches.run, self.sub.batch)
        starting = asyncio.create_task(dispatching)
        committing = asyncio.create_task(committer.run())
        tasks = [
            starting,
            asyncio.create_task(self.dispatch.failures()),
            committing,
            asyncio.create_task(self._sample_lag()),
            asyncio.create_task(self._behind(routing, committer)),
        ]
        try:
            await _first_to_end(self._segments(routing, committer), tasks)
        finally:
            try:
                await self._drain(starting, committing, committer)
            finally:
                for task in [*tasks, *self.dispatch.attempts]:
                    task.cancel()
                for task in [*tasks, *self.dispatch.attempts]:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await committer.drain()
                await routing.aclose()

    def abandon(self) -> None:
        """The lock is gone: another worker may deliver now, so stop without draining."""
        self.drain_s = 0.0

    async def _drain(
        self, starting: asyncio.Task[None], committing: asyncio.Task[None], committer: Committer
    ) -> None:
        """Start no new delivery, let the requests on the wire get their answers (for up to
        ``drain_s``) and commit what is terminal then: their endpoints may have them already,
        and an attempt cancelled now is delivered again by the next owner (a duplicate at
        every rebalance, pause or deploy). Attempts waiting (a delay, a retry's backoff, an
        open circuit) are cancelled, not sent. Not once the lock is gone (``abandon``): a
        commit landing after the next owner's would move its position back."""
        for task in (starting, committing):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.drain_s <= 0:
            return
        # An answer is handled in the step its request ends (up to the attempt's next wait).
        deadline = asyncio.get_running_loop().time() + self.drain_s
        while self.dispatch.sending and (left := deadline - asyncio.get_running_loop().time()) > 0:
            await self.dispatch.wait_change(left)
        await committer.drain()  # a periodic commit under way
        try:
            async with asyncio.timeout(COMMIT_DRAIN_S):
                await committer.commit()
        except (TimeoutError, HttpbusError) as exc:  # the next owner delivers them again
            log.warning("%s: the final commit did not finish: %r", self.name, exc)

    def oldest_unacked_ms(self) -> int | None:
        """The storage time of the oldest message read from the consume segment and not
        terminal yet (delivered, filtered or handed to a level or the DLQ)."""
        source = self.reading.source if self.reading is not None else None
        return source.tracker.oldest_open_ms() if source is not None else None

    async def _sample_lag(self) -> None:
        """Keep ``stats.lag`` fresh: the storage's backlog of the consume segment."""
        while True:
            source = self.reading.source if self.reading is not None else None
            if source is not None:
                try:
                    self.stats.lag = await source.lag()
                except HttpbusError as exc:  # the storage is away: keep the last figure
                    log.debug("%s: lag not sampled: %s", self.name, exc)
            await asyncio.sleep(LAG_S)

    async def _segments(self, routing: Routing, committer: Committer) -> None:
        matcher = compile_filter(self.sub.filter)
        budget = FilterBudget()  # over segment changes
        while True:
            topic, segment = await self.reader.consume_segment(self.sub)
            self.stats.segment = segment.id
            if segment.state is SegmentState.UNSEALED and not left_behind(topic, segment):
                # Ordered failover: its cluster may be down, and it cannot be passed before
                # the leader seals it; no storage call meanwhile (a frozen Kafka broker piles
                # up admin requests that librdkafka mishandles when it wakes).
                await asyncio.sleep(IDLE_REFRESH_S)
                continue
            if not left_behind(topic, segment):  # else: read later, by _behind
                reading = self.reading = self._reading(topic, segment, routing, committer)
                reading.matcher, reading.budget = matcher, budget
                await reading.run()
            advanced = await self.reader.try_advance(self.sub)
            if advanced is None:
                await asyncio.sleep(IDLE_REFRESH_S)
            else:
                self.sub = advanced

    def _reading(
        self,
        topic: Topic,
        segment: Segment,
        routing: Routing,
        committer: Committer,
        *,
        behind: bool = False,
    ) -> SegmentReading:
        return SegmentReading(
            self.sub,
            self.shard,
            self.reader,
            topic,
            segment,
            matcher=compile_filter(self.sub.filter),
            routing=routing,
            dispatch=self.dispatch,
            committer=committer,
            audit=self.audit,
            stats=self.stats,
            read_batch=self.read_batch,
            poisoned=self.poisoned,
            bodies=self.bodies,
            behind=behind,
        )

    async def _behind(self, routing: Routing, committer: Committer) -> None:
        """Read the segments a failover left behind (available mode), each once it is
        sealed, to its end, beside the consume segment; runs for ever."""
        done: set[int] = set()
        while True:
            await asyncio.sleep(BEHIND_S)
            try:
                for segment in await self.reader.behind(self.sub, self.shard, done):
                    topic, _ = await self.reader.consume_segment(self.sub)
                    log.info("%s: reading segment %s, left behind by a failover", self.name,
                             segment.id)  # fmt: skip
                    await self._reading(topic, segment, routing, committer, behind=True).run()
                    done.add(segment.id)
            except HttpbusError as exc:  # its cluster is away again: the next round retries
                log.warning("%s: reading a segment left behind: %s", self.name, exc)


async def _first_to_end(main: Coroutine[Any, Any, None], helpers: list[asyncio.Task[None]]) -> None:
    """Run ``main`` until it ends or one of ``helpers`` (which run for ever) fails: an error of
    either is raised here, so a failed helper stops the runner instead of stalling it."""
    task = asyncio.create_task(main)
    try:
        await asyncio.wait([task, *helpers], return_when=asyncio.FIRST_COMPLETED)
        for done in [task, *helpers]:
            if done.done():
                done.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
