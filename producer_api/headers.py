"""From an HTTP produce request to the headers stored with the message.

Stored headers (names lower-case, values bytes):

- ``x-message-id`` — the client's ``X-Message-Id`` or a new time-sortable id;
- ``x-produced-at`` — milliseconds since the epoch when httpbus accepted it;
- ``x-group-id`` — the group (also the record key, so a group stays in one partition);
- ``x-deliver-at`` — milliseconds since the epoch, for a delayed message;
- ``content-type`` — the request's content type;
- ``ce-*`` — the context attributes of a message published as a CloudEvent
  (``producer_api.cloudevents``, stored as :mod:`core.cloudevents` says);
- every other ``X-`` header of the request, carried to the endpoint as it came, except the
  proxy hop headers (``X-Forwarded-*``, ``X-Real-IP``), which describe the hop, not the message,
  and the names httpbus sets on a delivery itself (``X-Topic``, ``X-Attempt``,
  ``X-Batch-Size``, ``X-Schema-Version``, ``X-Produced-At``), dropped.

``X-Group-Id`` on a topic that is not grouped is refused (400): it would make the message
grouped (kept in order, and held behind its group's failures) on a topic created without
groups, and reach the endpoint, which documents it on grouped topics only.

Nothing is stored that the delivery sender would refuse to send: a carried header's name and
value, and the content type, are checked with the sender's own rule
(:mod:`core.http_fields`; a content type must also be ASCII). A message carries at most
``HeaderRules.max_carried`` ``X-`` headers. The client's headers as stored (every stored
header but ``x-produced-at`` and a generated ``x-message-id``; names and values) count in the
message's size (the topic's ``max_message_bytes``, 413, and byte rate), and are at most
``HeaderRules.max_header_bytes`` (431): :func:`size_problem`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from core.envelope import (
    CONTENT_TYPE,
    DELAY_MS,
    DELIVER_AT,
    DELIVERY_ONLY,
    GROUP_ID,
    MESSAGE_ID,
    PRODUCED_AT,
    SCHEMA_VERSION,
    TRACE_CONTEXT,
    Headers,
)
from core.envelope import decode as _unwire
from core.envelope import encode as _wire
from core.errors import HeadersTooLarge, HttpbusError, Malformed, TooLarge
from core.http_fields import content_type_problem, field_problem
from core.ids import CLIENT_ID, CLIENT_ID_RULE, new_message_id

# Read here or dropped: PRODUCED_AT and SCHEMA_VERSION (set after validation) are httpbus's,
# DELIVERY_ONLY are set on each delivery; a client's own value of them is never stored.
OWN = {MESSAGE_ID, GROUP_ID, DELIVER_AT, DELAY_MS, PRODUCED_AT, SCHEMA_VERSION, *DELIVERY_ONLY}
_HOP = ("x-forwarded-", "x-real-ip")
MAX_DELAY_MS = 366 * 24 * 3_600_000
MAX_DIGITS = 15  # epoch milliseconds have 13 digits until the year 2286


class Parsed(NamedTuple):
    """A message's validated headers; a tuple, as there is one per message of a batch."""

    message_id: str
    group_id: str | None
    deliver_at_ms: int | None
    headers: tuple[tuple[str, bytes], ...]
    header_bytes: int  # the size of the client's stored headers (names and values)
    client_id: bool = False  # the client named the id (X-Message-Id): dedupe may apply


def _digits(text: str) -> int | None:
    """The whole number of at most :data:`MAX_DIGITS` ASCII digits, else None (``str.isdigit``
    also takes ``²`` and ``٣``, which ``int`` refuses, and ``int`` refuses 4 300 digits)."""
    if len(text) <= MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None


def _deliver_at(raw: str | None, delay: str | None, now_ms: int) -> int | None:
    if raw is not None and delay is not None:
        raise Malformed("send X-Deliver-At or X-Delay-Ms, not both")
    if delay is not None:
        delay_ms = _digits(delay)
        if delay_ms is None or delay_ms > MAX_DELAY_MS:
            raise Malformed(f"X-Delay-Ms must be whole milliseconds from 0 to {MAX_DELAY_MS}")
        return now_ms + delay_ms
    if raw is None:
        return None
    if raw.isascii() and raw.isdigit():
        at_ms = _digits(raw)
        if at_ms is None:
            raise Malformed(f"X-Deliver-At in epoch milliseconds has at most {MAX_DIGITS} digits")
        return at_ms
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise Malformed(
            "X-Deliver-At must be RFC 3339 (2026-01-02T03:04:05Z) or epoch milliseconds"
        ) from None
    if when.tzinfo is None:
        raise Malformed("X-Deliver-At needs a time zone (…Z or …+01:00)")
    return int(when.timestamp() * 1000)


def _checked_id(value: str | None, header: str) -> str | None:
    if value is not None and not CLIENT_ID.fullmatch(value):
        raise Malformed(f"{header} must be {CLIENT_ID_RULE}")
    return value


@dataclass(frozen=True, slots=True)
class HeaderRules:
    """The limits of one message's headers (producer settings ``max_carried_headers`` and
    ``max_header_bytes``)."""

    max_carried: int = 64
    max_header_bytes: int = 32 * 1024


DEFAULT_RULES = HeaderRules()


@dataclass(frozen=True, slots=True)
class _Shape:
    """What :func:`parse` derives from one header set, all but a generated message id."""

    message_id: str | None  # the client's X-Message-Id, if it sent one
    group_id: str | None
    deliver_at_ms: int | None
    rest: tuple[tuple[str, bytes], ...]  # the stored headers after x-message-id
    rest_bytes: int  # the size of ``rest``: its names and values

    def parsed(self, now_ms: int, new_id: str | None = None) -> Parsed:
        """The parsed headers, with the client's id, else ``new_id``, else a new one."""
        message_id = self.message_id or new_id or new_message_id(now_ms)
        stored = ((MESSAGE_ID, message_id.encode()), *self.rest)
        size = self.rest_bytes + _id_bytes(self.message_id)
        return Parsed(
            message_id,
            self.group_id,
            self.deliver_at_ms,
            stored,
            size,
            self.message_id is not None,
        )


def audit_headers(stored: Sequence[tuple[str, bytes]]) -> dict[str, str] | None:
    """The headers of an accepted event (for the trace): the stored ones but the message id
    and the acceptance time, which the event has fields of its own for."""
    found = {name: _unwire(value) for name, value in stored if name not in _NOT_AUDITED}
    return found or None


_NOT_AUDITED = {MESSAGE_ID, PRODUCED_AT}


def _carried(name: str, value: str) -> tuple[str, bytes]:
    """A carried header as stored, if the delivery sender can send it (else ``Malformed``)."""
    stored = _wire(value)
    # The sender writes the stored bytes as latin-1 text: check what it will write.
    problem = field_problem(name, stored.decode("latin-1"))
    if problem is not None:
        raise Malformed(f"{problem}; such a header cannot be delivered")
    return name, stored


def _content_type(value: str) -> bytes:
    problem = content_type_problem(value)
    if problem is not None:
        raise Malformed(problem)
    return value.encode("ascii")


def _shape(
    items: Iterable[tuple[str, str]],
    content_type: str | None,
    grouped: bool,
    rules: HeaderRules,
    now_ms: int,
    attributes: Headers = (),
) -> _Shape:
    own: dict[str, str] = {}
    carried: list[tuple[str, bytes]] = []
    for name, value in items:
        if name in OWN:
            own[name] = value
        elif (name.startswith("x-") and not name.startswith(_HOP)) or name in TRACE_CONTEXT:
            if len(carried) == rules.max_carried:
                raise Malformed(f"at most {rules.max_carried} X- headers are carried per message")
            carried.append(_carried(name, value))
    message_id = _checked_id(own.get(MESSAGE_ID), "X-Message-Id")
    group = _checked_id(own.get(GROUP_ID), "X-Group-Id")
    if grouped and group is None:
        raise Malformed(
            "this topic is grouped: send X-Group-Id (messages of a group are delivered in order)"
        )
    if not grouped and group is not None:
        raise Malformed(
            "this topic is not grouped: X-Group-Id is taken on grouped topics only (create a "
            "topic with grouped: true to have messages of a group delivered in order)"
        )
    deliver_at = _deliver_at(own.get(DELIVER_AT), own.get(DELAY_MS), now_ms)
    rest = [(PRODUCED_AT, str(now_ms).encode())]
    if group is not None:
        rest.append((GROUP_ID, group.encode()))
    if deliver_at is not None:
        rest.append((DELIVER_AT, str(deliver_at).encode()))
    if content_type:
        rest.append((CONTENT_TYPE, _content_type(content_type)))
    rest += carried
    rest += attributes  # a CloudEvent's, stored as they are (core.cloudevents)
    # The client's headers as stored: all but what httpbus adds itself (x-produced-at first).
    rest_bytes = sum(len(name) + len(value) for name, value in rest[1:])
    return _Shape(message_id, group, deliver_at, tuple(rest), rest_bytes)


def size_problem(
    payload_bytes: int, parsed: Parsed, max_message_bytes: int, rules: HeaderRules
) -> HttpbusError | None:
    """Why a message is too large, or None: over the topic's ``max_message_bytes`` with its
    headers counted (413), else headers over ``rules.max_header_bytes`` (431)."""
    size = payload_bytes + parsed.header_bytes
    if size > max_message_bytes:
        return TooLarge(
            f"the message has {size} bytes (payload and stored headers); the topic takes at "
            f"most {max_message_bytes}"
        )
    if parsed.header_bytes > rules.max_header_bytes:
        return HeadersTooLarge(
            f"the message's headers have {parsed.header_bytes} bytes (names and values); at "
            f"most {rules.max_header_bytes} are taken"
        )
    return None


def _id_bytes(client_id: str | None) -> int:
    """The stored size of the client's X-Message-Id (a generated one is httpbus's own)."""
    return len(MESSAGE_ID) + len(client_id) if client_id else 0


def parse(
    items: Iterable[tuple[str, str]],
    content_type: str | None,
    *,
    grouped: bool,
    rules: HeaderRules = DEFAULT_RULES,
    now_ms: int | None = None,
    attributes: Headers = (),
) -> Parsed:
    """Validate the request's headers (``Malformed`` says what to fix) and build the stored
    ones; :func:`size_problem` then checks their size. ``items`` are (lower-case name, value)
    pairs as the server received them; ``attributes``, a CloudEvent's stored attributes
    (:func:`core.cloudevents.stored`), are stored after them and count in the size."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _shape(items, content_type, grouped, rules, now_ms, attributes).parsed(now_ms)


class BatchParser:
    """:func:`parse` for the messages of one batch, all accepted at ``now_ms``.

    The messages of a batch mostly share one header set (often none at all), so each
    distinct set is validated once and only the message id is made per message. A set that
    is refused gives the same error for every message that sent it.

    Example::

        parser = BatchParser(grouped=False, rules=HeaderRules(), now_ms=now_ms)
        parsed = [parser.parse(d.headers, d.content_type) for d in drafts]
    """

    def __init__(self, *, grouped: bool, rules: HeaderRules, now_ms: int) -> None:
        self._grouped = grouped
        self._rules = rules
        self._now_ms = now_ms
        self._shapes: dict[object, _Shape | HttpbusError] = {}

    def parse(
        self,
        items: Sequence[tuple[str, str]],
        content_type: str | None,
        new_id: str | None = None,
        attributes: Headers = (),
    ) -> Parsed | HttpbusError:
        """The parsed headers of one message, or why they are refused; ``new_id`` is its id
        unless it sent one (see :func:`core.ids.new_message_ids`)."""
        key = (items if type(items) is tuple else tuple(items), content_type, attributes)
        shape = self._shapes.get(key)
        if shape is None:
            try:
                shape = _shape(
                    key[0], content_type, self._grouped, self._rules, self._now_ms, attributes
                )
            except Malformed as exc:
                shape = exc
            self._shapes[key] = shape
        if isinstance(shape, HttpbusError):
            return shape
        return shape.parsed(self._now_ms, new_id)
