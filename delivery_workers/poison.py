"""Poison messages: one message the worker keeps failing on never stops its subscription.

A message that makes the *sender* raise fails alone (:meth:`.attempt.Attempts._send`). Any
other exception while the runner handles one message (decoding its envelope, filtering,
admitting it, carrying out its verdict) is raised as :class:`MessageCrashed`, naming the
message by its origin (``segment:partition:position``). The runner stops, and the worker
starts it again from the committed positions, so one bad moment costs a restart, not a
message.

:class:`RunnerCrashes` counts the crashes of one subscription in a row at the same origin.
After ``limit`` of them the origin is *poisoned*: the next runner skips everything it would
do with that message and dead-letters it at once (in its group's order, as a failed delivery
would be), with the reason in its DLQ entry, and goes on with the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import HttpbusError, MetaStoreUnavailable, StorageUnavailable
from core.result import DeliveryResult, ErrorKind

log = logging.getLogger(__name__)

CRASH_LIMIT = 3
MAX_POISONED = 1_000  # per subscription; the oldest is forgotten (it is long committed)


class MessageCrashed(HttpbusError):
    """The runner failed while handling the message at ``origin``."""

    def __init__(self, origin: str, cause: BaseException) -> None:
        kind = type(cause).__name__
        self.origin = origin
        self.cause = f"{kind}: {cause}" if str(cause) else kind
        super().__init__(f"the worker failed on the message at {origin}: {self.cause}")


@contextmanager
def crash_names(origin: str) -> Iterator[None]:
    """Raise any exception of the block as the :class:`MessageCrashed` of ``origin``."""
    try:
        yield
    except (MessageCrashed, StorageUnavailable, MetaStoreUnavailable):
        raise  # named already, or not the message's fault
    except Exception as exc:
        raise MessageCrashed(origin, exc) from exc


class RunnerCrashes:
    """The crashes in a row of one subscription's runner, and the origins they poisoned."""

    def __init__(self, limit: int = CRASH_LIMIT) -> None:
        self.limit = limit
        self.poisoned: dict[str, str] = {}  # origin -> why, read by the runner
        self._origin: str | None = None
        self._count = 0

    def record(self, exc: BaseException, name: str) -> None:
        """A runner of ``name`` failed with ``exc``; poison its message after ``limit``."""
        if not isinstance(exc, MessageCrashed):
            self._origin, self._count = None, 0  # not a message's fault
            return
        if exc.origin != self._origin:
            self._origin, self._count = exc.origin, 0
        self._count += 1
        if self._count < self.limit:
            return
        why = f"the worker failed on this message {self._count} times in a row: {exc.cause}"
        log.error("%s: dead-lettering the message at %s (%s)", name, exc.origin, why)
        if len(self.poisoned) >= MAX_POISONED:
            del self.poisoned[next(iter(self.poisoned))]
        self.poisoned[exc.origin] = why
        self._origin, self._count = None, 0


def poisoned_result(why: str) -> DeliveryResult:
    """The failure a poisoned message is dead-lettered with (never sent)."""
    return DeliveryResult.failure(ErrorKind.UNEXPECTED, why)
