"""The stored header names (pinned: deployed data holds them) and their one codec."""

from __future__ import annotations

from core import envelope as env
from core.envelope import Envelope


def test_the_stored_names_never_change() -> None:
    assert (env.MESSAGE_ID, env.PRODUCED_AT, env.GROUP_ID, env.DELIVER_AT, env.CONTENT_TYPE) == (
        "x-message-id",
        "x-produced-at",
        "x-group-id",
        "x-deliver-at",
        "content-type",
    )
    internal = [
        env.RETRY_ORIGIN,
        env.RETRY_TOPIC,
        env.RETRY_DUE,
        env.RETRY_ENTERED,
        env.RETRY_ATTEMPTS,
        env.RETRY_FIRST_FAILED,
        env.RETRY_LAST_FAILED,
        env.RETRY_LAST_STATUS,
        env.RETRY_LAST_ERROR,
        env.DLQ_KIND,
    ]
    assert [n.removeprefix("x-httpbus-") for n in internal] == [
        "origin",
        "topic",
        "due",
        "entered",
        "attempts",
        "first-failed",
        "last-failed",
        "last-status",
        "last-error",
        "kind",
    ]


def test_one_codec_gives_back_what_http_carried() -> None:
    for text in ["text/plain; charset=utf-8", "caf\xe9", "\x7f"]:
        assert env.decode(env.encode(text)) == text
    assert env.encode("snow \u2603") == "snow \u2603".encode()  # beyond latin-1: UTF-8


def test_the_envelope_reads_the_produced_headers_once() -> None:
    headers = (
        (env.MESSAGE_ID, b"01J"),
        (env.PRODUCED_AT, b"1700000000000"),
        (env.GROUP_ID, b"g-1"),
        (env.DELIVER_AT, b"soon"),
        (env.CONTENT_TYPE, b"application/json"),
        (env.GROUP_ID, b"second"),
        ("x-carried", b"x"),
    )
    assert Envelope.of(headers) == Envelope(
        "01J", "g-1", 1_700_000_000_000, None, "application/json"
    )
    assert Envelope.of(()) == Envelope()
    assert env.header(headers, env.GROUP_ID) == "g-1"
    assert env.own_headers(((env.RETRY_DUE, b"1"), ("x-a", b"b"))) == (("x-a", b"b"),)
