"""Standard Webhooks signatures (https://www.standardwebhooks.com), version ``v1``.

Every delivery carries three headers:

- ``webhook-id`` — the message id, the same on every attempt (receivers dedupe on it);
- ``webhook-timestamp`` — seconds since the epoch when this attempt was signed;
- ``webhook-signature`` — ``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``,
  keyed with the subscription's secret (``whsec_`` and base64; the key is the decoded bytes).

A receiver checks them with any Standard Webhooks library, or with :func:`verify`::

    from core.signing import verify

    if not verify(secret, request.headers, await request.body()):
        return Response(status_code=401)

Pure: no I/O, and nothing of httpbus is imported.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping

PREFIX = "whsec_"
VERSION = "v1"
DEFAULT_TOLERANCE_S = 300


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: the base64 after ``whsec_`` (the prefix is optional, as in
    the reference libraries). ``ValueError`` if it is not base64."""
    encoded = secret.removeprefix(PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except ValueError:  # binascii.Error, or characters beyond ASCII
        raise ValueError("a signing secret is 'whsec_' followed by base64") from None
    if not key:
        raise ValueError("a signing secret needs at least one byte of key")
    return key


def check_new_secret(secret: str) -> None:
    """``ValueError`` saying what is wrong unless ``secret`` may start signing: ``whsec_``,
    then the base64 of a key that is not all zero bytes. :func:`signing_key` stays lenient
    (no prefix needed, as in the reference libraries) for receivers and for secrets stored
    before this check; a secret an operator gives httpbus is held to the format it documents,
    and a key of zeros signs nothing anyone could not forge."""
    if not secret.startswith(PREFIX):
        raise ValueError(f"a signing secret is '{PREFIX}' followed by the key in base64")
    if not any(signing_key(secret)):
        raise ValueError(
            "the signing secret's key is all zero bytes: use random bytes, or send no secret "
            "and one is generated"
        )


def _digest(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp_s, body)
    # hmac.digest is the one-shot C path: a third of the cost of an hmac.new object.
    return base64.b64encode(hmac.digest(key, signed, hashlib.sha256)).decode()


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>``."""
    return sign_with_key(signing_key(secret), msg_id, timestamp_s, body)


def sign_with_key(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """:func:`sign` with the key already decoded (:func:`signing_key`), for a hot path."""
    return f"{VERSION},{_digest(key, msg_id, timestamp_s, body)}"


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    *,
    now: float | None = None,
) -> bool:
    """True if ``headers`` (any case) carry a valid ``v1`` signature of ``body`` signed within
    ``tolerance_s`` of ``now`` (default: this machine's clock), which stops replays.

    ``webhook-signature`` may hold several space-separated signatures (during a secret
    rotation); one valid ``v1`` is enough. Never raises for a bad request, only for a bad
    ``secret`` (``ValueError``)."""
    key = signing_key(secret)
    found = _lower(headers)
    msg_id = found.get("webhook-id")
    stamp = found.get("webhook-timestamp", "")
    signatures = found.get("webhook-signature")
    if not msg_id or not (stamp.isascii() and stamp.isdigit()) or not signatures:
        return False
    timestamp = int(stamp)
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = _digest(key, msg_id, timestamp, body)
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == VERSION and hmac.compare_digest(value.encode(), expected.encode()):
            return True
    return False
