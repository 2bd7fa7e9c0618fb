"""In-order commit over out-of-order completion, and when to flush a commit.

Messages of a partition finish in any order (groups run in parallel, retries hand off later),
but a commit value means "every message below this position is terminal", so the frontier is
the smallest tracked position that is not terminal yet. Positions grow strictly per partition
but need not be dense (packed Pulsar ids, Kafka offsets with gaps), so the tracker never
computes "position + 1" except past the last message it saw.

One :class:`CommitTracker` serves one subscription on one storage topic, keyed by partition:
``SegmentStore.commit`` takes every partition of a topic at once, so the flush reads
:meth:`CommitTracker.committable_all` and writes one call. Example::

    tracker = CommitTracker()
    tracker.start(0, 100)            # reading resumed at 100: nothing to commit yet
    for position in (100, 104, 109):
        tracker.track(0, position)
    tracker.done(0, 104)
    tracker.committable(0)           # None: 100 is open and 100 is already committed
    tracker.done(0, 100)
    tracker.committable(0)           # 109: everything below 109 is terminal
    tracker.done(0, 109)
    tracker.committable_all()        # {0: 110}
    tracker.mark_committed(0, 110)
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from core.errors import HttpbusError


class CommitTrackingError(HttpbusError):
    """The tracker was driven out of contract (a bug of the caller, never of the data)."""


class _Entry:
    __slots__ = ("at_ms", "done", "position")

    def __init__(self, position: int, at_ms: int) -> None:
        self.position = position
        self.at_ms = at_ms  # the message's storage time, for the oldest-unacked age
        self.done = False


class _Partition:
    """One partition: entries in read order from the first open one (the head is never done)."""

    __slots__ = ("committed", "entries", "floor", "last", "open")

    def __init__(self, start: int) -> None:
        self.committed = start  # what the store holds (or where reading resumed)
        self.floor = start  # the frontier when ``entries`` is empty
        self.last: int | None = None
        self.entries: deque[_Entry] = deque()
        self.open: dict[int, _Entry] = {}  # not terminal yet, by position

    def frontier(self) -> int:
        return self.entries[0].position if self.entries else self.floor


class CommitTracker:
    """Per partition: which read positions are terminal, and what may be committed.

    Every operation is amortised O(1): entries are appended in read order and popped from
    the head once terminal. ``start`` (re)sets a partition, as after a seek: what was tracked
    there is forgotten, and a later ``done`` of it raises, so drop stale completions first.
    """

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

    def start(self, partition: int, position: int) -> None:
        """Reading of ``partition`` (re)starts at ``position``, which counts as committed."""
        self._parts[partition] = _Partition(position)

    def track(self, partition: int, position: int, at_ms: int = 0) -> None:
        """A message (stored at ``at_ms``) was read; positions must grow strictly and not
        precede the start."""
        part = self._part(partition)
        lowest = part.floor if part.last is None else part.last + 1
        if position < lowest:
            raise CommitTrackingError(
                f"partition {partition}: position {position} tracked out of order "
                f"(the next must be >= {lowest})"
            )
        entry = _Entry(position, at_ms)
        part.entries.append(entry)
        part.open[position] = entry
        part.last = position

    def done(self, partition: int, position: int) -> None:
        """The message at ``position`` is terminal (delivered, filtered, handed off)."""
        part = self._part(partition)
        entry = part.open.pop(position, None)
        if entry is None:
            raise CommitTrackingError(
                f"partition {partition}: position {position} is not open "
                "(never tracked, already done, or forgotten by a restart)"
            )
        entry.done = True
        entries = part.entries
        while entries and entries[0].done:
            part.floor = entries.popleft().position + 1

    def committable(self, partition: int) -> int | None:
        """The position to commit now, or None if it would not move past the last commit."""
        part = self._part(partition)
        frontier = part.frontier()
        return frontier if frontier > part.committed else None

    def committable_all(self) -> dict[int, int]:
        """Every partition with something new to commit, ready for ``SegmentStore.commit``."""
        found = {p: part.frontier() for p, part in self._parts.items()}
        return {p: f for p, f in found.items() if f > self._parts[p].committed}

    def mark_committed(self, partition: int, position: int) -> None:
        """The store now holds ``position``; it must lie between the last commit and now."""
        part = self._part(partition)
        if not part.committed <= position <= part.frontier():
            raise CommitTrackingError(
                f"partition {partition}: cannot mark {position} committed: the last commit "
                f"is {part.committed} and the frontier {part.frontier()}"
            )
        part.committed = position

    def mark_all_committed(self, positions: dict[int, int]) -> None:
        """:meth:`mark_committed` for each partition of a flushed ``committable_all``."""
        for partition, position in positions.items():
            self.mark_committed(partition, position)

    def oldest_open_ms(self) -> int | None:
        """The storage time of the oldest message read and not terminal yet (the head of a
        partition is never terminal), or None when every message read is."""
        heads = [part.entries[0].at_ms for part in self._parts.values() if part.entries]
        return min(heads) if heads else None

    def committed(self, partition: int) -> int:
        """The last commit (or the start) of ``partition``."""
        return self._part(partition).committed

    def pending(self, partition: int | None = None) -> int:
        """Messages read and not terminal yet, of one partition or of all; for back-pressure."""
        parts: Iterable[_Partition] = (
            self._parts.values() if partition is None else (self._part(partition),)
        )
        return sum(len(part.open) for part in parts)

    @property
    def partitions(self) -> frozenset[int]:
        return frozenset(self._parts)

    def _part(self, partition: int) -> _Partition:
        try:
            return self._parts[partition]
        except KeyError:
            raise CommitTrackingError(
                f"partition {partition} was never started: call start() with where "
                "reading resumed first"
            ) from None


class CommitPolicy:
    """When to flush commits: after ``every_n`` terminal messages, or ``every_s`` seconds
    after the last flush if at least one is waiting. Clock injected, no I/O. Example::

        policy = CommitPolicy(every_n=500, every_s=1.0)
        policy.record()               # a message became terminal
        if policy.due():
            policy.flushed()          # first: what ends during the write waits for the next
            await store.commit(name, group, tracker.committable_all())  # then mark them
        await asyncio.sleep(policy.wait_s() or idle_s)

    Counting from the last flush (not from the first waiting message) lets a quiet stream
    commit at once, while a busy one commits at most once per ``every_s`` or ``every_n``.
    """

    def __init__(
        self, every_n: int = 500, every_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if every_n < 1 or every_s < 0:
            raise CommitTrackingError("every_n must be >= 1 and every_s >= 0")
        self.every_n = every_n
        self.every_s = every_s
        self._clock = clock
        self._count = 0
        self._flushed_at = clock()
        # Set while something waits: an idle committer sleeps on it instead of polling
        # (2 000 idle subscriptions polling every 0.2 s were 10 000 wake-ups a second).
        self._waiting = asyncio.Event()

    @property
    def waiting(self) -> int:
        """Terminal messages recorded since the last flush."""
        return self._count

    def record(self, n: int = 1) -> None:
        """``n`` more messages became terminal."""
        self._count += n
        self._waiting.set()

    def due(self) -> bool:
        if self._count == 0:
            return False
        return self._count >= self.every_n or self._clock() - self._flushed_at >= self.every_s

    def wait_s(self) -> float | None:
        """Seconds until :meth:`due` by time alone (0.0 if due now); None if nothing waits."""
        if self._count == 0:
            return None
        if self._count >= self.every_n:
            return 0.0
        return max(0.0, self.every_s - (self._clock() - self._flushed_at))

    def flushed(self) -> None:
        """A commit starts: a new batch begins (call it before taking the positions)."""
        self._count = 0
        self._flushed_at = self._clock()
        self._waiting.clear()

    async def until_waiting(self) -> None:
        """Until at least one terminal message waits for a commit (at once if one does)."""
        await self._waiting.wait()


class AuditBarrier(Protocol):
    """The audit trail's side of a commit (:class:`segments.audit.AuditSink`)."""

    def mark(self) -> int: ...

    async def durable(self, mark: int) -> bool: ...
