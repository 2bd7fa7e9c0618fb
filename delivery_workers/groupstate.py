"""Which groups of a subscription are blocked or sidelined, and why. Pure, no I/O.

A group is **blocked** while it has a *head* in the delay levels (a message waiting for its
retry or its delivery time), *followers* in the hold topic (its later messages, in order), or
a released follower in flight. A blocked group's new messages are handed to the hold topic
behind the others; when the head becomes terminal the followers are released one at a time,
in order, before the group is free again.

A group is **sidelined** while the DLQ holds a live entry of it (or a hand-off to the DLQ is
under way): its head was dead-lettered, so its later messages follow it into the DLQ, until
an unsideline or a purge removes the group's last entry.

Why no separate durable index: every fact here is in the internal topics already — heads are
the level records not yet committed, followers the hold records not yet committed, sidelined
groups the live DLQ entries — so a worker that starts (after a crash, a reassignment or a
segment change) rebuilds this state by reading them, and there is no second record that
could disagree with the storage.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Group(Generic[T]):
    heads: set[str] = field(default_factory=set)  # origins waiting in the delay levels
    followers: deque[T] = field(default_factory=deque)  # in the hold topic, in order
    releasing: bool = False  # a released follower is being delivered
    dead: set[int] = field(default_factory=set)  # live DLQ positions
    dead_pending: int = 0  # hand-offs to the DLQ not acknowledged yet

    def idle(self) -> bool:
        return not (
            self.heads or self.followers or self.releasing or self.dead or self.dead_pending
        )


class GroupStates(Generic[T]):
    """Per-group state of one subscription; ``T`` is the held item type."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group[T]] = {}
        self._removed: set[int] = set()  # DLQ positions removed (never live again)

    def _g(self, group: str) -> _Group[T]:
        found = self._groups.get(group)
        if found is None:
            found = self._groups[group] = _Group()
        return found

    def _tidy(self, group: str) -> None:
        found = self._groups.get(group)
        if found is not None and found.idle():
            del self._groups[group]

    # ------------------------------------------------------------ questions
    def blocked(self, group: str) -> bool:
        found = self._groups.get(group)
        return found is not None and bool(found.heads or found.followers or found.releasing)

    def sidelined(self, group: str) -> bool:
        found = self._groups.get(group)
        return found is not None and bool(found.dead or found.dead_pending)

    def has_head(self, group: str) -> bool:
        found = self._groups.get(group)
        return found is not None and bool(found.heads)

    @property
    def blocked_groups(self) -> list[str]:
        return [g for g in self._groups if self.blocked(g)]

    @property
    def sidelined_groups(self) -> list[str]:
        return [g for g in self._groups if self.sidelined(g)]

    def held(self) -> int:
        return sum(len(g.followers) for g in self._groups.values())

    # ------------------------------------------------------------ heads
    def add_head(self, group: str, origin: str) -> None:
        self._g(group).heads.add(origin)

    def drop_head(self, group: str, origin: str) -> None:
        found = self._groups.get(group)
        if found is not None:
            found.heads.discard(origin)
            self._tidy(group)

    # ------------------------------------------------------------ followers
    def follow(self, group: str, item: T) -> None:
        """``item`` goes behind the group's head (and its earlier followers)."""
        self._g(group).followers.append(item)

    def drop_follower(self, group: str, item: T) -> None:
        found = self._groups.get(group)
        if found is not None and item in found.followers:
            found.followers.remove(item)
            self._tidy(group)

    def next_follower(self, group: str) -> T | None:
        """The follower to release now, or None: the group has a head, a release in
        flight, or no followers."""
        found = self._groups.get(group)
        if found is None or found.heads or found.releasing or not found.followers:
            return None
        return found.followers[0]

    def take_follower(self, group: str) -> T:
        """Release the first follower (after :meth:`next_follower` named it)."""
        found = self._g(group)
        found.releasing = True
        return found.followers.popleft()

    def take_all_followers(self, group: str) -> list[T]:
        found = self._groups.get(group)
        if found is None:
            return []
        items = list(found.followers)
        found.followers.clear()
        self._tidy(group)
        return items

    def released(self, group: str) -> None:
        """The released follower is terminal (or became the group's new head)."""
        found = self._groups.get(group)
        if found is not None:
            found.releasing = False
            self._tidy(group)

    def is_releasing(self, group: str) -> bool:
        found = self._groups.get(group)
        return found is not None and found.releasing

    # ------------------------------------------------------------ DLQ
    def dead_letter_started(self, group: str) -> None:
        self._g(group).dead_pending += 1

    def dead_lettered(self, group: str, position: int) -> None:
        found = self._g(group)
        found.dead_pending = max(0, found.dead_pending - 1)
        if position not in self._removed:
            found.dead.add(position)
        self._tidy(group)

    def dead_seen(self, group: str, position: int) -> None:
        """A live DLQ entry of ``group`` was read (at start, or written by anyone)."""
        if position not in self._removed:
            self._g(group).dead.add(position)

    def dead_removed(self, positions: list[int]) -> list[str]:
        """DLQ entries were purged or unsidelined; the groups no longer sidelined."""
        self._removed.update(positions)
        gone = set(positions)
        freed = []
        for name, found in list(self._groups.items()):
            if found.dead & gone:
                found.dead -= gone
                if not found.dead and not found.dead_pending:
                    freed.append(name)
                self._tidy(name)
        return freed

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._groups))
