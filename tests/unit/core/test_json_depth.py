"""The nesting of a JSON text, measured without parsing it (issue 38): brackets inside strings
do not count, escapes pair off as a parser reads them, and no input raises."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.json_depth import MAX_DEPTH, too_deep


def _depth(doc: Any) -> int:
    if isinstance(doc, list):
        return 1 + max((_depth(x) for x in doc), default=0)
    if isinstance(doc, dict):
        return 1 + max((_depth(x) for x in doc.values()), default=0)
    return 0


def _document(rng: random.Random, level: int = 0) -> Any:
    """A random document whose strings are full of brackets, quotes and backslashes."""
    draw = rng.random()
    if level > 8 or draw < 0.3:
        return rng.choice(['a\\"[{', '"', "\\", "}]", '\\"]', 1, None, "\\\\[["])
    if draw < 0.65:
        return [_document(rng, level + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["[", "{", '"', "\\", "k"]): _document(rng, level + 1) for _ in range(3)}


def test_the_depth_is_the_parsers_for_documents_full_of_tricky_strings() -> None:
    rng = random.Random(38)
    for _ in range(2_000):
        doc = _document(rng)
        text, depth = json.dumps(doc).encode(), _depth(doc)
        assert not too_deep(text, depth), text
        assert depth == 0 or too_deep(text, depth - 1), text


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, False),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), True),
        (b'{"a":' * 5_000 + b"1" + b"}" * 5_000, True),
        (b"[" * 1_000_000, True),  # never closed
        (b'["' + b"[" * 10_000 + b'"]', False),  # brackets in a string
        (b'["\\\\"' + b"[" * 200, True),  # an escaped backslash ends no string: the quote does
        (b"]" * 10_000 + b"[]", False),  # closes first: not JSON, still no exception
        (b"[]" * 100_000, False),
        (b"", False),
    ],
)
def test_shapes(text: bytes, deep: bool) -> None:
    assert too_deep(text) is deep
