"""The CloudEvents HTTP binding at publish: a request in binary or structured content mode, or
a batch in the batched mode, as the drafts the publisher stores (docs/producing.md).

Which requests are events (:func:`mode`), as the CloudEvents SDKs tell them apart:

- ``Content-Type: application/cloudevents+json`` on ``…/produce``: structured mode, the body is
  the event as JSON (``data`` or ``data_base64`` its payload);
- ``Content-Type: application/cloudevents-batch+json`` on ``…/produce/batch``: a JSON array of
  structured events, a result per event;
- a ``ce-specversion``, ``ce-id``, ``ce-source`` or ``ce-type`` header on ``…/produce``
  (any attribute every event has): binary mode, the attributes are the ``ce-`` headers
  (percent-decoded) and the body is the payload, its content type the ``datacontenttype``.
  Then a missing one is refused by name. Other ``ce-`` headers alone make no event (they are
  not ``X-`` headers: not stored, as before).

Anything else is an ordinary publish and pays for none of this: the fast path only looks at
the content type's first characters and looks up four header names.

An event becomes a message as :mod:`core.cloudevents` says: ``id`` the message id (a
client-named id: a topic's ``dedupe_window`` answers a replayed event as a duplicate), on a
grouped topic the attribute the topic names (``cloudevents_group_attribute``, default
``partitionkey``) the group, every other attribute a stored ``ce-`` header. Its ``X-`` headers
are carried and ``X-Deliver-At``/``X-Delay-Ms`` apply as on any publish; ``X-Message-Id`` and
``X-Group-Id`` are refused, since the event names its id and group itself. Then it goes
through the same publisher as any message: size limits, quotas, schema (of the payload),
dedupe, the cutover gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

import orjson

from core import cloudevents
from core.envelope import GROUP_ID, MESSAGE_ID
from core.errors import HttpbusError, InvalidCloudEvent
from core.ids import CLIENT_ID, CLIENT_ID_RULE
from core.json_depth import MAX_DEPTH, too_deep
from core.model import Topic

from .publish import Draft

_PREFIX = "application/cloudevents"
MAX_EVENTS = 1_000  # as many as a batch of the ordinary shape


# What the OpenAPI document says of a structured event (the rules are checked in code, with
# messages that say what to fix: core.cloudevents.checked).
EVENT_SCHEMA: dict[str, object] = {
    "type": "object",
    "description": "a CloudEvent 1.0 in the JSON format; its data in data or data_base64",
    "required": ["specversion", "id", "source", "type"],
    "properties": {
        "specversion": {"type": "string", "enum": [cloudevents.SPECVERSION]},
        "id": {"type": "string", "pattern": f"^{CLIENT_ID.pattern}$"},
        "source": {"type": "string", "minLength": 1},
        "type": {"type": "string", "minLength": 1},
        "datacontenttype": {"type": "string"},
        "subject": {"type": "string"},
        "time": {"type": "string", "format": "date-time"},
        "data": {},
        "data_base64": {"type": "string", "format": "byte"},
    },
}


class Mode(Enum):
    BINARY = "binary"
    STRUCTURED = "structured"
    BATCH = "batch"


def mode(content_type: str | None, named: Mapping[str, str]) -> Mode | None:
    """The content mode of a request (``named``: its headers by lower-case name), or None
    for an ordinary publish: a few dictionary lookups, all an ordinary publish pays."""
    if content_type is not None and content_type[: len(_PREFIX)].lower() == _PREFIX:
        media = content_type.split(";", 1)[0].strip().lower()
        if media == cloudevents.STRUCTURED:
            return Mode.STRUCTURED
        if media == cloudevents.BATCH:
            return Mode.BATCH
        raise InvalidCloudEvent(
            f"the content type {media[:64]!r} is no CloudEvents format httpbus reads: send "
            f"{cloudevents.STRUCTURED}, {cloudevents.BATCH} (batch route), or the binary mode"
        )
    if "ce-specversion" in named or "ce-id" in named or "ce-source" in named or "ce-type" in named:
        return Mode.BINARY
    return None


def single_draft(
    found: Mode,
    topic: Topic,
    body: bytes,
    headers: Sequence[tuple[str, str]],
    content_type: str | None,
) -> Draft:
    """The draft of a single publish in binary or structured mode."""
    if found is Mode.BATCH:
        raise InvalidCloudEvent(
            f"{cloudevents.BATCH} goes to the batch route: POST …/produce/batch"
        )
    _no_own_ids(headers)
    if found is Mode.BINARY:
        event = cloudevents.checked(
            {**cloudevents.binary_attributes(headers), **_content_type(content_type)}
        )
        payload = body
    else:
        event, payload = cloudevents.structured_event(_json(body))
    items = [(name, value) for name, value in headers if not name.startswith("ce-")]
    return _draft(topic, event, payload, items)


def batch_drafts(topic: Topic, body: bytes) -> list[Draft | HttpbusError]:
    """The drafts of a batched-mode body, one per event; an invalid event is its error."""
    doc = _json(body)
    if type(doc) is not list or not 1 <= len(doc) <= MAX_EVENTS:
        raise InvalidCloudEvent(
            f"a {cloudevents.BATCH} body is a JSON array of 1 to {MAX_EVENTS} events"
        )
    drafts: list[Draft | HttpbusError] = []
    for one in doc:
        try:
            event, payload = cloudevents.structured_event(one)
            drafts.append(_draft(topic, event, payload, []))
        except HttpbusError as exc:
            drafts.append(exc)
    return drafts


def not_a_batch(found: Mode) -> InvalidCloudEvent:
    """The batch route's answer to a single event (binary or structured mode)."""
    return InvalidCloudEvent(
        f"one event in {found.value} mode goes to …/produce; send a batch of events to "
        f"…/produce/batch as {cloudevents.BATCH}"
    )


def _json(body: bytes) -> object:
    if too_deep(body):  # orjson reads 1 024 levels but writes 255: refuse before either
        raise InvalidCloudEvent(f"the body nests arrays and objects deeper than {MAX_DEPTH} levels")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidCloudEvent(f"the body is not JSON ({str(exc)[:120]})") from None


def _content_type(content_type: str | None) -> dict[str, str]:
    return {} if content_type is None else {"datacontenttype": content_type}


def _no_own_ids(headers: Sequence[tuple[str, str]]) -> None:
    for name, _ in headers:
        if name == MESSAGE_ID or name == GROUP_ID:
            raise InvalidCloudEvent(
                f"a CloudEvent names its id (ce-id) and group (an attribute) itself: send no "
                f"{'X-Message-Id' if name == MESSAGE_ID else 'X-Group-Id'}"
            )


def _draft(
    topic: Topic, event: cloudevents.Event, payload: bytes, items: list[tuple[str, str]]
) -> Draft:
    items.append((MESSAGE_ID, event.id))
    if topic.grouped:
        items.append((GROUP_ID, _group(topic, event)))
    return Draft(payload, items, event.content_type, cloudevents.stored(event.attributes))


def _group(topic: Topic, event: cloudevents.Event) -> str:
    name = topic.cloudevents_group_attribute
    group = event.attributes.get(name)
    if group is None:
        raise InvalidCloudEvent(
            f"topic {topic.project}/{topic.name} is grouped: the event needs the {name!r} "
            f"attribute (the topic's cloudevents_group_attribute), whose value is its group",
            details={"attribute": name},
        )
    if CLIENT_ID.fullmatch(group) is None:
        raise InvalidCloudEvent(
            f"the event's {name!r} attribute is its group: it must be {CLIENT_ID_RULE}",
            details={"attribute": name},
        )
    return group
