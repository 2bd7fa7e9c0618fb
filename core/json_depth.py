"""How deeply a JSON text nests, measured without parsing it.

Python's ``json`` recurses once per array or object, so a text of about 1 000 ``[`` raises
``RecursionError`` (not ``ValueError``) out of ``json.loads``, and ``jsonschema-rs`` refuses
more than 255 levels with a bare ``ValueError``. Anything that parses JSON it did not write
(a payload checked against a topic's schema, an endpoint's batch answer) measures the depth
first, at C speed and without recursion: :func:`too_deep`. :data:`MAX_DEPTH` is
``serde_json``'s default limit; real documents nest a handful of levels.

Example::

    too_deep(b'{"a": [1, 2]}')   # False (2 levels)
    too_deep(b"[" * 10_000)      # True
"""

from __future__ import annotations

from itertools import accumulate

MAX_DEPTH = 128
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 64 * 1024  # brackets summed at once


def too_deep(text: bytes, limit: int = MAX_DEPTH) -> bool:
    """True if ``text`` nests more than ``limit`` arrays and objects (brackets inside strings
    do not count). A text with no more brackets than the limit is passed by two counts; the
    scan stops at the first chunk that goes too deep. For text that is not JSON the answer
    is a guess, but never an exception."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    steps = _steps(text)
    level = 0
    for start in range(0, len(steps), _CHUNK):
        levels = list(accumulate(steps[start : start + _CHUNK], initial=level))
        if max(levels) > limit:
            return True
        level = levels[-1]
    return False


def _steps(text: bytes) -> memoryview:
    """+1 for each ``[`` and ``{`` outside strings, -1 for each ``]`` and ``}``, in order."""
    if b'"' in text:
        # Escapes pair off from the left, as a parser reads them: first every ``\\``, then
        # every ``\"`` is no quote. What is left between quotes is string, dropped whole.
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
        text = b"".join(text.split(b'"')[::2])
    return memoryview(text.translate(_OPEN_CLOSE, _NOT_BRACKETS)).cast("b")
