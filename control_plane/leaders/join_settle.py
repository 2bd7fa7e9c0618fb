"""When the assignment leader acts on members joining: once the joins have settled.

Workers of a deployment start together, and each joins the group a moment after the last.
Assigning at every join gave the first member every unit, then moved most of them away
join after join: each move a lock taken, a runner started, stopped and a lock released, and
a member that was busy with units it was losing read its newer assignment late. At 10 000
units and 100 members (bench/scale.py) the members' views held three times the units there
were for 40 s. Kafka's group coordinator waits the same way before a group's first
assignment (``group.initial.rebalance.delay.ms``).

So a join is acted on once no other member joined for ``quiet_s``, and at the latest
``most_s`` after the first of a row of joins. A member leaving is acted on at once: its
units have no runner until they are assigned again (a leave ends the wait of joins seen
with it too). A new leader's first listing of the members counts as joins, so a leader
elected while a deployment's workers join waits for them too (a leader taking over a
steady group waits ``quiet_s`` before its first plan; the plan in force stays meanwhile).
Example::

    settle = JoinSettle(quiet_s=1.0, most_s=10.0)
    settle.saw(joined=True, left=False)
    settle.wait_s()  # 1.0: assign after that unless another member joins
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class JoinSettle:
    """See the module doc."""

    quiet_s: float
    most_s: float
    clock: Callable[[], float] = time.monotonic
    _first: float | None = None  # the first join not yet assigned
    _last: float = 0.0  # the latest join
    _left: bool = False  # a member left since the last assignment

    def saw(self, *, joined: bool, left: bool) -> None:
        """The membership changed: some joined, some left, or both."""
        self._left = self._left or left
        if joined:
            now = self.clock()
            if self._first is None:
                self._first = now
            self._last = now

    def wait_s(self) -> float:
        """How long to wait before assigning; 0: assign now."""
        if self._first is None or self._left:
            return 0.0
        until = min(self._last + self.quiet_s, self._first + self.most_s)
        return max(0.0, until - self.clock())

    def assigning(self) -> None:
        """An assignment is being computed from the membership as it is now."""
        self._first, self._left = None, False
