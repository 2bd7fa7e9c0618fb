"""A record of the outbox event router as an event to publish, and a batch by aggregate.

The router (``connector.properties``) turns an outbox row's insert into a record whose key is
the aggregate id and whose value is ``{"payload": …, "id": …, "type": …, "aggregateid": …,
"aggregatetype": …}`` (JSON, no schema). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from core.ids import CLIENT_ID, CLIENT_ID_RULE


class UnroutableEvent(Exception):
    """An outbox row httpbus cannot take as it is (no id, an id or aggregate id it refuses):
    the relay stops on it rather than skip a committed event (docs/outbox.md)."""


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """One outbox row, as it will be published: ``id`` the message id (``ce-id``),
    ``aggregate_id`` its group."""

    id: str
    aggregate_id: str
    aggregate_type: str
    type: str
    payload: bytes


def parse(value: str | None) -> OutboxEvent | None:
    """The event of a routed record's value, or None for a record that carries none (a
    tombstone: the router's answer to a delete, which the relay acknowledges and skips)."""
    if value is None:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise UnroutableEvent(f"a record that is not JSON: {value[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise UnroutableEvent(f"a record that is no JSON object: {value[:200]!r}")
    event_id, aggregate_id = _text(doc, "id"), _text(doc, "aggregateid")
    for name, text in (("id", event_id), ("aggregateid", aggregate_id)):
        if CLIENT_ID.fullmatch(text) is None:
            raise UnroutableEvent(
                f"outbox event {event_id[:128]!r}: its {name} {text[:128]!r} must be "
                f"{CLIENT_ID_RULE} (it becomes the message {'id' if name == 'id' else 'group'})"
            )
    payload = doc.get("payload")
    if payload is None:
        body = b""
    elif isinstance(payload, str):
        body = payload.encode()
    else:  # the router expanded a JSON payload (table.expand.json.payload=true)
        body = orjson.dumps(payload)
    return OutboxEvent(
        event_id, aggregate_id, _text(doc, "aggregatetype"), _text(doc, "type"), body
    )


def by_aggregate(events: Iterable[OutboxEvent]) -> list[list[OutboxEvent]]:
    """The events of a batch per aggregate, each list in the batch's (commit) order, the
    aggregates in the order they first appear."""
    lanes: dict[str, list[OutboxEvent]] = {}
    for event in events:
        lanes.setdefault(event.aggregate_id, []).append(event)
    return list(lanes.values())


def _text(doc: dict[str, object], name: str) -> str:
    value = doc.get(name)
    if value is None or value == "":
        raise UnroutableEvent(
            f"an outbox record without {name}: the table needs the column (docs/outbox.md)"
        )
    return str(value)
