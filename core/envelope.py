"""The stored headers of a message: every name defined once, and the one codec of each kind.

A message is stored with its payload and a tuple of ``(name, value)`` headers, names in
lower case, values bytes. These names live in storage (deployed topics hold them), so their
values never change; only this module defines them.

Produced headers (:data:`MESSAGE_ID`, :data:`PRODUCED_AT`, :data:`GROUP_ID`,
:data:`DELIVER_AT`, :data:`CONTENT_TYPE`, and every carried ``X-`` header) are encoded by
:func:`encode` (latin-1 gives back the bytes an HTTP request carried; text beyond it, which
only a JSON batch can hold, as UTF-8) and read back by :func:`decode` (latin-1, so the
delivery request carries the bytes the producer sent, and no value ever fails to decode).

The retry path's own headers (``x-httpbus-*``, :data:`INTERNAL_PREFIX`; never sent to an
endpoint) are written by httpbus itself as UTF-8 text: :func:`encode_internal` and
:func:`decode_internal`.

:class:`Envelope` is the decoded view of the produced headers, read in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]

# Produced: stored with every message by the producer service.
MESSAGE_ID = "x-message-id"
PRODUCED_AT = "x-produced-at"  # epoch milliseconds when httpbus accepted it
GROUP_ID = "x-group-id"  # also the record key, so a group stays in one partition
DELIVER_AT = "x-deliver-at"  # epoch milliseconds, for a delayed message
CONTENT_TYPE = "content-type"
# The topic schema version the payload was validated against (absent: the topic had none).
# The producer sets it (a client's own value is dropped); carried to the endpoint as is.
SCHEMA_VERSION = "x-schema-version"
# Read from a produce request, never stored (it becomes DELIVER_AT).
DELAY_MS = "x-delay-ms"
# Set on the delivery request only, never stored: a producer's own value is dropped.
TOPIC = "x-topic"
ATTEMPT = "x-attempt"
BATCH_SIZE = "x-batch-size"  # on a batch's delivery: how many messages it holds
# A window replayed to one subscription (control_plane.services.replays) is stored in its replay
# topic with this header ("true"), kept through retries and the DLQ, and delivered as
# ``X-Replay: true``; a producer's own value is dropped like the delivery-only ones.
REPLAY = "x-replay"
DELIVERY_ONLY = frozenset({TOPIC, ATTEMPT, BATCH_SIZE, REPLAY})
# Headers httpbus owns on a delivery: a producer cannot carry its own value of these.
RESERVED = frozenset({MESSAGE_ID, GROUP_ID, DELIVER_AT, DELAY_MS, PRODUCED_AT, *DELIVERY_ONLY})

# CloudEvents (core.cloudevents): a message published as a CloudEvent keeps each of its context
# attributes but ``id`` (its message id) and ``datacontenttype`` (its content type) as a stored
# header named ``ce-`` and the attribute's name, the value encoded by :func:`encode`.
CE_PREFIX = "ce-"
CE_SPECVERSION = "ce-specversion"

# Internal: added by the retry path in its internal topics (see segments.subscription).
INTERNAL_PREFIX = "x-httpbus-"
# W3C trace context: carried from the publish to the endpoint unchanged, like an X- header, so
# a trace links the publisher's span to the receiver's.
TRACE_CONTEXT = frozenset({"traceparent", "tracestate"})
RETRY_ORIGIN = "x-httpbus-origin"
RETRY_TOPIC = "x-httpbus-topic"
RETRY_DUE = "x-httpbus-due"
RETRY_ENTERED = "x-httpbus-entered"
RETRY_ATTEMPTS = "x-httpbus-attempts"
RETRY_FIRST_FAILED = "x-httpbus-first-failed"
RETRY_LAST_FAILED = "x-httpbus-last-failed"
RETRY_LAST_STATUS = "x-httpbus-last-status"
RETRY_LAST_ERROR = "x-httpbus-last-error"
DLQ_KIND = "x-httpbus-kind"  # on a DLQ removal or a replayed entry


def encode(value: str) -> bytes:
    """A produced header's text as stored."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode()


def decode(raw: bytes) -> str:
    """A produced header's text as HTTP carries it."""
    return raw.decode("latin-1")


def encode_internal(value: str) -> bytes:
    return value.encode()


def decode_internal(raw: bytes) -> str:
    return raw.decode()


def header(headers: Headers, name: str) -> str | None:
    """One produced header, decoded; None if absent."""
    for key, value in headers:  # a loop, not next(genexpr): this runs for every delivery
        if key == name:
            return value.decode("latin-1")
    return None


def millis(text: str | None) -> int | None:
    """Whole epoch milliseconds from a header's text; None if absent or not digits."""
    return int(text) if text is not None and text.isdigit() else None


def is_internal(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIX)


def own_headers(headers: Headers) -> Headers:
    """The message's stored headers without httpbus's internal ones."""
    return tuple((k, v) for k, v in headers if not k.startswith(INTERNAL_PREFIX))


@dataclass(frozen=True, slots=True)
class Envelope:
    """The produced headers of one message, decoded once. ``produced_at_ms`` and
    ``deliver_at_ms`` are None when absent or not whole milliseconds."""

    message_id: str | None = None
    group: str | None = None
    produced_at_ms: int | None = None
    deliver_at_ms: int | None = None
    content_type: str | None = None

    @classmethod
    def of(cls, headers: Headers) -> Envelope:
        """Read in one pass; the first of a repeated name wins."""
        message_id = group = produced = deliver_at = content_type = None
        for key, value in headers:  # a loop over a few names: this runs for every message
            if key == GROUP_ID:
                if group is None:
                    group = value.decode("latin-1")
            elif key == MESSAGE_ID:
                if message_id is None:
                    message_id = value.decode("latin-1")
            elif key == CONTENT_TYPE:
                if content_type is None:
                    content_type = value.decode("latin-1")
            elif key == PRODUCED_AT:
                if produced is None:
                    produced = value.decode("latin-1")
            elif key == DELIVER_AT and deliver_at is None:
                deliver_at = value.decode("latin-1")
        return cls(message_id, group, millis(produced), millis(deliver_at), content_type)
