"""Message ids: sortable by time, unique without coordination (the ULID layout).

48 bits of milliseconds since the epoch, then 80 random bits, in Crockford base32: 26
characters that sort as the times they were made. Within one millisecond of one process the
random part is incremented, so ids made by one producer also sort in the order made.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80


class _Monotonic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def next(self, now_ms: int) -> int:
        with self._lock:
            if now_ms <= self._last_ms:
                now_ms = self._last_ms
                self._last_rand += 1
            else:
                self._last_ms = now_ms
                self._last_rand = int.from_bytes(os.urandom(10)) >> 1  # room to increment
            return (now_ms << _RANDOM_BITS) | self._last_rand


_GEN = _Monotonic()


# Two base32 digits per table entry: 13 lookups for the 26 digits of an id.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def encode(value: int) -> str:
    """26 Crockford base32 digits of a value below 2**130, most significant first."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in range(120, -1, -10)])


def new_message_id(now_ms: int | None = None) -> str:
    """A new id, e.g. ``01JD3ZK6Q7M2X9C4V8B1N5R0TT``."""
    return encode(_GEN.next(int(time.time() * 1000) if now_ms is None else now_ms))


def id_time_ms(message_id: str) -> int:
    """The milliseconds an id was made at (raises ValueError if it is not one of ours)."""
    value = 0
    for char in message_id.upper():
        digit = _ALPHABET.find(char)
        if digit < 0 or len(message_id) != 26:
            raise ValueError(f"{message_id!r} is not a message id")
        value = (value << 5) | digit
    return value >> _RANDOM_BITS
