"""Deliveries as CloudEvents (a subscription's ``delivery_format``): what the request carries in
each mode, read back with the CloudEvents SDK, and signed over the body as sent."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat

from core import cloudevents
from core.model import BatchPolicy, DeliveryFormat
from core.signing import verify
from delivery_workers.sender import BatchDelivery, Delivery, build_batch_request, build_request
from segments.protocol import Stored
from tests.support.world import SECRET, subscription

PRODUCED_MS = 1614265330123  # 2021-02-25T15:02:10.123Z
NOW_S = 1614265331


def _plain(value: bytes = b'{"n": 1}', group: str | None = "g-1", **extra: bytes) -> Stored:
    headers = [("x-message-id", b"m-1"), ("x-produced-at", str(PRODUCED_MS).encode())]
    if group is not None:
        headers.append(("x-group-id", group.encode()))
    headers += [("content-type", b"application/json"), ("x-region", b"eu"), *extra.items()]
    return Stored(0, 7, PRODUCED_MS, value, headers=tuple(headers))


def _published_event() -> Stored:
    """As the producer stores a binary-mode event (producer_api.cloudevents)."""
    attributes = cloudevents.stored(
        {
            "specversion": "1.0",
            "source": "https://orders.example/api",
            "type": "order.created",
            "subject": "order 7 (ünïcode)",
            "time": "2026-01-02T03:04:05Z",
        }
    )
    return Stored(0, 8, PRODUCED_MS, b"hello", headers=(*_plain(group=None).headers, *attributes))


def _request(fmt: DeliveryFormat, msg: Stored) -> tuple[dict[str, str], bytes]:
    sub = subscription(delivery_format=fmt)
    out = build_request(Delivery(sub, "shop/orders", msg), NOW_S)
    headers = dict(out.headers)
    assert verify(SECRET, headers, out.body, now=NOW_S)  # signed over what is sent
    return headers, out.body


def _parsed(headers: dict[str, str], body: bytes) -> Any:
    return from_http(
        HTTPMessage(headers={k.lower(): v for k, v in headers.items()}, body=body), _json()
    )


def _json() -> Any:
    return JSONFormat()


def test_raw_is_as_before_for_a_plain_message() -> None:
    headers, body = _request(DeliveryFormat.RAW, _plain())
    assert body == b'{"n": 1}'
    assert not any(name.lower().startswith("ce-") for name in headers)
    assert headers["X-Message-Id"] == "m-1" and headers["x-region"] == "eu"


def test_binary_mode_of_a_plain_message_has_the_documented_defaults() -> None:
    headers, body = _request(DeliveryFormat.CLOUDEVENTS_BINARY, _plain())
    event = _parsed(headers, body)
    assert event.get_id() == "m-1"
    assert event.get_source() == "/projects/shop/topics/orders"
    assert event.get_type() == cloudevents.DEFAULT_TYPE
    assert event.get_time().isoformat() == "2021-02-25T15:02:10.123000+00:00"
    assert event.get_attributes()["partitionkey"] == "g-1"
    assert event.get_data() == {"n": 1}
    assert headers["X-Message-Id"] == "m-1"  # httpbus's own headers are still there


def test_binary_mode_of_a_published_event_keeps_its_attributes() -> None:
    for fmt in (DeliveryFormat.RAW, DeliveryFormat.CLOUDEVENTS_BINARY):
        headers, body = _request(fmt, _published_event())
        event = _parsed(headers, body)
        assert event.get_id() == "m-1"
        assert event.get_source() == "https://orders.example/api"
        assert event.get_type() == "order.created"
        assert event.get_subject() == "order 7 (ünïcode)"
        assert event.get_time().isoformat() == "2026-01-02T03:04:05+00:00"
        assert headers["ce-subject"].isascii()  # percent-encoded on the wire


@pytest.mark.parametrize(
    ("value", "content_type", "member", "expected"),
    [
        (b'{"n": 1}', b"application/json", "data", {"n": 1}),
        (b"not json", b"application/json", "data_base64", base64.b64encode(b"not json").decode()),
        ("héllo".encode(), b"text/plain; charset=utf-8", "data", "héllo"),
        (b"\x00\xff", b"application/octet-stream", "data_base64", "AP8="),
    ],
)
def test_structured_mode_carries_the_payload_as_data_or_data_base64(
    value: bytes, content_type: bytes, member: str, expected: Any
) -> None:
    msg = _plain(value)
    msg = Stored(
        0,
        7,
        PRODUCED_MS,
        value,
        headers=tuple((k, content_type if k == "content-type" else v) for k, v in msg.headers),
    )
    headers, body = _request(DeliveryFormat.CLOUDEVENTS_STRUCTURED, msg)
    assert headers["Content-Type"] == cloudevents.STRUCTURED
    assert not any(name.lower().startswith("ce-") for name in headers)
    doc = json.loads(body)
    assert doc[member] == expected and doc["id"] == "m-1"
    assert doc["datacontenttype"] == content_type.decode()
    event = _parsed(headers, body)
    assert event.get_id() == "m-1" and event.get_attributes()["partitionkey"] == "g-1"


def test_structured_mode_of_a_published_event() -> None:
    headers, body = _request(DeliveryFormat.CLOUDEVENTS_STRUCTURED, _published_event())
    event = _parsed(headers, body)
    assert event.get_source() == "https://orders.example/api"
    assert event.get_subject() == "order 7 (ünïcode)"
    assert event.get_data() == b"hello"  # not JSON, though labelled so: data_base64


def test_a_structured_batch_is_a_cloudevents_batch() -> None:
    sub = subscription(
        delivery_format=DeliveryFormat.CLOUDEVENTS_STRUCTURED, batch=BatchPolicy(max_messages=10)
    )
    batch = BatchDelivery(sub, "shop/orders", (_plain(), _published_event()), (1, 1))
    out = build_batch_request(batch, NOW_S)
    headers = dict(out.headers)
    assert headers["Content-Type"] == cloudevents.BATCH
    assert verify(SECRET, headers, out.body, now=NOW_S)
    first, second = json.loads(out.body)
    assert first["data"] == {"n": 1} and first["partitionkey"] == "g-1"
    assert second["type"] == "order.created" and second["data_base64"] == "aGVsbG8="


def test_binary_mode_refuses_batches() -> None:
    with pytest.raises(ValueError, match="one event per request"):
        subscription(
            delivery_format=DeliveryFormat.CLOUDEVENTS_BINARY, batch=BatchPolicy(max_messages=10)
        )
