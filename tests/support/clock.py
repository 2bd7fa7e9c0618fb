"""A clock the test moves by hand, for the components that take one (``Callable[[], float]``):

clock = ManualClock(100.0)
lease = SessionLease(10.0, clock)
clock.now += 6  # six seconds pass, at once
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ManualClock:
    """Answers ``now`` when called; the test sets ``now``."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now
