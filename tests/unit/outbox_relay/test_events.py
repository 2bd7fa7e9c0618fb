"""A routed outbox record becomes an event, or stops the relay with a message that says why."""

from __future__ import annotations

import orjson
import pytest

from outbox_relay.events import OutboxEvent, UnroutableEvent, by_aggregate, parse


def _value(**fields: object) -> str:
    doc = {"payload": '{"n": 1}', "id": "e-1", "type": "created", "aggregateid": "a-1"}
    doc |= {"aggregatetype": "order"}
    return orjson.dumps(doc | fields).decode()


def test_a_routed_record_is_an_event_with_its_payload_as_the_column_held_it() -> None:
    event = parse(_value())
    assert event == OutboxEvent("e-1", "a-1", "order", "created", b'{"n": 1}')


def test_an_expanded_json_payload_is_posted_as_json() -> None:
    event = parse(_value(payload={"n": 2}))
    assert event is not None and orjson.loads(event.payload) == {"n": 2}


def test_a_tombstone_carries_no_event() -> None:
    assert parse(None) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not json", "not JSON"),
        ("[1]", "no JSON object"),
        (_value(id=None), "without id"),
        (_value(aggregateid=""), "without aggregateid"),
        (_value(id="has space"), "its id 'has space' must be"),
        (_value(aggregateid="a/b"), "becomes the message group"),
    ],
)
def test_a_record_httpbus_cannot_take_stops_the_relay_saying_why(value: str, says: str) -> None:
    with pytest.raises(UnroutableEvent, match=says):
        parse(value)


def test_a_batch_splits_by_aggregate_keeping_commit_order() -> None:
    def ev(i: int, agg: str) -> OutboxEvent:
        return OutboxEvent(f"e{i}", agg, "t", "x", b"")

    batch = [ev(0, "a"), ev(1, "b"), ev(2, "a"), ev(3, "c"), ev(4, "b"), ev(5, "a")]
    lanes = by_aggregate(batch)
    assert [[e.id for e in lane] for lane in lanes] == [["e0", "e2", "e5"], ["e1", "e4"], ["e3"]]
