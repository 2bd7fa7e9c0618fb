"""How a subscription's deliveries authenticate to its endpoint: the ``auth`` setting.

One of (``type``):

- ``none`` — only what the endpoint's static headers carry (the default);
- ``oauth2_client_credentials`` — the worker gets an access token from ``token_url`` (RFC 6749
  section 4.4: ``grant_type=client_credentials``, the client's id and secret in HTTP Basic),
  caches it, renews it at 80 % of its ``expires_in`` (and once at once when the endpoint
  answers 401) and sends ``Authorization: Bearer <token>``;
- ``jwt`` — every delivery carries a JWT signed by httpbus (``Authorization: Bearer``):
  ``iss``, ``aud`` (``audience``, default the endpoint URL), ``sub`` (``project/subscription``),
  ``iat``, ``exp``, ``jti``; receivers check it against the control plane's
  ``/.well-known/jwks.json`` (:mod:`core.signing_keys`);
- ``mtls`` — the worker presents ``client_cert`` / ``client_key`` in the TLS handshake, and
  checks the endpoint's certificate against ``ca`` when given (a CA may be set alone).

``client_secret`` and ``client_key`` are write-only: every read shows :data:`MASK`, and the
mask sent back keeps the stored value (:func:`unmasked`), as for the credential headers of
:mod:`core.secret_headers`. Receivers: docs/receiving.md, "Endpoint authentication".

Example::

    >>> auth = OAuth2ClientCredentials(
    ...     type="oauth2_client_credentials", token_url="https://id.example/token",
    ...     client_id="httpbus", client_secret="s3cret")
    >>> masked(auth).client_secret
    '********'
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from .errors import ValidationFailed
from .secret_headers import MASK

MAX_PEM = 64 * 1024


class _Auth(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NoAuth(_Auth):
    """No authentication of httpbus's own (static headers still go)."""

    type: Literal["none"] = "none"


class OAuth2ClientCredentials(_Auth):
    """An OAuth 2.0 access token from the client credentials grant."""

    type: Literal["oauth2_client_credentials"]
    token_url: AnyHttpUrl = Field(
        description="the authorization server's token endpoint; checked against the endpoint "
        "policy at create and at connect"
    )
    client_id: str = Field(min_length=1, max_length=256)
    client_secret: str = Field(
        min_length=1, max_length=1024, description="write-only: shown as ********"
    )
    scope: str | None = Field(default=None, min_length=1, max_length=1_000)
    audience: str | None = Field(
        default=None,
        min_length=1,
        max_length=1_000,
        description="sent as the token request's 'audience' (Auth0, Okta and others ask it)",
    )


class JwtAuth(_Auth):
    """A JWT signed by httpbus on every delivery."""

    type: Literal["jwt"]
    audience: str | None = Field(
        default=None,
        min_length=1,
        max_length=1_000,
        description="the token's 'aud'; absent: the endpoint URL",
    )


def _certificates(pem: str, field: str) -> list[x509.Certificate]:
    try:
        found = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        found = []
    if not found:
        raise ValueError(f"{field} must hold PEM certificates (-----BEGIN CERTIFICATE-----)")
    return found


class MtlsAuth(_Auth):
    """A client certificate presented in the TLS handshake, and/or a CA bundle that the
    endpoint's certificate must chain to (instead of the system's trust store)."""

    type: Literal["mtls"]
    client_cert: str | None = Field(
        default=None, max_length=MAX_PEM, description="PEM: the certificate, then its chain"
    )
    client_key: str | None = Field(
        default=None, max_length=MAX_PEM, description="PEM private key; write-only"
    )
    ca: str | None = Field(
        default=None,
        max_length=MAX_PEM,
        description="PEM CA bundle the endpoint's certificate must chain to; absent: the "
        "system's trust store",
    )

    @model_validator(mode="after")
    def _usable(self) -> MtlsAuth:
        if self.client_cert is None and self.ca is None:
            raise ValueError("mtls needs client_cert and client_key, or ca, or all three")
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key go together: give both or neither")
        if self.ca is not None:
            _certificates(self.ca, "ca")
        if self.client_cert is not None and self.client_key is not None:
            [leaf, *_] = _certificates(self.client_cert, "client_cert")
            if self.client_key != MASK:  # the stored key replaces the mask before it is used
                try:
                    key = load_pem_private_key(self.client_key.encode(), password=None)
                except (ValueError, TypeError, UnsupportedAlgorithm):
                    raise ValueError("client_key must be an unencrypted PEM private key") from None
                if key.public_key() != leaf.public_key():
                    raise ValueError("client_key is not the key of client_cert")
        return self


EndpointAuth = Annotated[
    NoAuth | OAuth2ClientCredentials | JwtAuth | MtlsAuth, Field(discriminator="type")
]
AUTH_TYPES = ("none", "oauth2_client_credentials", "jwt", "mtls")
_WRITE_ONLY = {"oauth2_client_credentials": "client_secret", "mtls": "client_key"}


A = TypeVar("A", bound=BaseModel)


def masked(auth: A) -> A:
    """``auth`` as every read shows it: its write-only field (if set) is :data:`MASK`."""
    field = _WRITE_ONLY.get(getattr(auth, "type", ""))
    if field is None or getattr(auth, field) is None:
        return auth
    return auth.model_copy(update={field: MASK})


def unmasked(given: dict[str, object], stored: BaseModel) -> dict[str, object]:
    """``given`` (a request's ``auth``, as a dict) with a write-only field sent back as
    :data:`MASK` replaced by the value ``stored`` holds, when both are of the same type; one
    with nothing stored stays masked, for :func:`refuse_masked` to refuse."""
    kind = given.get("type")
    field = _WRITE_ONLY.get(str(kind))
    if field is None or given.get(field) != MASK or getattr(stored, "type", None) != kind:
        return given
    value = getattr(stored, field)
    return given if value is None else {**given, field: value}


def refuse_masked(auth: BaseModel) -> None:
    """422 naming ``auth.<field>`` when a write-only field is still :data:`MASK`: a shown
    value sent where none of that type is stored."""
    field = _WRITE_ONLY.get(getattr(auth, "type", ""))
    if field is None or getattr(auth, field) != MASK:
        return
    problem = f"{MASK} stands for the stored value, and none is stored; send the value itself"
    name = f"auth.{field}"
    raise ValidationFailed(
        f"{name}: {problem}", details={"fields": [{"field": name, "problem": problem}]}
    )
