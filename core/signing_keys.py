"""The keys httpbus signs delivery JWTs with (subscription ``auth`` ``jwt``), and when each
one is published and when it signs.

One :class:`KeySet` lives in the metastore (``/signing-keys``), so every worker and every
control plane agree. The control plane makes keys (:func:`new_key`, at start when there is
none, on ``POST /v1/signing-keys:rotate`` and on its rotation schedule) and serves the public
halves at ``GET /.well-known/jwks.json``; the workers sign with :meth:`KeySet.signing`.

Rotation with overlap, so that a receiver that caches the JWKS never meets a ``kid`` it does
not know:

1. a new key is published at once (``created_at``) but signs only from ``signs_from``,
   ``publish_lead_s`` later (default 15 minutes: longer than receivers cache the JWKS; PyJWT's
   ``PyJWKClient`` keeps it 5 minutes);
2. the newest key whose ``signs_from`` has come signs; an older one stops signing then;
3. a key that stopped signing stays published ``retain_s`` more (default 1 hour; at least
   the tokens' lifetime ``token_ttl_s``, so every token it signed expires before it goes),
   then is dropped at the next rotation.

The very first key signs at once (no receiver can know an older one). Pure: no I/O.

Example::

    keys = KeySet(issuer="https://httpbus.example").rotated(new_key("ES256"), now, 900)
    keys.signing(now)                  # the first key: it signs at once
    [k.kid for k in keys.published(now)]
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any, Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import TooManySecrets

Algorithm = Literal["ES256", "RS256"]
DEFAULT_PUBLISH_LEAD_S = 15 * 60
DEFAULT_RETAIN_S = 3_600
DEFAULT_TOKEN_TTL_S = 300
MAX_KEYS = 16


class TooManyKeys(TooManySecrets):
    """A rotation while :data:`MAX_KEYS` keys are still published (409)."""


class SigningKey(BaseModel):
    """One key pair; ``private_pem`` never leaves the metastore's readers (workers, the
    control plane's services)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kid: str = Field(min_length=1, max_length=64)
    alg: Algorithm
    private_pem: str
    created_at: datetime = Field(description="published in the JWKS from then")
    signs_from: datetime = Field(description="signs from then (until a newer key signs)")

    def public_jwk(self) -> dict[str, Any]:
        """The key's public half as a JWK, with ``kid``, ``alg`` and ``use``."""
        private = serialization.load_pem_private_key(self.private_pem.encode(), password=None)
        public = private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            jwk: dict[str, Any] = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            assert isinstance(public, ec.EllipticCurvePublicKey)
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


class KeySet(BaseModel):
    """Every key still published, oldest first, and the timings every reader applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(min_length=1, max_length=1_000, description="the tokens' 'iss'")
    token_ttl_s: int = Field(default=DEFAULT_TOKEN_TTL_S, ge=10, le=3_600)
    publish_lead_s: int = Field(default=DEFAULT_PUBLISH_LEAD_S, ge=0, le=7 * 86_400)
    retain_s: int = Field(default=DEFAULT_RETAIN_S, ge=10, le=30 * 86_400)
    keys: tuple[SigningKey, ...] = Field(default=(), max_length=MAX_KEYS)

    @model_validator(mode="after")
    def _retained_past_tokens(self) -> KeySet:
        if self.retain_s < self.token_ttl_s:
            raise ValueError(
                f"retain_s ({self.retain_s}) must be at least token_ttl_s ({self.token_ttl_s}): "
                "a token must verify until it expires"
            )
        return self

    def signing(self, at: datetime) -> SigningKey | None:
        """The key that signs at ``at``: the newest whose ``signs_from`` has come."""
        ready = [k for k in self.keys if k.signs_from <= at]
        return max(ready, key=lambda k: k.signs_from, default=None)

    def stopped_at(self, key: SigningKey, at: datetime) -> datetime | None:
        """When ``key`` stopped signing (a newer key's ``signs_from``), as seen at ``at``;
        None while it still signs or has not begun."""
        later = [k.signs_from for k in self.keys if k.signs_from > key.signs_from]
        ends = min(later, default=None)
        return ends if ends is not None and ends <= at else None

    def published(self, at: datetime) -> tuple[SigningKey, ...]:
        """The keys in the JWKS at ``at``: made by then, and not stopped more than
        ``retain_s`` ago."""
        keep = timedelta(seconds=self.retain_s)
        out = []
        for key in self.keys:
            stopped = self.stopped_at(key, at)
            if key.created_at <= at and (stopped is None or at < stopped + keep):
                out.append(key)
        return tuple(out)

    def jwks(self, at: datetime) -> dict[str, Any]:
        """The JWKS document served at ``/.well-known/jwks.json``."""
        return {"keys": [k.public_jwk() for k in self.published(at)]}

    def rotated(self, key: SigningKey, at: datetime, lead_s: float | None = None) -> KeySet:
        """This set with ``key`` published from ``at`` and signing ``lead_s`` (default
        ``publish_lead_s``) later — at once when no key signs yet; keys no longer published
        are dropped."""
        lead = self.publish_lead_s if lead_s is None else lead_s
        if self.signing(at) is None and not any(k.signs_from > at for k in self.keys):
            lead = 0  # the first key: nobody can know an older one
        added = key.model_copy(
            update={"created_at": at, "signs_from": at + timedelta(seconds=lead)}
        )
        kept = tuple(k for k in self.keys if k in self.published(at) or k.created_at > at)
        if len(kept) >= MAX_KEYS:
            raise TooManyKeys(
                f"{len(kept)} keys are published: at most {MAX_KEYS}; wait until older keys "
                f"leave the JWKS (retain_s {self.retain_s} s after they stop signing)"
            )
        return self.model_copy(update={"keys": (*kept, added)})

    def due(self, at: datetime, every_s: float) -> bool:
        """Whether a scheduled rotation is due: no key is waiting to sign and the newest
        began signing ``every_s`` ago or more (or none signs)."""
        if any(k.signs_from > at for k in self.keys):
            return False
        current = self.signing(at)
        return current is None or at - current.signs_from >= timedelta(seconds=every_s)


class JwtSigning(BaseModel):
    """The control plane's setting ``jwt_signing``: how delivery JWTs are issued and their
    keys rotated (docs/security.md, "Delivery JWTs")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(
        default="httpbus",
        min_length=1,
        max_length=1_000,
        description="the tokens' 'iss' (receivers compare it); say your control plane's URL",
    )
    algorithm: Algorithm = Field(default="ES256", description="of new keys: ES256 or RS256")
    token_ttl_s: int = Field(
        default=DEFAULT_TOKEN_TTL_S,
        ge=10,
        le=3_600,
        description="a delivery JWT's lifetime: exp is iat plus this",
    )
    publish_lead_s: int = Field(
        default=DEFAULT_PUBLISH_LEAD_S,
        ge=0,
        le=7 * 86_400,
        description="a new key is in the JWKS this long before it signs (longer than "
        "receivers cache the JWKS)",
    )
    retain_s: int = Field(
        default=DEFAULT_RETAIN_S,
        ge=10,
        le=30 * 86_400,
        description="a key stays in the JWKS this long after it stopped signing",
    )
    rotate_every_s: int = Field(
        default=30 * 86_400,
        ge=0,
        le=365 * 86_400,
        description="a new key each this many seconds of signing (0: only when asked)",
    )

    def timings(self, keys: KeySet) -> KeySet:
        """``keys`` with this setting's issuer and timings (the keys unchanged)."""
        return keys.model_copy(
            update={
                "issuer": self.issuer,
                "token_ttl_s": self.token_ttl_s,
                "publish_lead_s": self.publish_lead_s,
                "retain_s": max(self.retain_s, self.token_ttl_s),
            }
        )

    def empty(self) -> KeySet:
        """A key set with no key yet, with these timings."""
        return self.timings(KeySet(issuer=self.issuer))


def new_key(alg: Algorithm, at: datetime | None = None) -> SigningKey:
    """A fresh key pair (P-256 for ES256, RSA 2048 for RS256); :meth:`KeySet.rotated` sets
    its times."""
    private: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = rsa.generate_private_key(public_exponent=65_537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    moment = at or datetime.fromtimestamp(0).astimezone()
    return SigningKey(
        kid=secrets.token_hex(8), alg=alg, private_pem=pem, created_at=moment, signs_from=moment
    )
