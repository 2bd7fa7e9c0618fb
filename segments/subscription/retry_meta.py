"""What the retry path knows of a message in a subscription's internal topics, carried in
``x-httpbus-*`` headers (names and codec: :mod:`core.envelope`), and the record that carries
a message there.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import envelope as env
from core.envelope import INTERNAL_PREFIX as PREFIX
from core.envelope import own_headers

from ..protocol import Headers, Record, Stored


@dataclass(frozen=True)
class RetryMeta:
    """What the retry path knows of a message, carried in ``x-httpbus-*`` headers.

    ``attempts`` counts the failed attempts so far (the next attempt is ``attempts + 1``);
    ``origin`` is ``"segment:partition:position"`` of the message in its topic; ``entered_ms``
    is when it was appended to its current internal topic.
    """

    origin: str
    topic: str
    due_ms: int = 0
    entered_ms: int = 0
    attempts: int = 0
    first_failed_ms: int | None = None
    last_failed_ms: int | None = None
    last_status: int | None = None
    last_error: str | None = None

    def headers(self) -> Headers:
        pairs: list[tuple[str, str | int | None]] = [
            (env.RETRY_ORIGIN, self.origin),
            (env.RETRY_TOPIC, self.topic),
            (env.RETRY_DUE, self.due_ms),
            (env.RETRY_ENTERED, self.entered_ms),
            (env.RETRY_ATTEMPTS, self.attempts),
            (env.RETRY_FIRST_FAILED, self.first_failed_ms),
            (env.RETRY_LAST_FAILED, self.last_failed_ms),
            (env.RETRY_LAST_STATUS, self.last_status),
            (env.RETRY_LAST_ERROR, self.last_error),
        ]
        return tuple(
            (name, env.encode_internal(str(value))) for name, value in pairs if value is not None
        )

    @classmethod
    def of(cls, headers: Headers) -> RetryMeta:
        found = {k: env.decode_internal(v) for k, v in headers if k.startswith(PREFIX)}

        def num(name: str) -> int | None:
            value = found.get(name)
            return int(value) if value is not None and value.lstrip("-").isdigit() else None

        return cls(
            origin=found.get(env.RETRY_ORIGIN, "?"),
            topic=found.get(env.RETRY_TOPIC, "?"),
            due_ms=num(env.RETRY_DUE) or 0,
            entered_ms=num(env.RETRY_ENTERED) or 0,
            attempts=num(env.RETRY_ATTEMPTS) or 0,
            first_failed_ms=num(env.RETRY_FIRST_FAILED),
            last_failed_ms=num(env.RETRY_LAST_FAILED),
            last_status=num(env.RETRY_LAST_STATUS),
            last_error=found.get(env.RETRY_LAST_ERROR),
        )


def origin_partition(origin: str) -> int:
    """The partition of an ``origin`` (``"segment:partition:position"``); 0 if unreadable."""
    parts = origin.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 0


def internal_record(msg: Stored, meta: RetryMeta, extra: Headers = ()) -> Record:
    """The record that carries ``msg`` (payload, key, own headers) with ``meta``."""
    return Record(
        value=msg.value, key=msg.key, headers=own_headers(msg.headers) + meta.headers() + extra
    )
