"""Message ids: sortable by time, unique without coordination (the ULID layout).

48 bits of milliseconds since the epoch, then 80 random bits, in Crockford base32: 26
characters that sort as the times they were made. Within one millisecond of one process the
random part is incremented, so ids made by one producer also sort in the order made.
"""

from __future__ import annotations

import random
import re
import threading
import time

# What a client may name a message or a group (X-Message-Id, X-Group-Id, a CloudEvent's id):
# it travels in headers, URLs and storage keys as is.
CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CLIENT_ID_RULE = "1 to 128 characters of letters, digits and . _ : -"

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80


class _Monotonic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def next(self, now_ms: int) -> int:
        return self.reserve(1, now_ms)

    def reserve(self, count: int, now_ms: int) -> int:
        """The first of ``count`` consecutive values, as ``count`` calls of ``next`` would
        give them (one lock for a whole batch)."""
        with self._lock:
            if now_ms <= self._last_ms:
                now_ms = self._last_ms
                self._last_rand += 1
            else:
                self._last_ms = now_ms
                # Room to increment. The random module, not os.urandom: ids need uniqueness,
                # not secrecy, and a getrandom syscall per millisecond showed in the produce
                # profile. It is seeded from os.urandom, and again in a forked child.
                self._last_rand = random.getrandbits(_RANDOM_BITS - 1)
            first = (now_ms << _RANDOM_BITS) | self._last_rand
            self._last_rand += count - 1
            return first


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


def new_message_ids(count: int, now_ms: int) -> list[str]:
    """``count`` new ids made at ``now_ms``, in order: what ``count`` calls of
    :func:`new_message_id` would give, for the price of one lock and of one full encoding
    per 2**20 ids (the ids of a batch share all but their last digits)."""
    if count < 1:
        return []
    first = _GEN.reserve(count, now_ms)
    pairs = _PAIRS
    out: list[str] = []
    high = -1
    prefix = ""
    for value in range(first, first + count):
        if value >> 20 != high:
            high = value >> 20
            prefix = encode(value)[:22]
        out.append(prefix + pairs[(value >> 10) & 1023] + pairs[value & 1023])
    return out


def id_time_ms(message_id: str) -> int:
    """The milliseconds an id was made at (raises ValueError if it is not one of ours)."""
    value = 0
    for char in message_id.upper():
        digit = _ALPHABET.find(char)
        if digit < 0 or len(message_id) != 26:
            raise ValueError(f"{message_id!r} is not a message id")
        value = (value << 5) | digit
    return value >> _RANDOM_BITS
