"""The keys of delivery JWTs (subscription ``auth`` ``jwt``): ``GET /.well-known/jwks.json``
for receivers (no credential needed: public keys only), and for admins the list of keys and
``POST /v1/signing-keys:rotate``. The rules of publication are :mod:`core.signing_keys`'."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import ADMIN
from control_plane.api.deps import AdminDep
from control_plane.services.signing_keys import SigningKeys
from core.signing_keys import KeySet

JWKS_MAX_AGE_S = 300
router = APIRouter(tags=["signing keys"])


def _keys(admin: AdminDep) -> SigningKeys:
    return admin.signing_keys


KeysDep = Annotated[SigningKeys, Depends(_keys)]


class KeyShown(BaseModel):
    """A key as admins see it: never its private half."""

    kid: str
    alg: str
    created_at: datetime = Field(description="published in the JWKS from then")
    signs_from: datetime
    stopped_at: datetime | None = Field(description="when a newer key took over; null: not yet")
    published_until: datetime | None = Field(
        description="when it leaves the JWKS (retain_s after it stopped); null: not decided"
    )
    signing: bool = Field(description="the key that signs now")


class KeysShown(BaseModel):
    issuer: str
    token_ttl_s: int
    publish_lead_s: int
    retain_s: int
    keys: list[KeyShown] = Field(description="every key in the JWKS now, oldest first")

    @classmethod
    def of(cls, keys: KeySet, at: datetime) -> KeysShown:
        signing = keys.signing(at)
        shown = []
        for key in keys.published(at):
            stopped = keys.stopped_at(key, at)
            until = None if stopped is None else stopped + timedelta(seconds=keys.retain_s)
            shown.append(
                KeyShown(
                    kid=key.kid,
                    alg=key.alg,
                    created_at=key.created_at,
                    signs_from=key.signs_from,
                    stopped_at=stopped,
                    published_until=until,
                    signing=key is signing,
                )
            )
        fields = keys.model_dump(include={"issuer", "token_ttl_s", "publish_lead_s", "retain_s"})
        return cls(**fields, keys=shown)


class KeyRotate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    lead_s: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86_400,
        description="seconds between publishing the new key and signing with it; absent: "
        "the setting jwt_signing.publish_lead_s (shorter than receivers cache the JWKS "
        "makes them refuse tokens until their cache renews)",
    )


class JwksDocument(BaseModel):
    """A JSON Web Key Set (RFC 7517): the public keys only."""

    keys: list[dict[str, Any]]


@router.get("/.well-known/jwks.json", response_model=JwksDocument)
async def jwks(admin: AdminDep) -> JSONResponse:
    """The public keys of delivery JWTs (RFC 7517), for receivers; no credential needed.
    A new key is listed ``publish_lead_s`` before it signs and an old one ``retain_s`` after
    it stopped, so a cache of up to ``max-age`` never misses a key."""
    body = await admin.signing_keys.jwks()
    headers = {"Cache-Control": f"public, max-age={JWKS_MAX_AGE_S}"}
    return JSONResponse(body, headers=headers)


@router.get("/v1/signing-keys", **ADMIN)
async def list_signing_keys(keys: KeysDep) -> KeysShown:
    """The JWT signing keys published now, which one signs, and the timings."""
    return KeysShown.of(await keys.current(), keys.now())


@router.post("/v1/signing-keys:rotate", **ADMIN)
async def rotate_signing_key(keys: KeysDep, body: KeyRotate | None = None) -> KeysShown:
    """Make a new signing key: published at once, signing ``lead_s`` later (at once if no
    key signs yet); the current one signs until then and stays published ``retain_s`` more."""
    changed = await keys.rotate((body or KeyRotate()).lead_s)
    return KeysShown.of(changed, keys.now())
