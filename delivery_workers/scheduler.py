"""Group ordering and fair dispatch: which message (and which subscription) goes next.

:class:`GroupScheduler` keeps one message in flight per group, in offer (produce) order,
many groups in parallel up to ``max_in_flight``; a failed head blocks its group until
:meth:`GroupScheduler.release`. Messages without a key are always ready, so an ungrouped
topic (key None everywhere) gets plain FIFO dispatch up to ``max_in_flight``.

:class:`ReadyRing` is the round-robin both use to be fair: groups inside one subscription,
and subscriptions sharing one worker. Pure, clock-free, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from enum import Enum
from typing import Final, Generic, TypeVar

from core.errors import HttpbusError

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class SchedulingError(HttpbusError):
    """The scheduler was driven out of contract (a bug of the caller)."""


class Completion(Enum):
    """How an in-flight message ended, as far as ordering cares."""

    DONE = "done"  # terminal: the next message of its group may go
    BLOCKED = "blocked"  # the head failed and waits for a retry: its group stops


class ReadyRing(Generic[K]):
    """Round-robin over the keys that are ready: each :meth:`take` serves the key at the
    front and moves it to the back, so between two turns of one key every other ready key
    gets exactly one. A busy key cannot starve the others, and an idle key costs nothing.

    A worker sharing itself among thousands of subscriptions uses it like this::

        ring: ReadyRing[str] = ReadyRing()
        ring.mark_ready("orders")       # it has buffered messages, in-flight and rate room
        sub_id = ring.take()            # serve one message of this subscription
        ring.mark_idle("orders")        # nothing to send now (empty, full, throttled, open
                                        # breaker); mark_ready again when that changes

    Every operation is O(1). Serving one message per turn makes plain round-robin a deficit
    round-robin with unit cost; weights would mean serving a key several times per turn.
    """

    def __init__(self) -> None:
        self._ring: OrderedDict[K, None] = OrderedDict()

    def mark_ready(self, key: K) -> None:
        """``key`` has work; idempotent (a ready key keeps its place in the ring)."""
        if key not in self._ring:
            self._ring[key] = None

    def mark_idle(self, key: K) -> None:
        """``key`` has no work it can do now; idempotent."""
        self._ring.pop(key, None)

    def take(self) -> K | None:
        """The next ready key, which stays ready (at the back); None if none is ready."""
        if not self._ring:
            return None
        key = next(iter(self._ring))
        self._ring.move_to_end(key)
        return key

    def __contains__(self, key: object) -> bool:
        return key in self._ring

    def __len__(self) -> int:
        return len(self._ring)


_UNGROUPED: Final = object()  # the lane of messages without a key


class GroupScheduler(Generic[T]):
    """Dispatch order for one subscription. Example::

        scheduler: GroupScheduler[Stored] = GroupScheduler(max_in_flight=100)
        if not scheduler.offer("customer-7", message):
            ...                                # full: stop reading until items complete
        item = scheduler.next_ready()          # None: nothing may go now
        scheduler.completed(item, Completion.DONE)       # the next of its group becomes ready
        scheduler.completed(item, Completion.BLOCKED)    # its group waits ...
        scheduler.release("customer-7")               # ... until the retry is terminal

    Items are matched by identity (``is``), so each offered item must be a distinct object
    while held (a message read from storage always is). Groups take turns round-robin; the
    ungrouped messages form one more lane, which may have many items in flight.

    A blocked group keeps its later items buffered and they count against ``max_buffered``;
    a caller that blocks a group for long should :meth:`drain` them to durable storage, or a
    single stuck group would end up stalling the whole subscription through back-pressure.
    """

    def __init__(self, max_in_flight: int, max_buffered: int = 10_000) -> None:
        if max_in_flight < 1 or max_buffered < 1:
            raise SchedulingError("max_in_flight and max_buffered must be >= 1")
        self.max_in_flight = max_in_flight
        self.max_buffered = max_buffered
        self._waiting: dict[object, deque[T]] = {}  # per lane; a lane is absent when empty
        self._lanes: ReadyRing[object] = ReadyRing()  # lanes that may dispatch now
        self._busy: set[str] = set()  # groups with their head in flight
        self._blocked: set[str] = set()
        self._held: dict[int, str | None] = {}  # id(item) -> key, waiting or in flight
        # in-flight items by id; holding them keeps their ids from being reused meanwhile
        self._flying: dict[int, T] = {}

    @property
    def in_flight(self) -> int:
        return len(self._flying)

    @property
    def buffered(self) -> int:
        """Items held: waiting or in flight (what ``max_buffered`` bounds)."""
        return len(self._held)

    @property
    def waiting(self) -> int:
        return len(self._held) - len(self._flying)

    @property
    def blocked_groups(self) -> frozenset[str]:
        return frozenset(self._blocked)

    def is_blocked(self, group: str) -> bool:
        return group in self._blocked

    def offer(self, key: str | None, item: T) -> bool:
        """Queue ``item`` behind its group; False (nothing queued) when the scheduler is full."""
        if len(self._held) >= self.max_buffered:
            return False
        if id(item) in self._held:
            raise SchedulingError(f"item {item!r} is already held: offer distinct objects")
        lane: object = _UNGROUPED if key is None else key
        self._held[id(item)] = key
        self._waiting.setdefault(lane, deque()).append(item)
        self._refresh(lane)
        return True

    def next_ready(self) -> T | None:
        """The next item that may go now, or None (in-flight limit, or nothing ready)."""
        if len(self._flying) >= self.max_in_flight:
            return None
        lane = self._lanes.take()
        if lane is None:
            return None
        queue = self._waiting[lane]
        item = queue.popleft()
        if not queue:
            del self._waiting[lane]
        if lane is not _UNGROUPED:
            assert isinstance(lane, str)
            self._busy.add(lane)
        self._flying[id(item)] = item
        self._refresh(lane)
        return item

    def completed(self, item: T, outcome: Completion) -> None:
        """``item`` (from :meth:`next_ready`) ended. BLOCKED blocks its group; for an item
        without a key there is no group to block, so BLOCKED only frees its slot."""
        if id(item) not in self._flying:
            raise SchedulingError(f"item {item!r} is not in flight")
        del self._flying[id(item)]
        key = self._held.pop(id(item))
        if key is None:
            self._refresh(_UNGROUPED)
            return
        self._busy.discard(key)
        if outcome is Completion.BLOCKED:
            self._blocked.add(key)
        self._refresh(key)

    def block(self, group: str) -> None:
        """Block ``group`` without a failure seen here, e.g. its state loaded after a restart."""
        self._blocked.add(group)
        self._refresh(group)

    def release(self, group: str) -> bool:
        """Unblock ``group`` (its failed head is now terminal); False if it was not blocked.
        Idempotent, since the retry or DLQ hand-off may report the same release twice."""
        if group not in self._blocked:
            return False
        self._blocked.discard(group)
        self._refresh(group)
        return True

    def drain(self, group: str) -> list[T]:
        """Remove and return the waiting items of a blocked group, in order, for the caller
        to park durably behind the failed head."""
        if group not in self._blocked:
            raise SchedulingError(f"group {group!r} is not blocked: draining it breaks order")
        items = list(self._waiting.pop(group, ()))
        for item in items:
            del self._held[id(item)]
        return items

    def _refresh(self, lane: object) -> None:
        """Put ``lane`` in the ring iff it can dispatch now (keeps its place if it already is)."""
        can_go = lane in self._waiting and lane not in self._busy and lane not in self._blocked
        if can_go:
            self._lanes.mark_ready(lane)
        else:
            self._lanes.mark_idle(lane)
