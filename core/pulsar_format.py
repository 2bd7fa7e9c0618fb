"""How httpbus lays a message out on Pulsar: the packed position and the header property.

Pure functions, in ``core`` because two packages read this format and may not import each
other: the Pulsar backend (``segments.pulsar``, which writes and reads it) and the Spark
reader (``spark.messages``, which reads segments in executors and may import only ``core``).
The names live in storage (deployed topics hold them): they never change.

**Positions.** A Pulsar message id is (ledger, entry, partition, batch index); within one
partition topic ids grow in produce order, compared as (ledger, entry, batch index). A
position packs them into one int that grows the same way::

    position = ledger << 32 | entry << 12 | batch_index        (63 bits: fits int64)

with the bounds it relies on (:func:`pack` raises :class:`OutOfRange` past them): ledger id
< 2**31, entry id < 2**20, batch index < 2**12 (see ``segments.pulsar.producer`` for why these
hold). A message that is not in a batch (batch index -1) packs as batch index 0.

**Headers and key.** Headers travel in one property, :data:`HEADERS_PROPERTY`, a JSON list of
``[name, base64(value)]`` (properties are an unordered map of strings; headers are ordered,
may repeat and carry any bytes). The key is the ``partition_key`` as the latin-1 decoding of
its bytes; an empty key also sets :data:`EMPTY_KEY_PROPERTY`.

Example::

    >>> unpack(pack(7, 3, 2))
    (7, 3, 2)
    >>> decode_headers(properties((("x-message-id", b"m1"),), b"g"))
    (('x-message-id', b'm1'),)
"""

from __future__ import annotations

import base64
import binascii
import json

Headers = tuple[tuple[str, bytes], ...]

BATCH_BITS = 12
ENTRY_BITS = 20
LEDGER_BITS = 31
HEADERS_PROPERTY = "httpbus-headers"
EMPTY_KEY_PROPERTY = "httpbus-empty-key"


class OutOfRange(ValueError):
    """A Pulsar message id that does not fit a packed position."""


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # built once: json.dumps makes one a call


def pack(ledger: int, entry: int, batch_index: int) -> int:
    """The position of message id (ledger, entry, batch_index)."""
    batch = max(batch_index, 0)
    if not (
        0 <= ledger < 1 << LEDGER_BITS and 0 <= entry < 1 << ENTRY_BITS and batch < 1 << BATCH_BITS
    ):
        raise OutOfRange(
            f"pulsar message id ({ledger}, {entry}, {batch_index}) does not fit a position: "
            f"needs ledger < 2^{LEDGER_BITS}, entry < 2^{ENTRY_BITS}, batch < 2^{BATCH_BITS}"
        )
    return ledger << (ENTRY_BITS + BATCH_BITS) | entry << BATCH_BITS | batch


def unpack(position: int) -> tuple[int, int, int]:
    """(ledger, entry, batch index) of a position; :class:`OutOfRange` if negative."""
    if position < 0:
        raise OutOfRange(f"position {position} is negative")
    return (
        position >> (ENTRY_BITS + BATCH_BITS),
        (position >> BATCH_BITS) & ((1 << ENTRY_BITS) - 1),
        position & ((1 << BATCH_BITS) - 1),
    )


def end_after(ledger: int, entry: int) -> int:
    """The exclusive end of a partition whose last entry is (ledger, entry); 0 if empty."""
    return 0 if entry < 0 else pack(ledger, entry + 1, 0)


def properties(headers: Headers, key: bytes | None) -> dict[str, str]:
    """The message properties that carry ``headers`` (and the empty-key mark)."""
    props: dict[str, str] = {}
    if headers:
        blob = [[name, base64.b64encode(value).decode("ascii")] for name, value in headers]
        props[HEADERS_PROPERTY] = _COMPACT.encode(blob)
    if key is not None and not key:
        props[EMPTY_KEY_PROPERTY] = "1"
    return props


def partition_key(key: bytes) -> str:
    """The ``partition_key`` text of a key (reversible for any bytes)."""
    return key.decode("latin-1")


def decode_key(text: str, props: dict[str, str]) -> bytes | None:
    """The key of a message from its ``partition_key`` and properties."""
    if text:
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError:  # a key set by a plain Pulsar producer
            return text.encode()
    return b"" if EMPTY_KEY_PROPERTY in props else None


def decode_headers(props: dict[str, str]) -> Headers:
    """The headers of a message from its properties. A message without
    :data:`HEADERS_PROPERTY` (a plain Pulsar producer's) reads its properties as headers."""
    blob = props.get(HEADERS_PROPERTY)
    if blob is None:
        return tuple((k, v.encode()) for k, v in props.items() if k != EMPTY_KEY_PROPERTY)
    try:
        return tuple((str(name), base64.b64decode(value)) for name, value in json.loads(blob))
    except (ValueError, TypeError, binascii.Error):
        return ((HEADERS_PROPERTY, blob.encode()),)
