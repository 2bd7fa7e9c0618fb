"""The header rule the producer checks at produce is the one the delivery sender applies: what
one accepts the other sends, what one refuses the other refuses."""

from __future__ import annotations

import pytest

from core.envelope import encode
from core.http_fields import content_type_problem, field_problem
from delivery_workers.http1 import InvalidRequest, encode_request, parse_origin
from delivery_workers.sender import OutgoingRequest

NAMES = ["x-trace", "X-A_b.c", "x-bad name", "x-colon:", "x-é", "", "x-tab\t"]
VALUES = [
    "plain",
    "inner  spaces\tand tab",
    " outer",
    "outer ",
    "cr\rlf",
    "lf\n",
    "nul\x00",
    "bell\x07",
    "del\x7f",
    "latin-1 é",
    "beyond ☃",
    "",
]


def _sender_sends(name: str, value: str) -> bool:
    # As stored by the producer and read back by the sender: latin-1 text of the stored bytes.
    wire_value = encode(value).decode("latin-1")
    out = OutgoingRequest("POST", "http://h/", ((name, wire_value),), b"")
    try:
        encode_request(out, parse_origin("http://h/"))
    except InvalidRequest:
        return False
    return True


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value", VALUES)
def test_the_producer_refuses_exactly_what_the_sender_refuses(name: str, value: str) -> None:
    stored = encode(value).decode("latin-1")
    assert (field_problem(name, stored) is None) == _sender_sends(name, value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("application/json", True),
        ("text/plain; charset=utf-8", True),
        ("text/plain; charset=é", False),
        ("text/plain\r\nX-Injected: 1", False),
        (" text/plain", False),
        ("a\x00b", False),
    ],
)
def test_a_content_type_is_printable_ascii(value: str, ok: bool) -> None:
    assert (content_type_problem(value) is None) == ok
