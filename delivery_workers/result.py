"""The outcome of one delivery attempt, as a value the retry and DLQ logic reads.

- 2xx: delivered.
- 408, 429, 5xx, timeouts and connection errors: retryable, honouring ``Retry-After``
  (delta-seconds or an HTTP-date, capped at :data:`MAX_RETRY_AFTER_S`).
- other 4xx: rejected (to the DLQ), or retryable when the subscription's ``retry_4xx`` is set.
- 3xx: rejected. Redirects are never followed: the endpoint is what the operator configured,
  and a redirect would send a signed payload to a URL nobody approved (and 301/302/303 turn a
  POST into a bodiless GET in most clients). The ``Location`` is kept in the error so the
  operator can fix the subscription's URL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

import httpx

MAX_RETRY_AFTER_S = 3_600.0
EXCERPT_CHARS = 200


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRYABLE = "retryable"
    REJECTED = "rejected"


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


def _status_error(status: int, headers: Mapping[str, str], body: bytes) -> str:
    error = f"HTTP {status}"
    if 300 <= status < 400:
        location = _header(headers, "location")
        error += f": redirects are not followed (Location: {location or 'none'})"
    elif body:
        error += f": {_excerpt(body)}"
    return error


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What one attempt came to. ``status`` is None when no response came back;
    ``retry_after`` is the endpoint's own ``Retry-After`` in seconds, when it sent one."""

    outcome: Outcome
    status: int | None = None
    retry_after: float | None = None
    error: str | None = None
    latency_s: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.outcome is Outcome.DELIVERED

    @property
    def retryable(self) -> bool:
        return self.outcome is Outcome.RETRYABLE

    @classmethod
    def from_response(
        cls,
        status: int,
        headers: Mapping[str, str],
        latency_s: float,
        *,
        retry_4xx: bool = False,
        body: bytes = b"",
        now: float | None = None,
    ) -> DeliveryResult:
        """Classify an answer. ``body`` (the start of the response) goes into the error of a
        failure, so the DLQ shows what the endpoint said; ``now`` reads HTTP-dates."""
        if 200 <= status < 300:
            return cls(Outcome.DELIVERED, status, latency_s=latency_s)
        error = _status_error(status, headers, body)
        retry = status in (408, 429) or 500 <= status < 600 or (retry_4xx and 400 <= status < 500)
        if not retry:
            return cls(Outcome.REJECTED, status, error=error, latency_s=latency_s)
        now = time.time() if now is None else now
        after = parse_retry_after(_header(headers, "retry-after"), now)
        return cls(Outcome.RETRYABLE, status, after, error, latency_s)

    @classmethod
    def from_exception(cls, exc: Exception, latency_s: float) -> DeliveryResult:
        """Classify an attempt that got no answer. A request the HTTP client refuses to send
        (bad URL or header) is rejected: sending it again would fail the same way. Anything
        else, known or not, may be transient, so it is retryable."""
        kind = type(exc).__name__
        detail = f"{kind}: {exc}" if str(exc) else kind
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            error = f"timeout after {latency_s * 1000:.0f} ms ({kind})"
        elif isinstance(
            exc, httpx.InvalidURL | httpx.UnsupportedProtocol | httpx.LocalProtocolError
        ):
            return cls(Outcome.REJECTED, error=f"invalid request: {detail}", latency_s=latency_s)
        elif isinstance(exc, httpx.TransportError | OSError):
            error = f"connection error: {detail}"
        else:
            error = f"unexpected error: {detail}"
        return cls(Outcome.RETRYABLE, error=error, latency_s=latency_s)

    @classmethod
    def rejected(cls, error: str, latency_s: float = 0.0) -> DeliveryResult:
        """A delivery that cannot be attempted as configured (say, a secret that is not
        base64): to the DLQ with the reason, to replay once the subscription is fixed."""
        return cls(Outcome.REJECTED, error=error, latency_s=latency_s)
