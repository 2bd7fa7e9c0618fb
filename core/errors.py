"""The one exception tree of httpbus, and the stable error codes every API answers with.

Every error a client can see is an :class:`HttpbusError` carrying an :class:`ErrorCode`; the
code names the HTTP status, so one handler per service renders any of them as
``{"code": ..., "message": ..., "details": ...}``. Adapters translate the errors of kazoo,
confluent-kafka, pulsar-client and SQLAlchemy at their boundary, for example::

    try:
        await producer.send(...)
    except pulsar.Timeout as exc:
        raise StorageUnavailable("pulsar-main did not acknowledge in 5s") from exc
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorCode(Enum):
    """A stable, documented error code and the HTTP status it answers with."""

    MALFORMED = ("malformed", 400)
    INVALID_CLOUDEVENT = ("invalid_cloudevent", 400)
    UNAUTHORIZED = ("unauthorized", 401)
    FORBIDDEN = ("forbidden", 403)
    GRANT_REQUIRED = ("grant_required", 403)
    NOT_FOUND = ("not_found", 404)
    METHOD_NOT_ALLOWED = ("method_not_allowed", 405)
    REQUEST_TIMEOUT = ("request_timeout", 408)
    ALREADY_EXISTS = ("already_exists", 409)
    VERSION_CONFLICT = ("version_conflict", 409)
    TOO_MANY_SECRETS = ("too_many_secrets", 409)
    IN_USE = ("in_use", 409)
    SEGMENT_FENCED = ("segment_fenced", 409)
    CUTOVER_IN_PROGRESS = ("cutover_in_progress", 409)
    CUTOVER_COMMITTED = ("cutover_committed", 409)
    MIGRATION_IN_PROGRESS = ("migration_in_progress", 409)
    SCHEMA_INCOMPATIBLE = ("schema_incompatible", 409)
    QUOTA_EXCEEDED = ("quota_exceeded", 409)
    TOO_LARGE = ("too_large", 413)
    VALIDATION_FAILED = ("validation_failed", 422)
    SCHEMA_VIOLATION = ("schema_violation", 422)
    THROTTLED = ("throttled", 429)
    HEADERS_TOO_LARGE = ("headers_too_large", 431)
    INTERNAL = ("internal", 500)
    STORAGE_UNAVAILABLE = ("storage_unavailable", 503)
    METASTORE_UNAVAILABLE = ("metastore_unavailable", 503)
    CUTOVER_TIMEOUT = ("cutover_timeout", 503)
    DUPLICATE_IN_FLIGHT = ("duplicate_in_flight", 503)
    NOT_READY = ("not_ready", 503)

    def __init__(self, code: str, status: int) -> None:
        self.code = code
        self.status = status


class HttpbusError(Exception):
    """The root of every error httpbus raises on purpose."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.retry_after = retry_after

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class Malformed(HttpbusError):
    code = ErrorCode.MALFORMED


class InvalidCloudEvent(Malformed):
    """A publish in the CloudEvents HTTP binding whose event is not a valid CloudEvent 1.0
    (a required attribute missing or wrong, an attribute httpbus cannot store); the message
    names the attribute and what to send instead."""

    code = ErrorCode.INVALID_CLOUDEVENT


class Unauthorized(HttpbusError):
    code = ErrorCode.UNAUTHORIZED


class Forbidden(HttpbusError):
    code = ErrorCode.FORBIDDEN


class GrantRequired(Forbidden):
    """A subscription to another project's topic, without a grant from that topic's owner."""

    code = ErrorCode.GRANT_REQUIRED


class NotFound(HttpbusError):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(HttpbusError):
    code = ErrorCode.ALREADY_EXISTS


class VersionConflict(HttpbusError):
    """A compare-and-set lost: someone else changed the entity since it was read."""

    code = ErrorCode.VERSION_CONFLICT


class InUse(HttpbusError):
    """The entity is still needed (a topic with subscriptions, say)."""

    code = ErrorCode.IN_USE


class SegmentFenced(HttpbusError):
    """A write reached a sealed segment; the fence refused it, nothing was stored."""

    code = ErrorCode.SEGMENT_FENCED


class TooLarge(HttpbusError):
    code = ErrorCode.TOO_LARGE


class HeadersTooLarge(HttpbusError):
    """The request's header section (or a message's headers) is over the size allowed."""

    code = ErrorCode.HEADERS_TOO_LARGE


class RequestTimeout(HttpbusError):
    """The client did not send the request (its headers or body) in the time allowed."""

    code = ErrorCode.REQUEST_TIMEOUT


class ValidationFailed(HttpbusError):
    code = ErrorCode.VALIDATION_FAILED


class SchemaViolation(ValidationFailed):
    """A payload the topic's schema refuses (``details``: ``path``, ``rule``,
    ``schema_version``)."""

    code = ErrorCode.SCHEMA_VIOLATION


class SchemaIncompatible(HttpbusError):
    """A schema version that breaks the topic's compatibility mode (``details``: ``path``,
    ``rule``, ``compatibility``)."""

    code = ErrorCode.SCHEMA_INCOMPATIBLE


class SecretInForce(ValidationFailed):
    """A rotation to a signing secret that already signs the subscription's deliveries."""


class TooManySecrets(HttpbusError):
    """A rotation would leave more earlier signing secrets in their overlap than allowed."""

    code = ErrorCode.TOO_MANY_SECRETS


class Throttled(HttpbusError):
    code = ErrorCode.THROTTLED


class QuotaExceeded(HttpbusError):
    """A project already has as many topics (or subscriptions) as its quota allows."""

    code = ErrorCode.QUOTA_EXCEEDED


class StorageUnavailable(HttpbusError):
    """Kafka, Pulsar or the embedded store did not answer in time or refused to work.

    ``details["stored"] is False`` when the backend knows the message was never handed to the
    storage (refused locally, purged before it was sent): a failover may write it elsewhere
    (:attr:`not_stored`). Otherwise it may have been stored, and only the client may retry."""

    code = ErrorCode.STORAGE_UNAVAILABLE

    @property
    def not_stored(self) -> bool:
        return self.details.get("stored") is False


class MetaStoreUnavailable(HttpbusError):
    code = ErrorCode.METASTORE_UNAVAILABLE


class NotReady(HttpbusError):
    """A part the service needs is down (``httpbus dev``: a child it is restarting)."""

    code = ErrorCode.NOT_READY


class CutoverInProgress(HttpbusError):
    """The topic is in a cutover already; wait for it to finish or abort it."""

    code = ErrorCode.CUTOVER_IN_PROGRESS


class CutoverCommitted(HttpbusError):
    """The cutover has committed: it cannot be aborted (start another cutover instead)."""

    code = ErrorCode.CUTOVER_COMMITTED


class MigrationInProgress(HttpbusError):
    """The topic has a verified migration under way (core.migration): abandon it first, or
    let it finish."""

    code = ErrorCode.MIGRATION_IN_PROGRESS


class CutoverTimeout(HttpbusError):
    """A producer held a request through a cutover's switch longer than it may."""

    code = ErrorCode.CUTOVER_TIMEOUT


class DuplicateInFlight(HttpbusError):
    """A publish with the same ``X-Message-Id`` is being stored by another request right now
    (a topic with ``dedupe_window``); retry after a moment to learn its outcome."""

    code = ErrorCode.DUPLICATE_IN_FLIGHT
