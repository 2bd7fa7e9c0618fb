"""The bounds on what an endpoint may answer: every byte a receiver sends is hostile until
counted.

Receivers are outside our control, and one worker's event loop carries every project's
deliveries. httptools gathers a header's value by concatenating ``bytes`` chunk after chunk,
without a limit: an endpoint answering a 200 MB header stalled the loop for 9-13 s (its
ZooKeeper session expired, its locks went to other workers). So the head of an answer is
counted *before* the parser sees it, chunk by chunk, by :class:`HeadGuard` (a ``find`` of the
next line end per line, nothing accumulated), and each phase of an attempt has a time limit
of its own (:class:`AnswerLimits`):

- **connect** (name resolution, TCP, TLS) within ``connect_timeout_s``;
- **head** (status line and headers, from the answer's first byte, again for each interim
  ``1xx`` answer) within ``head_timeout_s``; the status line, each header line, the number
  of headers, the number of interim answers and the whole head (interim ones included)
  within their limits; a ``101 Switching Protocols`` is refused (there is no upgrade to
  follow);
- **body** within ``body_timeout_s`` after the head; its first
  :data:`.sender.MAX_RESPONSE_BYTES` are kept, and at most :data:`BODY_WIRE_FACTOR` times
  that is read off the wire (chunk framing and trailers included) before the connection is
  dropped with what was read.

An answer over a limit fails the attempt as :attr:`~core.result.ErrorKind.INVALID_RESPONSE`
(retried as a connection error is: the policy's ``retry_connection_errors``), a phase over
its time as a timeout; either way the connection is closed and not read further. Those
failures are logged through :class:`QuietLog`: one line per endpoint per minute, never a
traceback per attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from core.settings import seconds

BODY_WIRE_FACTOR = 4
"""Bytes read after the head, at most, as a multiple of the body kept: chunk sizes and
trailers take room, a flood of one-byte chunks or an endless trailer does not take more."""


class AnswerLimits(BaseModel):
    """What an endpoint's answer may be (setting ``answer_limits`` of the worker)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_status_line_bytes: int = Field(
        default=8 * 1024, ge=64, le=1024 * 1024, description="the answer's status line, in bytes"
    )
    max_header_line_bytes: int = Field(
        default=16 * 1024, ge=64, le=1024 * 1024, description="each header line, in bytes"
    )
    max_headers: int = Field(default=100, ge=1, le=10_000, description="headers per answer")
    max_head_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="status lines and headers of an answer, interim 1xx answers included",
    )
    max_interim_answers: int = Field(
        default=16, ge=0, le=1_000, description="interim 1xx answers before the final one"
    )
    connect_timeout_s: float = seconds(10.0, 600, "resolving, connecting and the TLS handshake")
    head_timeout_s: float = seconds(
        10.0, 600, "from an answer's first byte to the end of its headers"
    )
    body_timeout_s: float = seconds(30.0, 3600, "from the end of the headers to the last byte")


class InvalidAnswer(Exception):
    """The endpoint's answer broke HTTP or one of the :class:`AnswerLimits`."""


class ConnectTimeout(TimeoutError):
    """Connecting took longer than ``connect_timeout_s``."""


class HeadTimeout(TimeoutError):
    """The answer's head took longer than ``head_timeout_s`` from its first byte."""


class BodyTimeout(TimeoutError):
    """The answer's body took longer than ``body_timeout_s`` after its head."""


class HeadGuard:
    """Counts the heads of one answer as its bytes arrive, before any parser sees them.

    :meth:`feed` takes each chunk and says what is wrong, or None; once the final head has
    ended (:attr:`done`) the rest is the body's, and :attr:`body_bytes` counts it. Lines end
    with LF (a CR before it counts in the line, as it is part of it on the wire)."""

    __slots__ = (
        "body_bytes",
        "done",
        "head_bytes",
        "interim",
        "limits",
        "_blank",
        "_line",
        "_lines",
        "_small",
        "_status",
    )

    def __init__(self, limits: AnswerLimits) -> None:
        self.limits = limits
        self.done = False
        self.head_bytes = 0  # every head of the answer so far
        self.body_bytes = 0  # on the wire, after the final head
        self.interim = 0
        self._line = 0  # bytes of the line in progress
        self._lines = 0  # complete lines of the head in progress (the status line first)
        self._status = b""  # the start of the status line
        self._blank = 0  # empty lines before a status line
        self._small = min(limits.max_status_line_bytes, limits.max_header_line_bytes) - 4

    @property
    def in_head(self) -> bool:
        """A head has begun and not ended."""
        return not self.done and (self._lines > 0 or self._line > 0)

    def feed(self, data: bytes) -> str | None:
        """Count ``data``; the reason the answer is refused, or None."""
        if self.done:
            self.body_bytes += len(data)
            return None
        if self.head_bytes == 0 and self._whole_small_head(data):
            return None
        pos, size = 0, len(data)
        while pos < size:
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline + 1
            problem = self._count(data, pos, end)
            if problem is not None:
                return problem
            if newline >= 0:
                problem = self._line_ended()
            if problem is not None:
                return problem
            pos = end
            if self.done:
                self.body_bytes += size - end
                return None
        return None

    def _whole_small_head(self, data: bytes) -> bool:
        """The common case at C speed: a final answer's whole head in its first chunk and
        shorter than any one line may be, so that only the number of lines is left to count
        (False: count it line by line)."""
        end = data.find(b"\r\n\r\n", 0, self._small)
        if end < 0 or not data.startswith(b"HTTP/") or data[9:10] == b"1":
            return False
        if data.count(b"\n", 0, end) > self.limits.max_headers:
            return False
        self.done, self.head_bytes = True, end + 4
        self.body_bytes = len(data) - self.head_bytes
        return True

    def _count(self, data: bytes, pos: int, end: int) -> str | None:
        limits = self.limits
        self.head_bytes += end - pos
        self._line += end - pos
        if self._lines == 0:
            if len(self._status) < 12:
                self._status += data[pos : pos + 12 - len(self._status)]
            if self._line > limits.max_status_line_bytes:
                return f"a status line over {limits.max_status_line_bytes} bytes"
        elif self._line > limits.max_header_line_bytes:
            return f"a header line over {limits.max_header_line_bytes} bytes"
        if self.head_bytes > limits.max_head_bytes:
            return f"a head over {limits.max_head_bytes} bytes"
        return None

    def _line_ended(self) -> str | None:
        blank = self._line <= 2  # "\r\n" or "\n"
        self._line = 0
        if not blank:
            self._lines += 1
            if self._lines - 1 > self.limits.max_headers:
                return f"more than {self.limits.max_headers} headers"
            return None
        if self._lines == 0:  # an empty line before the status line: tolerated, a few
            self._status, self._blank = b"", self._blank + 1
            return "empty lines before the status line" if self._blank > 4 else None
        return self._head_ended()

    def _head_ended(self) -> str | None:
        code = self._status[9:12]
        self._lines, self._status, self._blank = 0, b"", 0
        if code == b"101":
            return "101 Switching Protocols: an upgrade is not followed"
        if code[:1] != b"1" or not code.isdigit():
            self.done = True  # the final answer (a broken status line is the parser's)
            return None
        self.interim += 1
        if self.interim > self.limits.max_interim_answers:
            return f"more than {self.limits.max_interim_answers} interim 1xx answers"
        return None


@dataclass(eq=False)
class QuietLog:
    """At most one log line per key (an endpoint's origin) per ``interval_s``: a hostile or
    broken endpoint fails every attempt, and must not fill the log doing so."""

    logger: logging.Logger
    interval_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    max_keys: int = 10_000
    _last: dict[object, float] = field(default_factory=dict, init=False)

    def warning(self, key: object, message: str, *args: object) -> bool:
        """Log ``message`` (no traceback) unless ``key`` logged within the interval; whether
        it was logged."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) >= self.max_keys:
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval_s}
            if len(self._last) >= self.max_keys:  # that many noisy endpoints at once
                self._last.clear()
        self._last[key] = now
        self.logger.warning(message, *args)
        return True
