"""Produce tokens: ``hbp.<project>.<id>.<secret>``, stored only as a SHA-256.

The project and id in the token let a producer find the stored hash with one lookup; the
secret's hash is compared in constant time. A token never leaves the control plane except
once, in the answer to its creation.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from .model import ProduceToken
from .names import check_name

PREFIX = "hbp"
_ID = re.compile(r"[a-f0-9]{12}")  # as ProduceToken.id


def _sha256(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def make_token(
    project: str, topics: tuple[str, ...] = ("*",), description: str = ""
) -> tuple[ProduceToken, str]:
    """A new token for ``project``: the model to store, and the plaintext to show once."""
    token_id = secrets.token_hex(6)
    plaintext = f"{PREFIX}.{project}.{token_id}.{secrets.token_urlsafe(32)}"
    model = ProduceToken(
        id=token_id,
        project=project,
        topics=topics,
        sha256=_sha256(plaintext),
        description=description,
    )
    return model, plaintext


def parse(plaintext: str) -> tuple[str, str] | None:
    """``(project, id)`` of a well-formed produce token, else None (a project that is not a
    name, or an id that is not 12 hex digits, never reaches a lookup)."""
    parts = plaintext.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not all(parts):
        return None
    if _ID.fullmatch(parts[2]) is None:
        return None
    try:
        check_name(parts[1])
    except ValueError:
        return None
    return parts[1], parts[2]


def verify(token: ProduceToken, plaintext: str) -> bool:
    return hmac.compare_digest(token.sha256, _sha256(plaintext))
