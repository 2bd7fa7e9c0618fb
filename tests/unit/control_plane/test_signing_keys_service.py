"""The control plane's JWT signing keys (control_plane.services.signing_keys) on a real
metastore (embedded): the first key on demand, rotations that compare-and-set, the schedule,
a bound on published keys; and the worker's signer following the record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.leaders.key_rotation import KeyRotation
from control_plane.services.signing_keys import SigningKeys
from core.endpoint_auth import JwtAuth
from core.signing_keys import MAX_KEYS, JwtSigning, TooManyKeys
from delivery_workers.endpoint_auth import JwtSigner, NoSigningKey
from delivery_workers.http_sender import HttpSender
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from tests.support.senders import delivery_to
from tests.support.until import until

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[EmbeddedMetaStore]:
    async with EmbeddedMetaStore(str(tmp_path / "meta.db")) as store:
        yield store


def _keys(meta: EmbeddedMetaStore, clock: Clock, **setting: int) -> SigningKeys:
    return SigningKeys(Catalog(meta), JwtSigning(issuer="iss", **setting), clock)  # type: ignore[arg-type]


async def test_ensure_makes_the_first_key_once(meta: EmbeddedMetaStore) -> None:
    clock = Clock()
    keys = _keys(meta, clock)
    assert (await keys.current()).keys == ()
    assert not await keys.rotate_if_due()  # no key is made before anyone asks for JWTs
    first = await keys.ensure()
    again = await keys.ensure()
    assert len(first.keys) == 1 and again.keys == first.keys
    assert first.signing(T0) == first.keys[0]


async def test_two_control_planes_rotating_at_once_both_land(meta: EmbeddedMetaStore) -> None:
    clock = Clock()
    one, two = _keys(meta, clock), _keys(meta, clock)
    await one.ensure()
    await asyncio.gather(one.rotate(), two.rotate())
    assert len((await one.current()).keys) == 3  # neither overwrote the other


async def test_the_schedule_rotates_after_every_s_and_the_lead_holds(
    meta: EmbeddedMetaStore,
) -> None:
    clock = Clock()
    keys = _keys(meta, clock, rotate_every_s=3_600, publish_lead_s=600)
    await keys.ensure()
    clock.at = T0 + timedelta(seconds=3_599)
    assert not await keys.rotate_if_due()
    clock.at = T0 + timedelta(seconds=3_600)
    assert await keys.rotate_if_due()
    current = await keys.current()
    assert current.keys[1].signs_from == clock.at + timedelta(seconds=600)
    assert not await keys.rotate_if_due()  # one waits to sign: not again


async def test_the_elected_role_rotates_when_due(meta: EmbeddedMetaStore) -> None:
    clock = Clock()
    keys = _keys(meta, clock, rotate_every_s=60)
    await keys.ensure()
    clock.at = T0 + timedelta(seconds=61)
    async with KeyRotation(meta, keys, "cp-1", interval_s=0.05):

        async def two() -> bool:
            return len((await keys.current()).keys) == 2

        await until(two, 10, "a scheduled rotation")


async def test_rotations_stop_at_the_bound_of_published_keys(meta: EmbeddedMetaStore) -> None:
    keys = _keys(meta, Clock())
    await keys.ensure()
    for _ in range(MAX_KEYS - 1):
        await keys.rotate()
    with pytest.raises(TooManyKeys, match="at most"):
        await keys.rotate()
    current = await keys.current()
    assert current.signing(T0) == current.keys[0]  # the signing key was never dropped


async def test_the_workers_signer_follows_the_record(meta: EmbeddedMetaStore) -> None:
    keys = _keys(meta, Clock())
    signer = JwtSigner(meta)
    await signer.start()
    try:
        delivery = delivery_to("https://hooks.example.com/in")
        with pytest.raises(NoSigningKey):
            signer.sign(delivery.subscription, JwtAuth(type="jwt"), "u")
        made = await keys.ensure()
        await until(lambda: signer.keys is not None, 10, "the signer to see the first key")
        assert signer.keys == made
    finally:
        await signer.aclose()


async def test_a_jwt_delivery_without_a_key_fails_retryably_and_no_auth_does_no_auth_work() -> None:
    async with HttpSender() as sender:
        delivery = delivery_to("http://127.0.0.1:9/hook")
        sub = delivery.subscription.model_copy(update={"auth": JwtAuth(type="jwt")})
        result = await sender.send(type(delivery)(sub, delivery.topic, delivery.message))
        assert result.error_kind == "unexpected" and "no JWT signing key" in (result.error or "")
        await sender.send(delivery)  # auth none: refused connection, and no auth work
        assert sender.signer.signed == 0 and sender.tokens.fetches == 0
