"""The overlap rules of the JWT signing keys (core.signing_keys): a key is published before
it signs, stays published ``retain_s`` after it stopped, and the JWKS verifies what it signs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jwt
import pytest
from pydantic import ValidationError

from core.signing_keys import JwtSigning, KeySet, new_key

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _keys(**timings: int) -> KeySet:
    return JwtSigning(**timings).empty()  # type: ignore[arg-type]


def test_the_first_key_signs_at_once_and_is_published() -> None:
    keys = _keys(publish_lead_s=600).rotated(new_key("ES256"), T0)
    [first] = keys.keys
    assert keys.signing(T0) == first
    assert keys.published(T0) == (first,)


def test_a_new_key_is_published_lead_s_before_it_signs() -> None:
    keys = _keys(publish_lead_s=600, retain_s=3_600).rotated(new_key("ES256"), T0)
    keys = keys.rotated(new_key("ES256"), _s(100))
    old, new = keys.keys
    assert new.created_at == _s(100) and new.signs_from == _s(700)
    for at in (_s(100), _s(400), _s(699)):  # published, not signing yet: the old one signs
        assert keys.signing(at) == old
        assert new in keys.published(at)
    assert keys.signing(_s(700)) == new
    assert keys.stopped_at(old, _s(700)) == _s(700)
    assert keys.stopped_at(old, _s(699)) is None


def test_an_old_key_stays_published_retain_s_after_it_stopped_then_goes() -> None:
    keys = _keys(publish_lead_s=600, retain_s=3_600).rotated(new_key("ES256"), T0)
    keys = keys.rotated(new_key("ES256"), _s(100))
    old, new = keys.keys
    assert old in keys.published(_s(700 + 3_599))
    assert keys.published(_s(700 + 3_600)) == (new,)
    # The next rotation drops it from the record.
    later = keys.rotated(new_key("ES256"), _s(5_000))
    assert old not in later.keys and new in later.keys and len(later.keys) == 2


def test_a_key_made_with_no_lead_signs_at_once_but_the_first_waits_for_nothing() -> None:
    keys = _keys(publish_lead_s=600).rotated(new_key("ES256"), T0)
    keys = keys.rotated(new_key("RS256"), _s(10), lead_s=0)
    assert keys.signing(_s(10)) == keys.keys[1]


def test_retention_shorter_than_the_tokens_is_refused() -> None:
    with pytest.raises(ValidationError, match="retain_s"):
        KeySet(issuer="x", token_ttl_s=300, retain_s=60)
    # The setting raises a short retention to the tokens' lifetime instead.
    assert JwtSigning(token_ttl_s=300, retain_s=60).empty().retain_s == 300


def test_a_scheduled_rotation_is_due_after_every_s_of_signing_unless_one_waits() -> None:
    keys = _keys(publish_lead_s=600).rotated(new_key("ES256"), T0)
    assert not keys.due(_s(999), every_s=1_000)
    assert keys.due(_s(1_000), every_s=1_000)
    waiting = keys.rotated(new_key("ES256"), _s(1_000))
    assert not waiting.due(_s(1_500), every_s=1_000)  # the next one is published, not signing


@pytest.mark.parametrize("alg", ["ES256", "RS256"])
def test_the_jwks_holds_public_keys_that_verify_what_the_signing_key_signs(alg: str) -> None:
    keys = _keys().rotated(new_key(alg), T0)  # type: ignore[arg-type]
    document = keys.jwks(T0)
    [jwk] = document["keys"]
    assert jwk["alg"] == alg and jwk["use"] == "sig" and "d" not in jwk and "p" not in jwk
    key = keys.signing(T0)
    assert key is not None
    token = jwt.encode(
        {"sub": "shop/billing"}, key.private_pem, algorithm=alg, headers={"kid": key.kid}
    )
    public = jwt.PyJWKSet.from_dict(document)[key.kid]
    assert jwt.decode(token, public.key, algorithms=[alg])["sub"] == "shop/billing"
