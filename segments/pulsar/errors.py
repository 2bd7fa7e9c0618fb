"""Translation of pulsar-client exceptions and admin HTTP errors into the httpbus tree.

Nothing of pulsar-client or httpx escapes this backend: every call site catches the client's
exceptions and raises what :func:`from_pulsar` / :func:`from_admin_status` /
:func:`from_transport` return, ``from`` the original.
"""

from __future__ import annotations

import httpx
import pulsar
from pulsar.asyncio import PulsarException as AsyncPulsarException

from core.errors import (
    AlreadyExists,
    HttpbusError,
    Malformed,
    NotFound,
    SegmentFenced,
    StorageUnavailable,
    TooLarge,
)

RETRY_AFTER_S = 1.0

PULSAR_ERRORS: tuple[type[Exception], ...] = (AsyncPulsarException, pulsar.PulsarException)
"""What the asyncio API and the blocking C++ bindings raise."""


class PositionOverflow(HttpbusError):
    """A Pulsar message id does not fit the packed position (see ``producer.pack``)."""


def result_of(exc: BaseException) -> pulsar.Result | None:
    """The ``pulsar.Result`` code carried by a client exception, if any."""
    if isinstance(exc, AsyncPulsarException):
        result: pulsar.Result = exc.error()
        return result
    name = type(exc).__name__
    return getattr(pulsar.Result, name, None)


def from_pulsar(exc: BaseException, what: str) -> HttpbusError:
    """The httpbus error for a failed client call on ``what`` (a topic, usually)."""
    return from_result(result_of(exc), what, str(exc))


def from_result(result: pulsar.Result | None, what: str, text: str = "") -> HttpbusError:
    """The httpbus error for a callback's ``result`` (not ``Ok``) on ``what``."""
    if result == pulsar.Result.TopicTerminated:
        return SegmentFenced(f"{what} is sealed (Pulsar topic terminated)")
    if result == pulsar.Result.TopicNotFound:
        return NotFound(f"{what} does not exist")
    if result == pulsar.Result.MessageTooBig:
        return TooLarge(f"message too large for {what}")
    if result == pulsar.Result.InvalidTopicName:
        return Malformed(f"{what} is not a valid Pulsar topic name")
    return StorageUnavailable(
        f"pulsar failed on {what}: {text or result}",
        details={"result": str(result)},
        retry_after=RETRY_AFTER_S,
    )


def from_admin_status(status: int, reason: str, what: str) -> HttpbusError:
    """The httpbus error for a non-2xx answer of the Pulsar admin REST API."""
    if status == 404:
        return NotFound(f"{what}: {reason or 'not found'}")
    if status == 409:
        return AlreadyExists(f"{what}: {reason or 'already exists'}")
    # 401/403 (bad token), 412, 5xx and anything else: the cluster refused to work.
    return StorageUnavailable(
        f"pulsar admin answered {status} on {what}: {reason}",
        details={"status": status},
        retry_after=RETRY_AFTER_S,
    )


def from_transport(exc: httpx.HTTPError, what: str) -> HttpbusError:
    """The httpbus error when the admin API could not be reached or did not answer."""
    return StorageUnavailable(
        f"pulsar admin unreachable on {what}: {type(exc).__name__} {exc}",
        retry_after=RETRY_AFTER_S,
    )


def timed_out(what: str, seconds: float) -> StorageUnavailable:
    """The error of a Pulsar wait that exceeded its bound."""
    return StorageUnavailable(
        f"pulsar did not answer on {what} within {seconds:g}s", retry_after=RETRY_AFTER_S
    )
