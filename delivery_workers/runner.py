"""One subscription's delivery, wired: read → admit → dispatch → attempt → retry path → commit.

A :class:`SubscriptionRunner` builds its subscription's parts and runs them, segment by
segment, with the durable retry path alongside across segment changes. Follow a message
through the modules in this order (each hands it to the next; none calls back):

1. :mod:`.segment_walk` takes the consume segment, :mod:`.intake` reads it from the
   committed positions, filters, and hands each message to :mod:`.admission`;
2. :mod:`.admission` sends it on to the dispatch, or into a delay level (a delayed message),
   behind its blocked group (hold topic), or into the DLQ behind its sidelined group;
3. :mod:`.dispatch` lets it go when its group's turn comes, within ``max_in_flight``, the
   rate limit and the circuit breaker, and starts its attempt;
4. :mod:`.attempt` pushes it through the :class:`~.sender.EndpointSender`
   (:mod:`.http_sender`; :mod:`.batch_attempt` a batch of them, if ``batch`` is set) and
   returns :func:`core.retry.decide`'s verdict to the dispatch, which carries it out:
   delivered, or to a delay level or the DLQ through :mod:`.retry_path`, which hands it to
   the storage (:mod:`.handoff`); :mod:`.retry_readers` bring those back when their time
   comes;
5. :mod:`.commit` commits, in batches, per source, the highest position below which every
   message is terminal: delivered, filtered, or durably handed to a level, hold or DLQ.

The group state lives in the retry path, so it survives segment changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from core.errors import HttpbusError
from core.model import Subscription
from core.shards import WHOLE, Shard
from core.tasks import cancel_all, first_to_end
from segments.audit import AuditSink
from segments.reader import SegmentReader

from .admission import Admission
from .attempt import Attempts, HealthRecorder
from .audit import SubscriptionAudit
from .batch_attempt import BatchAttempts
from .bodies import BodyCache
from .commit import COMMIT_DRAIN_S, Committer
from .dispatch import Dispatch
from .groupstate import GroupStates
from .internal_topics import InternalTopics
from .items import Held
from .progress import Progress
from .retry_path import RetryPath
from .retry_readers import RetryReaders
from .segment_walk import SegmentWalk
from .sender import EndpointSender
from .stats import RunnerStats
from .tracking import CommitPolicy

log = logging.getLogger(__name__)
LAG_S = 5.0  # how often a runner samples its lag (a storage call)
DRAIN_S = 5.0  # on stopping, how long the deliveries in flight may take to end


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
        self.drain_s = drain_s  # on stopping, how long deliveries in flight may end (_drain)
        self.health = health  # told every attempt's result (.disabling)
        self.poisoned = poisoned or {}  # origins to dead-letter unseen (.poison)
        self.shard = shard  # the slice of the subscription this runner delivers
        self.reader = reader
        self.sender = sender
        self.stats = RunnerStats()
        self.name = f"{sub.topic_project}/{sub.topic}"
        self.audit = SubscriptionAudit(audit, sub)
        self.progress = Progress()
        self.dispatch = Dispatch(sub, self.stats, audit, self.progress, in_flight_cap, shard)
        self._policy = commit_policy or CommitPolicy()
        self.retry_path: RetryPath | None = None
        self.walk = SegmentWalk(
            sub,
            shard,
            reader,
            throttle=self.dispatch.throttle,
            progress=self.progress,
            audit=self.audit,
            stats=self.stats,
            read_batch=read_batch,
            poisoned=self.poisoned,
            bodies=bodies or BodyCache(),  # parsed payloads, the worker's (.bodies)
        )

    @property
    def sub(self) -> Subscription:
        """The subscription as its consume pointer stands now."""
        return self.walk.sub

    async def run(self) -> None:
        """Deliver until cancelled."""
        sub, store = self.sub, self.reader.catalog.store
        _, segment = await self.reader.consume_segment(sub)
        topics = await InternalTopics.open(
            sub, store, dict(self.reader.stores), segment.cluster, self._policy, self.shard
        )
        groups: GroupStates[Held] = GroupStates()
        path = self.retry_path = RetryPath(sub, topics, groups, self.audit, self.stats)
        admission = Admission(sub, groups, path, self.dispatch)
        readers = RetryReaders(
            sub, topics, groups, path, admission, self.dispatch, self.audit, self.stats.dlq
        )
        if topics.created:
            await readers.rebuild()
        else:  # no DLQ yet: empty; the tail counts it from its start once it is made
            self.stats.dlq.reset((), 0)
        # Each clean-up step runs whatever the one before it raised (a failed final commit
        # once left the retry readers and the hand-off running, unowned, at every restart).
        async with contextlib.AsyncExitStack() as cleanup:
            handing_off = asyncio.create_task(path.run())
            cleanup.push_async_callback(cancel_all, [handing_off])
            readers.start()
            cleanup.push_async_callback(readers.aclose)
            committer = Committer(self._policy, self.name, path, self.audit.sink, self.stats)
            cleanup.push_async_callback(committer.drain)
            starting = asyncio.create_task(self._dispatching(sub, path))
            committing = asyncio.create_task(committer.run())
            tasks = [
                starting,
                asyncio.create_task(self.dispatch.failures()),
                committing,
                asyncio.create_task(self._sample_lag()),
                asyncio.create_task(self.walk.behind(admission, committer)),
            ]
            cleanup.push_async_callback(self._cancel_running, tasks)
            cleanup.push_async_callback(self._drain, starting, committing, committer)
            await first_to_end(self.walk.run(admission, committer), tasks)

    async def _dispatching(self, sub: Subscription, path: RetryPath) -> None:
        parts = (sub, self.sender, self.dispatch.throttle, self.progress, self.stats, self.audit)
        if sub.batch is None:
            attempts = Attempts(*parts, self.poisoned, self.health)
            await self.dispatch.run(attempts, path)
        else:
            batches = BatchAttempts(*parts, self.poisoned, self.health)
            await self.dispatch.run_batches(batches, path, sub.batch)

    async def _cancel_running(self, tasks: list[asyncio.Task[None]]) -> None:
        """The runner's tasks and the attempts under way then."""
        await cancel_all([*tasks, *self.dispatch.attempts])

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
        await cancel_all([starting, committing])
        if self.drain_s <= 0:
            return
        # An answer is handled in the step its request ends (up to the attempt's next wait).
        deadline = asyncio.get_running_loop().time() + self.drain_s
        while self.progress.sending and (left := deadline - asyncio.get_running_loop().time()) > 0:
            await self.progress.wait(left)
        await committer.drain()  # a periodic commit under way
        try:
            async with asyncio.timeout(COMMIT_DRAIN_S):
                await committer.commit()
        except (TimeoutError, HttpbusError) as exc:  # the next owner delivers them again
            log.warning("%s: the final commit did not finish: %r", self.name, exc)

    def oldest_unacked_ms(self) -> int | None:
        """The storage time of the oldest message read from the consume segment and not
        terminal yet (delivered, filtered or handed to a level or the DLQ)."""
        intake = self.walk.intake
        source = intake.source if intake is not None else None
        return source.tracker.oldest_open_ms() if source is not None else None

    async def _sample_lag(self) -> None:
        """Keep ``stats.lag`` fresh: the storage's backlog of the consume segment."""
        while True:
            intake = self.walk.intake
            source = intake.source if intake is not None else None
            if source is not None:
                try:
                    self.stats.lag = await source.lag()
                except HttpbusError as exc:  # the storage is away: keep the last figure
                    log.debug("%s: lag not sampled: %s", self.name, exc)
            await asyncio.sleep(LAG_S)
