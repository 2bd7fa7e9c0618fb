"""The readers of a subscription's internal topics: where the retry path's messages come
back from.

- at start, :meth:`RetryReaders.rebuild` reads the group state back from the storage
  (sidelined groups from the DLQ, heads from the levels, followers from the hold topic; see
  :mod:`.groupstate`);
- a reader per delay level waits for its head (FIFO): when the level's delay has passed the
  message goes on to the level that fits what is left (:meth:`.retry_path.RetryPath.relevel`)
  or, with less left than the smallest level, is offered for delivery at its due time;
- the replay reader admits unsidelined and recovered DLQ entries (their attempts reset) and
  resent messages as new messages; a resend goes through the subscription's filter first
  (it comes from the topic, not from this subscription's DLQ), and each is audited as what
  it is (``unsidelined``, ``recovered``, ``resent``), so the message's trace shows it;
- the DLQ tail follows removals (purge, unsideline) that free sidelined groups;
- the returns of the retry path (:attr:`.retry_path.RetryPath.returns`): a released
  follower, or a group's messages to admit again, go through :mod:`.admission` again.

The readers start once the internal topics exist (:attr:`.internal_topics.InternalTopics.ready`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.audit import AuditType
from core.envelope import GROUP_ID, Envelope, header
from core.filters import Filter, FilterOutcome, compile_filter, parse_body
from core.model import Subscription
from core.retry import level_for
from core.tasks import TaskSet
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.retry_meta import RetryMeta

from .admission import Admission
from .audit import SubscriptionAudit
from .dispatch import Dispatch
from .dlq_count import DlqCount, owned
from .groupstate import GroupStates
from .internal_topics import InternalTopics
from .items import Held, Item, Kind, Source, now_ms, sleep_until
from .retry_path import RetryPath

_READ_TIMEOUT_S = 1.0
REPLAYED = {  # a replay record's kind → what its audit event says
    dlq.REPLAY: AuditType.UNSIDELINED,
    dlq.RECOVER: AuditType.RECOVERED,
    dlq.RESEND: AuditType.RESENT,
    dlq.WINDOW: AuditType.REPLAYED,
}
FILTERED_AGAIN = (dlq.RESEND, dlq.WINDOW)  # read from the topic anew: the filter decides


@dataclass(eq=False)
class RetryReaders:
    """See the module doc: :meth:`rebuild`, then :meth:`start`; :meth:`aclose` stops them."""

    sub: Subscription
    topics: InternalTopics
    groups: GroupStates[Held]
    path: RetryPath
    admission: Admission
    dispatch: Dispatch
    audit: SubscriptionAudit
    count: DlqCount = field(default_factory=DlqCount)  # what the DLQ holds (.dlq_count)
    _tasks: TaskSet = field(init=False, default_factory=TaskSet)
    _dlq_end: int = field(init=False, default=0)
    _skip: set[tuple[str, int]] = field(init=False, default_factory=set)  # stale level copies
    _matcher: Filter | None = field(init=False, default=None)  # for resends, compiled once

    def start(self) -> None:
        """Take up the retry path's returns, and start reading the topics (at once if they
        exist, else once they are made)."""
        self._tasks.spawn(self._returns())
        if self.topics.created:
            self._start_reading()
        else:
            self._tasks.spawn(self._when_ready())

    async def aclose(self) -> None:
        await self._tasks.aclose()

    async def _when_ready(self) -> None:
        await self.topics.ready.wait()
        self._start_reading()

    def _start_reading(self) -> None:
        topics = self.topics
        for ms in topics.levels:
            self._tasks.spawn(self._level_loop(ms, topics.level(ms)))
        self._tasks.spawn(self._replay_loop(topics.sources[topics.layout.replay]))
        self._tasks.spawn(self._dlq_tail())
        self.path.sweep()

    def mine(self, msg: Stored) -> bool:
        """Whether an internal record belongs to this runner's shard (:func:`.dlq_count.owned`)."""
        return owned(self.topics.shard, msg)

    async def rebuild(self) -> None:
        """Group state from the storage (the topics exist).

        A crash can leave a message both in the DLQ and, uncommitted, in a level or the hold
        topic (its hand-off was stored, the commit of where it came from was not): the live
        DLQ entry wins, the stale copy is skipped, so a dead-lettered head is not delivered
        behind its group's back."""
        topics, groups = self.topics, self.groups
        store = topics.store
        view = await dlq.scan(store, topics.layout)
        dead = {RetryMeta.of(m.headers).origin for m in view.live()}
        counted: list[tuple[int, bool]] = []
        for position, msg in view.entries.items():
            if not self.mine(msg):
                continue
            counted.append((position, dlq.sidelined(msg)))
            group = header(msg.headers, GROUP_ID)
            if group is not None:
                groups.dead_seen(group, position)
        self.count.reset(counted, view.end)
        self._dlq_end = view.end
        for ms in topics.levels:
            source = topics.level(ms)
            for msg in await dlq.read_all(store, source.name, source.tracker.committed(0)):
                origin = RetryMeta.of(msg.headers).origin
                if origin in dead or not self.mine(msg):
                    self._skip.add((source.name, msg.position))
                    continue
                group = header(msg.headers, GROUP_ID)
                if group is not None:
                    groups.add_head(group, origin)
        hold = topics.hold
        for msg in await dlq.read_all(store, hold.name, hold.tracker.committed(0)):
            hold.track(msg)
            group = header(msg.headers, GROUP_ID)
            meta = RetryMeta.of(msg.headers)
            if meta.origin in dead or not self.mine(msg):
                hold.done(msg)
                continue
            if group is None:  # cannot happen (only grouped messages are held): deliver
                self._tasks.spawn(self.dispatch.offer(Item(msg, hold, Kind.RELEASED, None, meta)))
                continue
            item = Item(msg, hold, Kind.RELEASED, group, meta)
            groups.follow(group, Held(item, stored=msg))

    async def _returns(self) -> None:
        """What the retry path gives back: each goes its way in a task of its own (an offer
        may wait for room), a group's messages in order."""
        while True:
            back = await self.path.returns.get()
            if back.released:
                for item in back.items:
                    self._tasks.spawn(self.admission.route_released(item))
            else:
                self._tasks.spawn(self.admission.admit_all(back.items))

    async def _level_loop(self, ms: int, source: Source) -> None:
        position = source.tracker.committed(0)
        store = self.topics.store
        while True:
            batch = await store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if (source.name, msg.position) in self._skip or not self.mine(msg):
                    source.done(msg)
                    continue
                meta = RetryMeta.of(msg.headers)
                await sleep_until(min(meta.entered_ms + ms, meta.due_ms))  # FIFO: the head
                await self._level_due(msg, source, meta)

    async def _level_due(self, msg: Stored, source: Source, meta: RetryMeta) -> None:
        level = level_for(self.sub.retry.delay_levels_ms, meta.due_ms - now_ms())
        if level is not None:  # re-route: what is left still fills a level
            self.path.relevel(msg, source, meta, level)
            return
        group = header(msg.headers, GROUP_ID)
        item = Item(msg, source, Kind.DUE, group, meta)
        if meta.due_ms <= now_ms():
            await self.dispatch.offer(item)
        else:  # its group is blocked by it already: wait outside the delivery slots
            self._tasks.spawn(self._offer_at(item, meta.due_ms))

    async def _offer_at(self, item: Item, due_ms: int) -> None:
        await sleep_until(due_ms)
        await self.dispatch.offer(item)

    async def _replay_loop(self, source: Source) -> None:
        position = source.tracker.committed(0)
        while True:
            batch = await self.topics.store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if not self.mine(msg):  # another shard's
                    source.done(msg)
                    continue
                kind = dlq.replay_kind(msg)
                self.audit.message(REPLAYED[kind], msg)
                if kind in FILTERED_AGAIN and not self._passes_filter(msg):
                    source.done(msg)
                    continue
                group = header(msg.headers, GROUP_ID)
                item = Item(msg, source, Kind.REPLAY, group, RetryMeta.of(msg.headers))
                await self.admission.admit(item)

    def _passes_filter(self, msg: Stored) -> bool:
        """Whether the subscription's filter keeps a resent message (audited ``filtered``
        with the reason if not)."""
        if self._matcher is None:
            self._matcher = compile_filter(self.sub.filter)
        envelope = Envelope.of(msg.headers)
        matcher = self._matcher
        verdict = matcher.matches(
            msg.headers,
            group=envelope.group or None,
            topic=f"{self.sub.topic_project}/{self.sub.topic}",
            content_type=envelope.content_type or None,
            body=parse_body(msg.value) if matcher.reads_body else None,
        )
        if verdict.outcome is FilterOutcome.MATCH:
            return True
        why = verdict.error if verdict.outcome is FilterOutcome.ERROR else "the filter left it out"
        what = "replay" if dlq.replay_kind(msg) == dlq.WINDOW else "resend"
        self.audit.message(AuditType.FILTERED, msg, reason=f"{what}: {why}")
        return False

    async def _dlq_tail(self) -> None:
        position = self._dlq_end
        store, name = self.topics.store, self.topics.layout.dlq
        while True:
            batch = await store.read(name, 0, position, max_records=500, timeout=_READ_TIMEOUT_S)
            for msg in batch:
                position = msg.position + 1
                if dlq.is_removal(msg):
                    positions = dlq.removed_positions(msg)
                    self.groups.dead_removed(positions)
                    self.count.removed(positions, msg.position)
                    continue
                if not self.mine(msg):
                    continue
                self.count.seen(msg.position, dlq.sidelined(msg))
                group = header(msg.headers, GROUP_ID)
                if group is not None:
                    self.groups.dead_seen(group, msg.position)
