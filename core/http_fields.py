"""What an HTTP/1.1 header field may hold: the one rule the producer checks at produce and the
delivery sender checks before it writes a request, so nothing is accepted that cannot be sent.

A name is a token (RFC 9110 §5.1); a value is visible ASCII and obs-text (``\\x80``-``\\xff``)
with inner spaces and tabs, and no outer whitespace, CR, LF, NUL or other control character
(§5.5). Values are latin-1 text, as HTTP carries them (see :mod:`core.envelope`).

    field_problem("X-Trace", "abc")   # None: it can be sent
    field_problem("X-Trace", " abc")  # "the value of X-Trace must not start or end with ..."

:func:`content_type_problem` is stricter: a content type is ASCII only.
"""

from __future__ import annotations

import re

TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# A field value (RFC 9110): visible ASCII and obs-text, inner spaces and tabs, no outer ones.
VALUE = r"(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?"
# A content type: the same, in ASCII only (receivers and frameworks parse it as ASCII).
_ASCII_VALUE = r"(?:[\x21-\x7e](?:[\t\x20-\x7e]*[\x21-\x7e])?)?"
NAME_RE = re.compile(TOKEN)
VALUE_RE = re.compile(VALUE)
_CONTENT_TYPE_RE = re.compile(_ASCII_VALUE)
_VALUE_RULE = (
    "must not start or end with whitespace, or hold CR, LF, NUL or other control characters"
)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a header name, or None if it can."""
    if NAME_RE.fullmatch(name) is None:
        return (
            f"the header name {name[:64]!r} is not an HTTP token "
            "(letters, digits and !#$%&'*+-.^_`|~ only)"
        )
    return None


def field_problem(name: str, value: str) -> str | None:
    """Why the header ``name: value`` (value as latin-1 text) cannot be sent, or None."""
    problem = name_problem(name)
    if problem is None and VALUE_RE.fullmatch(value) is None:
        problem = f"the value of {name[:64]} {_VALUE_RULE}"
    return problem


def content_type_problem(value: str) -> str | None:
    """Why ``value`` cannot be a message's content type, or None if it can."""
    if _CONTENT_TYPE_RE.fullmatch(value) is None:
        return f"the content type must be printable ASCII and {_VALUE_RULE}"
    return None
