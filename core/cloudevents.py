"""CloudEvents 1.0 (CNCF) in httpbus: the attribute rules, the stored form of an event, and the
event a delivery sends. Pure: no I/O; the HTTP binding's request side is
``producer_api.cloudevents``, its delivery side ``delivery_workers.sender``.

**Stored form.** A message published as a CloudEvent (binary or structured content mode) is
stored as any other message: its ``data`` is the payload, ``datacontenttype`` the content type,
``id`` the message id (``x-message-id``, a client-named id, so a topic's ``dedupe_window``
answers a replayed event as a duplicate). Every other context attribute is a stored header
named ``ce-`` and the attribute's name (:data:`core.envelope.CE_PREFIX`), its value the text
percent-encoded as the HTTP binding writes a ``ce-`` header (:func:`quote`: printable ASCII but
space, ``"`` and ``%`` as is, anything else ``%XX`` of its UTF-8). So a stored attribute is
always a valid header value, and the binary content mode on delivery is the stored headers as
they are::

    stored({"specversion": "1.0", "source": "/orders", "type": "order.created"})
    # (("ce-specversion", b"1.0"), ("ce-source", b"/orders"), ("ce-type", b"order.created"))

**Delivery** (a subscription's ``delivery_format``): :func:`context` gives an event's
attributes, the stored ones first, then what is missing: ``id`` (the message id),
``specversion``, ``source`` (the topic's URI-reference ``/projects/{p}/topics/{t}``), ``type``
(:data:`DEFAULT_TYPE`), ``time`` (when httpbus accepted it) and ``partitionkey`` (the group of a
grouped message). :func:`binary_headers` and :func:`structured` write it in either mode.

Attribute values are kept as text: an extension published as a JSON number or boolean in
structured mode is delivered as its text (``"3"``, ``"true"``), as the binary mode carries it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import NamedTuple
from urllib.parse import quote as _quote
from urllib.parse import unquote as _unquote

import orjson

from .envelope import CE_PREFIX, Headers
from .errors import InvalidCloudEvent
from .http_fields import content_type_problem
from .ids import CLIENT_ID, CLIENT_ID_RULE

SPECVERSION = "1.0"
STRUCTURED = "application/cloudevents+json"  # the structured content mode's media type
BATCH = "application/cloudevents-batch+json"  # the batched content mode's media type
DEFAULT_TYPE = "io.httpbus.message"  # the type of a message not published as an event
DEFAULT_GROUP_ATTRIBUTE = "partitionkey"  # the Partitioning extension's attribute
REQUIRED = ("specversion", "id", "source", "type")
MAX_ATTRIBUTES = 64
NAME = re.compile(r"[a-z0-9]{1,64}")
NAME_RULE = "1 to 64 lower-case letters and digits"
# Not stored as ce- headers: the id is the message id, the data content type the content type.
_NOT_STORED = frozenset({"id", "datacontenttype"})
_DATA = frozenset({"data", "data_base64"})  # structured-mode members that are not attributes
# Printable ASCII a header value may hold as is (the HTTP binding encodes space, " and %).
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')
_INT32 = (-(2**31), 2**31 - 1)
# What a CloudEvents string may not hold: control characters and lone surrogates.
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_JSON_TYPE = re.compile(r"(?:application|text)/(?:[a-zA-Z0-9.\-]+\+)?json(?:\s*;.*)?", re.S)
_TEXT_TYPE = re.compile(r"text/|application/(?:[a-zA-Z0-9.\-]+\+)?xml")


class Event(NamedTuple):
    """A validated event, before it is stored: ``attributes`` are all its context attributes
    but ``id`` and ``datacontenttype`` (decoded text, by name)."""

    id: str
    attributes: dict[str, str]
    content_type: str | None


def quote(text: str) -> str:
    """An attribute's text as a ``ce-`` header value (and as stored)."""
    return _quote(text, safe=_SAFE)


def unquote(value: str) -> str:
    """A ``ce-`` header value's text (percent-decoded, as UTF-8)."""
    return _unquote(value, errors="replace") if "%" in value else value


def is_json_type(content_type: str | None) -> bool:
    """True for a JSON media type (``application/json``, ``…+json``, ``text/json``)."""
    return content_type is not None and _JSON_TYPE.fullmatch(content_type.strip()) is not None


def _missing(name: str) -> InvalidCloudEvent:
    return InvalidCloudEvent(
        f"the event has no {name}: send the {name!r} attribute (header ce-{name} in binary "
        f"mode, member {name!r} of the JSON in structured mode)",
        details={"attribute": name},
    )


def _invalid(name: str, why: str) -> InvalidCloudEvent:
    return InvalidCloudEvent(f"the event's {name!r} attribute {why}", details={"attribute": name})


def checked(attributes: Mapping[str, str]) -> Event:
    """The event of ``attributes`` (every context attribute, decoded text), or
    :class:`InvalidCloudEvent` saying which attribute to fix."""
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidCloudEvent(
            f"the event has {len(attributes)} attributes; at most {MAX_ATTRIBUTES} are taken"
        )
    for name in REQUIRED:
        if not attributes.get(name):
            raise _missing(name)
    if attributes["specversion"] != SPECVERSION:
        version = attributes["specversion"][:16]
        raise _invalid("specversion", f"is {version!r}; httpbus takes CloudEvents 1.0: send 1.0")
    for name in attributes:
        if NAME.fullmatch(name) is None:
            raise InvalidCloudEvent(
                f"the attribute name {name[:64]!r} is not {NAME_RULE} (CloudEvents 1.0)",
                details={"attribute": name[:64]},
            )
    for name, value in attributes.items():
        if _FORBIDDEN.search(value) is not None:
            raise _invalid(name, "holds a control character, which CloudEvents strings may not")
    event_id = attributes["id"]
    if CLIENT_ID.fullmatch(event_id) is None:
        raise _invalid("id", f"must be {CLIENT_ID_RULE}: it becomes the message id")
    _check_optional(attributes)
    rest = {k: v for k, v in attributes.items() if k not in _NOT_STORED}
    return Event(event_id, rest, attributes.get("datacontenttype"))


def _check_optional(attributes: Mapping[str, str]) -> None:
    for name in ("subject", "dataschema", "datacontenttype"):
        if attributes.get(name) == "":
            raise _invalid(name, "is empty: leave it out or give it a value")
    when = attributes.get("time")
    if when is not None and not _rfc3339(when):
        raise _invalid("time", "must be an RFC 3339 time such as 2026-01-02T03:04:05Z")
    content_type = attributes.get("datacontenttype")
    if content_type is not None:
        problem = content_type_problem(content_type)
        if problem is not None:
            raise _invalid("datacontenttype", f"is no content type: {problem}")


def _rfc3339(text: str) -> bool:
    if len(text) > 64 or "T" not in text.upper():
        return False
    try:
        when = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return when.tzinfo is not None


def binary_attributes(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The attributes of a binary-mode request: its ``ce-`` headers (lower-case names,
    latin-1 values as the server read them), percent-decoded; a value sent as raw UTF-8
    (the binding asks for percent-encoding) is read as UTF-8."""
    found: dict[str, str] = {}
    for name, value in items:
        if not name.startswith(CE_PREFIX):
            continue
        attribute = name[len(CE_PREFIX) :]
        if attribute in found:
            raise _invalid(attribute, f"is sent twice (header {name}): send it once")
        if not value.isascii():
            try:
                value = value.encode("latin-1").decode("utf-8")
            except UnicodeError:  # not UTF-8 (or not as a server reads it): kept as text
                pass
        found[attribute] = unquote(value)
    return found


def structured_event(doc: object) -> tuple[Event, bytes]:
    """The event and payload of one structured-mode event (a parsed JSON value), or
    :class:`InvalidCloudEvent`."""
    if type(doc) is not dict:
        raise InvalidCloudEvent("a structured-mode event is a JSON object of its attributes")
    attributes = {
        name: _attribute_text(name, value)
        for name, value in doc.items()
        if name not in _DATA and value is not None
    }
    event = checked(attributes)
    data, encoded = doc.get("data"), doc.get("data_base64")
    if data is not None and encoded is not None:
        raise InvalidCloudEvent("send data or data_base64, not both")
    if encoded is not None:
        return event, _base64(encoded)
    if data is None:
        return event, b""
    content_type = event.content_type
    if content_type is None:  # JSON data without datacontenttype is application/json
        event = event._replace(content_type="application/json")
    elif type(data) is str and not is_json_type(content_type):
        return event, data.encode()
    try:
        return event, orjson.dumps(data)
    except TypeError as exc:  # a whole number past 64 bits (a JSON reader may keep one)
        raise InvalidCloudEvent(f"data cannot be written as JSON: {exc}") from None


def _attribute_text(name: str, value: object) -> str:
    """A structured-mode attribute's value as text: a string, a boolean or a whole number."""
    if type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int and _INT32[0] <= value <= _INT32[1]:
        return str(value)
    raise _invalid(
        name[:64], "must be a string, a boolean or a 32-bit whole number (CloudEvents 1.0)"
    )


def _base64(encoded: object) -> bytes:
    if type(encoded) is not str:
        raise _invalid("data_base64", "must be a string of base64")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("data_base64", "is not valid base64") from None


def stored(attributes: Mapping[str, str]) -> Headers:
    """The stored headers of an event's attributes (see the module doc)."""
    return tuple(
        (CE_PREFIX + name, quote(value).encode("ascii")) for name, value in attributes.items()
    )


def context(
    headers: Headers, message_id: str, topic: str, produced_ms: int, group: str | None
) -> dict[str, str]:
    """The attributes a delivery sends (decoded text): the message's stored ones, and the
    defaults of the module doc for any missing; ``topic`` is ``project/topic``."""
    found = {"specversion": SPECVERSION, "id": message_id}
    for name, raw in headers:
        if name.startswith(CE_PREFIX):
            attribute = name[len(CE_PREFIX) :]
            if attribute != "id":  # the message id is the event's id
                found.setdefault(attribute, unquote(raw.decode("latin-1")))
    if "source" not in found:
        project, _, name = topic.partition("/")
        found["source"] = f"/projects/{project}/topics/{name}"
    found.setdefault("type", DEFAULT_TYPE)
    if "time" not in found:
        found["time"] = _rfc3339_ms(produced_ms)
    if group is not None:
        found.setdefault(DEFAULT_GROUP_ATTRIBUTE, group)
    return found


def _rfc3339_ms(epoch_ms: int) -> str:
    when = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def binary_headers(attributes: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``ce-`` headers of the binary content mode (names lower case, values encoded)."""
    return [(CE_PREFIX + name, quote(value)) for name, value in attributes.items()]


def structured(attributes: Mapping[str, str], content_type: str | None, payload: bytes) -> bytes:
    """The JSON of the structured content mode: the attributes, ``datacontenttype``, and the
    payload as ``data`` (JSON as is, text as a string) or ``data_base64``."""
    envelope: dict[str, str] = dict(attributes)
    if content_type is not None:
        envelope["datacontenttype"] = content_type
    head = orjson.dumps(envelope)
    if not payload:
        return head
    member, value = _data(content_type, payload)
    return b'%s,"%s":%s}' % (head[:-1], member, value)


def _data(content_type: str | None, payload: bytes) -> tuple[bytes, bytes]:
    if is_json_type(content_type):
        try:
            orjson.loads(payload)  # valid JSON goes as it is, byte for byte
        except orjson.JSONDecodeError:
            pass
        else:
            return b"data", payload
    elif content_type is not None and _TEXT_TYPE.match(content_type.strip().lower()):
        try:
            return b"data", orjson.dumps(payload.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return b"data_base64", orjson.dumps(base64.b64encode(payload).decode("ascii"))
