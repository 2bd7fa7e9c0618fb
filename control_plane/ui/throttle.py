"""Login throttling: a client that keeps typing wrong tokens waits.

Per client address, at most ``max_failures`` failed logins in ``window_s`` seconds; past
that, the login form answers 429 with ``Retry-After`` until the oldest failure leaves the
window. A success clears the client's record. Memory is bounded: past ``max_clients``
addresses the longest-unseen ones are forgotten. Each control-plane process throttles on
its own (a guesser spread over N processes gets N times the rate; the admin token's entropy,
not this, is what makes guessing hopeless: this stops noise and slows the careless).

Example::

    throttle = LoginThrottle()
    if (wait := throttle.retry_after("10.0.0.7")) > 0:
        ...  # 429, Retry-After: ceil(wait)
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class LoginThrottle:
    max_failures: int = 5
    window_s: float = 60.0
    max_clients: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _failures: OrderedDict[str, deque[float]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def retry_after(self, client: str) -> float:
        """Seconds ``client`` must wait before its next attempt (0: it may try now)."""
        failures = self._recent(client)
        if len(failures) < self.max_failures:
            return 0.0
        return max(0.0, failures[0] + self.window_s - self.clock())

    def failed(self, client: str) -> None:
        failures = self._recent(client)
        failures.append(self.clock())
        self._failures[client] = failures
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)

    def _recent(self, client: str) -> deque[float]:
        failures = self._failures.get(client, deque())
        horizon = self.clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        return failures
