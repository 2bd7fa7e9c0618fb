"""Login throttling: whoever keeps typing wrong credentials waits, and nobody else does.

A failed login is counted three ways, each over the last ``window_s`` seconds:

- per **address and user name** (the admin token counts as one name): past
  ``max_failures`` that pair waits. This is the throttle a guesser meets;
- per **user name**, from any address: past ``max_user_failures`` (a few times the pair's
  limit) that name waits wherever it is tried from, so guessing one account from many
  addresses is slowed too;
- per **address**, for any name: past ``max_address_failures`` (far higher) the address
  waits, so one address cannot try name after name.

So five wrong passwords for one name do not stop the right password of another name, nor
the admin token, from the same address (behind a proxy every user shares one address, and
a throttle per address let anyone lock everybody out). A success clears its pair and its
name. The address is the TCP peer's unless the peer is a configured proxy
(``http_server.forwarded_allow_ips``): a client cannot rotate ``X-Forwarded-For`` to escape.
Memory is bounded: past ``max_entries`` counters the longest-unseen ones are forgotten.
Each control-plane process throttles on its own (a guesser spread over N processes gets N
times the rate; the admin token's entropy and argon2id are what make guessing hopeless:
this stops noise and slows the careless).

Example::

    throttle = LoginThrottle()
    if (wait := throttle.retry_after("10.0.0.7", "ada")) > 0:
        ...  # 429, Retry-After: ceil(wait)
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

ADMIN_TOKEN_NAME = "\x00admin-token"  # the name a login with the admin token counts under

Key = tuple[str, str, str]  # (kind, address, name)


@dataclass(eq=False)
class LoginThrottle:
    max_failures: int = 5
    max_user_failures: int = 20
    max_address_failures: int = 100
    window_s: float = 60.0
    max_entries: int = 30_000
    clock: Callable[[], float] = time.monotonic
    _failures: OrderedDict[Key, deque[float]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def retry_after(self, address: str, name: str) -> float:
        """Seconds a login as ``name`` from ``address`` must wait (0: it may try now)."""
        wait = 0.0
        for key, limit in self._limits(address, name):
            failures = self._recent(key)
            if len(failures) >= limit:
                wait = max(wait, failures[-limit] + self.window_s - self.clock())
        return max(0.0, wait)

    def failed(self, address: str, name: str) -> None:
        now = self.clock()
        for key, _ in self._limits(address, name):
            failures = self._recent(key)
            failures.append(now)
            self._failures[key] = failures
            self._failures.move_to_end(key)
        while len(self._failures) > self.max_entries:
            self._failures.popitem(last=False)

    def succeeded(self, address: str, name: str) -> None:
        self._failures.pop(("pair", address, name), None)
        self._failures.pop(("name", "", name), None)

    def _limits(self, address: str, name: str) -> tuple[tuple[Key, int], ...]:
        return (
            (("pair", address, name), self.max_failures),
            (("name", "", name), self.max_user_failures),
            (("address", address, ""), self.max_address_failures),
        )

    def _recent(self, key: Key) -> deque[float]:
        failures = self._failures.get(key, deque())
        horizon = self.clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        return failures
