"""Endpoint headers that carry credentials: which they are, how they are shown, and how a
shown value sent back keeps the stored one.

A subscription's ``endpoint.headers`` often hold the receiver's credentials
(``Authorization: Bearer …``, ``X-Api-Key``). They are stored as the signing secret is (in
the metastore, which only the services read) and, like it, never shown by a read: every
role, on every route, page and CLI listing, sees :data:`MASK` instead of the value. Only the
admin's audited ``secret:reveal`` shows them.

A client that edits what it read (the UI's form, ``httpbus sub update``) sends the masked
value back: :func:`unmasked` puts the stored value in its place, so the credential is kept;
a masked value with nothing stored under its name is refused (:func:`refuse_masked`), never
sent to a receiver.

A name is a credential's when, compared without case, it is one of :data:`NAMES` or one of
its words (split at ``-``, ``_`` and ``.``) is one of :data:`WORDS`: ``Authorization``,
``Cookie``, ``X-Api-Key``, ``X-Auth-Token``, ``X-Hub-Signature``, ``Client-Secret``…

Example::

    >>> masked({"Authorization": "Bearer abc", "X-Region": "eu"})
    {'Authorization': '********', 'X-Region': 'eu'}
    >>> unmasked({"authorization": MASK}, {"Authorization": "Bearer abc"})
    {'authorization': 'Bearer abc'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import ValidationFailed

MASK = "********"
NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "apikey"})
WORDS = frozenset(
    {
        "auth",
        "authorization",
        "token",
        "key",
        "apikey",
        "secret",
        "signature",
        "sig",
        "password",
        "passwd",
        "pwd",
        "credential",
        "credentials",
        "session",
        "cookie",
        "jwt",
    }
)
_WORD_BREAK = re.compile(r"[-_.\s]+")


def is_secret(name: str) -> bool:
    """Whether header ``name`` carries a credential (see the module's docstring)."""
    lowered = name.strip().lower()
    return lowered in NAMES or any(w in WORDS for w in _WORD_BREAK.split(lowered))


def masked(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as they are shown: a credential's value is :data:`MASK`."""
    return {name: MASK if is_secret(name) else value for name, value in headers.items()}


def unmasked(given: Mapping[str, str], stored: Mapping[str, str]) -> dict[str, str]:
    """``given`` with each credential sent back as :data:`MASK` replaced by the value
    ``stored`` holds under the same name (without case); one with nothing stored stays
    masked, for :func:`refuse_masked` to refuse."""
    by_name = {name.lower(): value for name, value in stored.items()}
    out = {}
    for name, value in given.items():
        if value == MASK and is_secret(name):
            value = by_name.get(name.lower(), value)
        out[name] = value
    return out


def refuse_masked(headers: Mapping[str, str]) -> None:
    """422 naming each credential header whose value is still :data:`MASK`: a shown value
    sent where no credential of that name is stored (it would reach the receiver)."""
    problem = (
        f"{MASK} stands for the stored value, and none is stored under this name; "
        "send the credential itself"
    )
    fields = [
        {"field": f"endpoint.headers.{name}", "problem": problem}
        for name, value in headers.items()
        if value == MASK and is_secret(name)
    ]
    if fields:
        raise ValidationFailed(f"{fields[0]['field']}: {problem}", details={"fields": fields})
