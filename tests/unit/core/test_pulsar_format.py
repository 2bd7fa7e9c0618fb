"""The Pulsar wire format shared by the Pulsar backend and the Spark reader."""

from __future__ import annotations

import pytest

from core import pulsar_format as wire


def test_positions_grow_with_the_message_id_and_unpack_back() -> None:
    ids = [(1, 0, -1), (1, 0, 1), (1, 1, 0), (2, 0, 0), (2**31 - 1, 2**20 - 1, 4095)]
    packed = [wire.pack(*mid) for mid in ids]
    assert packed == sorted(packed) and len(set(packed)) == len(packed)
    assert wire.unpack(wire.pack(7, 3, 2)) == (7, 3, 2)
    assert wire.unpack(wire.pack(7, 3, -1)) == (7, 3, 0)
    assert wire.end_after(7, 3) == wire.pack(7, 4, 0) and wire.end_after(7, -1) == 0


@pytest.mark.parametrize("mid", [(2**31, 0, 0), (0, 2**20, 0), (0, 0, 4096), (-1, 0, 0)])
def test_ids_past_the_bounds_are_refused(mid: tuple[int, int, int]) -> None:
    with pytest.raises(wire.OutOfRange):
        wire.pack(*mid)


def test_headers_and_keys_round_trip_any_bytes() -> None:
    headers = (("x-message-id", b"m1"), ("x-a", bytes(range(256))), ("x-a", b""))
    props = wire.properties(headers, b"")
    assert wire.decode_headers(props) == headers
    assert wire.decode_key("", props) == b""
    assert wire.decode_key("", wire.properties((), None)) is None
    key = bytes(range(256))
    assert wire.decode_key(wire.partition_key(key), {}) == key


def test_a_plain_pulsar_message_reads_its_properties_as_headers() -> None:
    assert wire.decode_headers({"a": "1"}) == (("a", b"1"),)
    assert wire.decode_headers({wire.HEADERS_PROPERTY: "not json"}) == (
        (wire.HEADERS_PROPERTY, b"not json"),
    )
