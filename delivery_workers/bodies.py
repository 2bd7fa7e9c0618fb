"""The parsed payloads body filters read, kept so a message is parsed once per worker.

A filter that names ``body`` (:mod:`core.filters`) needs the payload as JSON. Subscriptions
of one topic that follow its tail on one worker read the same :class:`~segments.protocol.Stored`
objects (:mod:`.shared_reads`), so a :class:`BodyCache` the worker shares between its runners
parses each such message once, however many body filters read it. A subscription that reads
storage on its own (catching up from behind, after a seek) gets its own objects and parses
them for itself: once per message per such read.

Entries are keyed by the object's identity and hold the object (so its id is not reused while
the entry lives). They are bounded by count (``size``) and by the payload bytes they stand for
(``max_bytes``): a parsed body takes several times its payload in Python objects (and CEL's
converted copy), and every one kept is scanned by each full collection of the garbage
collector. Subscriptions following one tail read the same batch within moments of each other,
so a small window is enough.

The cache shares the :class:`~core.filters.Body`, so it shares CEL's conversion of it too: the
first body filter to read a message pays the parse and the conversion, every other one a few
microseconds (docs/receiving.md has the figures).
"""

from __future__ import annotations

from collections import OrderedDict

from core.filters import Body, parse_body
from segments.protocol import Stored

CACHE_SIZE = 1_024
CACHE_BYTES = 0


class BodyCache:
    """The last ``size`` bodies parsed, by message identity (see the module doc)."""

    def __init__(self, size: int = CACHE_SIZE, max_bytes: int = CACHE_BYTES) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.parsed = 0  # parses done: what a test or a benchmark counts
        self._bytes = 0
        self._entries: OrderedDict[int, tuple[Stored, Body]] = OrderedDict()

    def body(self, msg: Stored) -> Body:
        """``msg``'s payload as a body filter sees it, parsed at most once while kept."""
        key = id(msg)
        found = self._entries.get(key)
        if found is not None and found[0] is msg:
            return found[1]
        body = parse_body(msg.value)
        self.parsed += 1
        self._entries[key] = (msg, body)
        self._bytes += _weight(msg, body)
        while len(self._entries) > self.size or self._bytes > self.max_bytes:
            _, (old, dropped) = self._entries.popitem(last=False)
            self._bytes -= _weight(old, dropped)
        return body


def _weight(msg: Stored, body: Body) -> int:
    """What an entry counts against ``max_bytes``: a refusal holds no parsed objects."""
    return len(msg.value) if body.value is not None else 0
