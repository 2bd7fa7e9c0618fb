"""confluent-kafka errors translated into the httpbus tree; none leaves the backend.

A missing topic or partition is ``NotFound``; an existing one on create is ``AlreadyExists``;
a record the broker (or librdkafka) finds too large is ``TooLarge`` — the store turns that into
``SegmentFenced`` when the topic is sealed, since the fence *is* a zero ``max.message.bytes``
(see ``store``); a timestamp too far ahead is ``ValidationFailed``. Everything else —
timeouts, brokers down, transport errors, refusals we do not expect — is
``StorageUnavailable`` (503, retry later).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from core.errors import (
    AlreadyExists,
    HttpbusError,
    NotFound,
    StorageUnavailable,
    TooLarge,
    ValidationFailed,
)

T = TypeVar("T")

RETRY_AFTER_S = 1.0

_NOT_FOUND = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_ID,
    }
)
# Met for a moment after a topic is created or a leader moves; librdkafka may not flag them.
_TRANSIENT = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
)
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# Purged from librdkafka's queue before it was sent: known never stored.
_NEVER_SENT = frozenset({KafkaError._PURGE_QUEUE})


def error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a confluent-kafka exception carries, if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def code_of(exc: BaseException | KafkaError | None) -> int | None:
    """The librdkafka error code of an exception or error, if any."""
    err = exc if isinstance(exc, KafkaError) else (error_of(exc) if exc is not None else None)
    return None if err is None else int(err.code())


def translate(err: KafkaError | BaseException, what: str) -> HttpbusError:
    """The httpbus error for a confluent-kafka failure met while doing ``what``."""
    if isinstance(err, HttpbusError):
        return err
    kerr = err if isinstance(err, KafkaError) else error_of(err)
    if kerr is None:
        return unavailable(what, f"failed: {err!r}")
    details: dict[str, Any] = {
        "backend": "kafka",
        "kafka_error": kerr.name(),
        "retriable": bool(kerr.retriable()) or kerr.code() in _TRANSIENT,
    }
    message = f"kafka: {what} failed: {kerr.str()}"
    code = kerr.code()
    if code in _NOT_FOUND:
        return NotFound(message, details=details)
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return AlreadyExists(message, details=details)
    if code in _TOO_LARGE:
        return TooLarge(message, details=details)
    if code == KafkaError.INVALID_TIMESTAMP:
        return ValidationFailed(message, details=details)
    if code in _NEVER_SENT:
        details["stored"] = False
    return StorageUnavailable(message, details=details, retry_after=RETRY_AFTER_S)


def unavailable(what: str, reason: str, *, stored: bool | None = None) -> StorageUnavailable:
    """A ``StorageUnavailable`` for a failure that is not a Kafka error (timeout, closed);
    ``stored=False`` when the record is known never to have left this process."""
    details: dict[str, Any] = {"backend": "kafka"}
    if stored is not None:
        details["stored"] = stored
    return StorageUnavailable(f"kafka: {what} {reason}", details=details, retry_after=RETRY_AFTER_S)


def is_transient(exc: BaseException) -> bool:
    """Whether a translated error is worth retrying at once (a leader being elected, …)."""
    return isinstance(exc, StorageUnavailable) and bool(exc.details.get("retriable"))


async def retrying(call: Callable[[], Awaitable[T]], *, timeout: float, what: str) -> T:
    """``call()`` again while it fails transiently, within ``timeout`` seconds overall."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await call()
        except TimeoutError as exc:
            raise unavailable(what, f"got no answer within {timeout:g}s") from exc
        except HttpbusError as exc:
            if not is_transient(exc) or time.monotonic() + 0.05 > deadline:
                raise
        await asyncio.sleep(0.05)


async def resolve(future: concurrent.futures.Future[T], *, timeout: float, what: str) -> T:
    """The result of an AdminClient future within ``timeout`` seconds, errors translated.

    The wait is bounded here, not by librdkafka: an AdminClient facing a dead broker keeps its
    request queued until its own (long) request timeout."""
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.wrap_future(future)
    except TimeoutError as exc:
        raise unavailable(what, f"got no answer within {timeout:g}s") from exc
    except KafkaException as exc:
        raise translate(exc, what) from exc
