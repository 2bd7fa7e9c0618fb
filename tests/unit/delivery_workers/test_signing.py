"""Standard Webhooks v1 signing: the spec's test vector, and every way verification fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core import signing
from core.signing import sign, signing_key, verify

# The test vector of the Standard Webhooks specification and its reference libraries.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def _headers(signature: str = EXPECTED, timestamp: int = TIMESTAMP) -> dict[str, str]:
    return {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_sign_reproduces_the_spec_vector() -> None:
    assert sign(SECRET, MSG_ID, TIMESTAMP, BODY) == EXPECTED


def test_the_prefix_is_optional_as_in_the_reference_libraries() -> None:
    assert sign(SECRET.removeprefix("whsec_"), MSG_ID, TIMESTAMP, BODY) == EXPECTED


def test_verify_accepts_the_vector_within_the_tolerance() -> None:
    assert verify(SECRET, _headers(), BODY, now=TIMESTAMP)
    assert verify(SECRET, _headers(), BODY, now=TIMESTAMP + 300)
    assert verify(SECRET, _headers(), BODY, now=TIMESTAMP - 300)


def test_verify_reads_headers_in_any_case() -> None:
    upper = {name.title(): value for name, value in _headers().items()}
    assert verify(SECRET, upper, BODY, now=TIMESTAMP)


def test_one_valid_signature_among_several_is_enough() -> None:
    rotated = f"v1,bm90IHRoZSBvbmU= v2,whatever {EXPECTED}"
    assert verify(SECRET, _headers(rotated), BODY, now=TIMESTAMP)


@pytest.mark.parametrize(
    ("secret", "headers", "body", "now"),
    [
        (SECRET, _headers(), BODY + b" ", TIMESTAMP),  # body changed
        (SECRET, _headers(), BODY, TIMESTAMP + 301),  # too old: a replay
        (SECRET, _headers(), BODY, TIMESTAMP - 301),  # too far in the future
        ("whsec_" + "A" * 32, _headers(), BODY, TIMESTAMP),  # another secret
        (SECRET, _headers(EXPECTED.replace("v1,", "v2,")), BODY, TIMESTAMP),  # unknown version
        (SECRET, _headers(EXPECTED[:-2] + "A="), BODY, TIMESTAMP),  # signature changed
        (SECRET, _headers(timestamp=TIMESTAMP + 1), BODY, TIMESTAMP),  # timestamp changed
        (SECRET, {**_headers(), "webhook-id": "msg_other"}, BODY, TIMESTAMP),  # id changed
        (SECRET, {**_headers(), "webhook-timestamp": "1614265330.0"}, BODY, TIMESTAMP),
        (SECRET, {k: v for k, v in _headers().items() if k != "webhook-id"}, BODY, TIMESTAMP),
        (SECRET, {}, BODY, TIMESTAMP),
    ],
)
def test_verify_refuses(secret: str, headers: dict[str, str], body: bytes, now: int) -> None:
    assert not verify(secret, headers, body, now=now)


def test_verify_uses_the_clock_when_now_is_not_given() -> None:
    assert not verify(SECRET, _headers(), BODY)  # the vector is from 2021


def test_a_secret_that_is_not_base64_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        signing_key("whsec_not base64!")
    with pytest.raises(ValueError):
        sign("whsec_", MSG_ID, TIMESTAMP, BODY)


def test_signing_is_pure_standard_library() -> None:
    tree = ast.parse(Path(signing.__file__).read_text())
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    allowed = {"__future__", "base64", "binascii", "hashlib", "hmac", "time", "collections.abc"}
    assert imported <= allowed
