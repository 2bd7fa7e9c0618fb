"""The outcome of one delivery attempt, as facts: what the endpoint answered, or why no answer
came. Whether a failure is tried again is not a fact of the attempt but the subscription's
choice: :func:`core.retry.decide` is the one place that reads these facts against the policy.

- ``status``: the HTTP status of the answer, None when none came back;
- ``error_kind``: why no answer came (:class:`ErrorKind`), None when one came;
- ``retry_after``: the endpoint's own ``Retry-After`` in seconds (delta-seconds or an
  HTTP-date, capped at :data:`MAX_RETRY_AFTER_S`), read on every failed answer;
- ``error``: a human line for the DLQ and the audit trail (never parsed);
- ``answer``: the first characters of the answer's body (whitespace folded), for the trace;
- ``failed_ids``: for a batch answered 2xx with ``{"failed": ["id", …]}`` (docs/receiving.md,
  "Batches"), the ids the endpoint names failed; None for any other answer.

Redirects are never followed: the endpoint is what the operator configured, and a redirect
would send a signed payload to a URL nobody approved (and 301/302/303 turn a POST into a
bodiless GET in most clients). The ``Location`` is kept in the error so the operator can fix
the subscription's URL.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

from .json_depth import too_deep

MAX_RETRY_AFTER_S = 3_600.0
EXCERPT_CHARS = 200


class ErrorKind(StrEnum):
    """Why an attempt got no answer."""

    TIMEOUT = "timeout"  # the endpoint's ``timeout_ms`` passed first
    CONNECTION = "connection"  # could not connect, or the connection was lost
    INVALID_REQUEST = "invalid_request"  # the request cannot be sent as configured
    INVALID_RESPONSE = "invalid_response"  # the answer broke HTTP or one of its limits
    UNEXPECTED = "unexpected"  # anything else: may be transient
    REPORTED_FAILED = "reported_failed"  # a batch's answer named this message failed


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    return next((v for k, v in headers.items() if k.lower() == name), None)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date), at most
    :data:`MAX_RETRY_AFTER_S`; None if absent or unreadable. A date in the past is 0."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _excerpt(body: bytes) -> str:
    text = " ".join(body[: EXCERPT_CHARS * 4].decode("utf-8", "replace").split())
    return text[:EXCERPT_CHARS]


def _status_error(status: int, headers: Mapping[str, str], answer: str | None) -> str:
    error = f"HTTP {status}"
    if 300 <= status < 400:
        location = _header(headers, "location")
        error += f": redirects are not followed (Location: {location or 'none'})"
    elif answer:
        error += f": {answer}"
    return error


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What one attempt came to (see the module doc). Build it with :meth:`from_response`,
    :meth:`from_exception` or :meth:`failure`."""

    status: int | None = None
    error_kind: ErrorKind | None = None
    retry_after: float | None = None
    error: str | None = None
    latency_s: float = 0.0
    answer: str | None = None
    failed_ids: frozenset[str] | None = None

    @property
    def succeeded(self) -> bool:
        """The endpoint answered 2xx."""
        status = self.status
        return status is not None and 200 <= status < 300

    @classmethod
    def from_response(
        cls,
        status: int,
        headers: Mapping[str, str],
        latency_s: float,
        *,
        body: bytes = b"",
        now: float | None = None,
        batch: bool = False,
    ) -> DeliveryResult:
        """An answer. ``body`` (the start of the response) goes into the error of a failure,
        so the DLQ shows what the endpoint said; ``now`` reads HTTP-dates; for a ``batch``, a
        2xx body may name failed messages (:func:`failed_ids`)."""
        answer = _excerpt(body) or None
        if 200 <= status < 300:
            failed = failed_ids(body) if batch else None
            return cls(status, latency_s=latency_s, answer=answer, failed_ids=failed)
        error = _status_error(status, headers, answer)
        now = time.time() if now is None else now
        after = parse_retry_after(_header(headers, "retry-after"), now)
        return cls(status, None, after, error, latency_s, answer)

    @classmethod
    def failure(cls, kind: ErrorKind, error: str, latency_s: float = 0.0) -> DeliveryResult:
        """An attempt without an answer, of a known kind."""
        return cls(None, kind, None, error, latency_s)

    @classmethod
    def reported_failed(cls, batch: DeliveryResult, why: str) -> DeliveryResult:
        """One message of a batch answered 2xx that the answer names failed: a failure of
        this message alone, always retryable."""
        error = f"HTTP {batch.status}, {why}"
        return cls(None, ErrorKind.REPORTED_FAILED, None, error, batch.latency_s, batch.answer)

    @classmethod
    def invalid(cls, error: str, latency_s: float = 0.0) -> DeliveryResult:
        """A delivery that cannot be attempted as configured (say, a secret that is not
        base64): to the DLQ with the reason, to replay once the subscription is fixed."""
        return cls(None, ErrorKind.INVALID_REQUEST, None, error, latency_s)

    @classmethod
    def from_exception(cls, exc: BaseException, latency_s: float) -> DeliveryResult:
        """An attempt that raised a standard error: ``TimeoutError`` is a timeout, ``OSError``
        (``ConnectionError`` among them) a connection error, anything else unexpected. A
        sender whose client library has errors of its own maps them with :meth:`failure`."""
        kind = type(exc).__name__
        if isinstance(exc, TimeoutError):
            return cls.failure(ErrorKind.TIMEOUT, timeout_error(kind, latency_s), latency_s)
        detail = f"{kind}: {exc}" if str(exc) else kind
        if isinstance(exc, OSError):
            return cls.failure(ErrorKind.CONNECTION, f"connection error: {detail}", latency_s)
        return cls.failure(ErrorKind.UNEXPECTED, f"unexpected error: {detail}", latency_s)


def timeout_error(kind: str, latency_s: float) -> str:
    """The error line of a timeout raised as ``kind`` after ``latency_s``."""
    return f"timeout after {latency_s * 1000:.0f} ms ({kind})"


def failed_ids(body: bytes) -> frozenset[str] | None:
    """The ids of a batch answer's ``{"failed": ["id", …]}``; None for any other body (an
    empty one, text, JSON of another shape): the whole batch is then delivered. The answer
    is read up to the sender's limit (64 KiB); a cut one does not parse, so it is None too:
    keep the list within the limit (1 000 ids of 60 characters fit). A body nested deeper
    than :data:`~core.json_depth.MAX_DEPTH` is not read either: parsing it would recurse out
    of the stack (``{"failed": [[[…`` dead-lettered a whole batch)."""
    start = body.lstrip()[:1]
    if start != b"{" or b'"failed"' not in body or too_deep(body):
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    failed = doc.get("failed") if isinstance(doc, dict) else None
    if not isinstance(failed, list) or not all(isinstance(x, str) for x in failed):
        return None
    return frozenset(failed)
