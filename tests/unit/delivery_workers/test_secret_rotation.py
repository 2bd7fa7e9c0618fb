"""A signing-secret rotation on the delivery side: during the overlap every request carries a
``v1,`` signature per secret in force (the new one first) and verifies with either; after it,
only with the new one. A running worker picks a rotation up from the metastore, without a
restart of its process."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from core.errors import SecretInForce, TooManySecrets
from core.model import MAX_RETIRING_SECRETS
from core.signing import sign, verify
from delivery_workers.sender import Delivery, build_request
from segments.protocol import Stored
from tests.support.hook import SECRET
from tests.support.until import until
from tests.support.workers import WorkersWorld, workers_world_fixture
from tests.support.world import subscription

__all__ = ["workers_world_fixture"]

NEW = "whsec_" + "QkJC" * 8
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MSG = Stored(
    partition=0, position=1, timestamp_ms=1, value=b"{}", headers=(("x-message-id", b"m"),)
)


def _signature(delivery: Delivery, now_s: int) -> str:
    return dict((k.lower(), v) for k, v in build_request(delivery, now_s).headers)[
        "webhook-signature"
    ]


def test_during_the_overlap_both_sign_and_after_it_only_the_new_one() -> None:
    sub = subscription("s").rotated(NEW, NOW, 60)
    start = int(NOW.timestamp())
    delivery = Delivery(sub, "p/t", MSG)
    during = _signature(delivery, start + 59)
    assert during == f"{sign(NEW, 'm', start + 59, b'{}')} {sign(SECRET, 'm', start + 59, b'{}')}"
    headers = {"webhook-id": "m", "webhook-timestamp": str(start + 59), "webhook-signature": during}
    assert verify(NEW, headers, b"{}", now=start + 59)
    assert verify(SECRET, headers, b"{}", now=start + 59)
    after = _signature(delivery, start + 60)
    assert after == sign(NEW, "m", start + 60, b"{}")
    headers = {"webhook-id": "m", "webhook-timestamp": str(start + 60), "webhook-signature": after}
    assert verify(NEW, headers, b"{}", now=start + 60)
    assert not verify(SECRET, headers, b"{}", now=start + 60)


def test_rotations_in_a_row_keep_every_secret_in_its_overlap() -> None:
    third = "whsec_" + "Q0ND" * 8
    sub = subscription("s").rotated(NEW, NOW, 60).rotated(third, NOW, 30)
    start = NOW.timestamp()
    assert sub.secrets_at(start + 10) == (third, NEW, SECRET)
    assert sub.secrets_at(start + 45) == (third, SECRET)
    assert sub.secrets_at(start + 61) == (third,)
    later = sub.rotated(NEW, datetime.fromtimestamp(start + 61, UTC), 0)  # NEW ended: allowed
    assert later.secrets_at(start + 61) == (NEW,)


def test_a_rotation_to_a_secret_in_force_or_past_the_limit_is_refused() -> None:
    sub = subscription("s").rotated(NEW, NOW, 60)
    with pytest.raises(SecretInForce):
        sub.rotated(SECRET, NOW, 60)
    for i in range(MAX_RETIRING_SECRETS - 1):
        sub = sub.rotated(f"whsec_{i:04d}" + "QUFB" * 7, NOW, 60)
    with pytest.raises(TooManySecrets):
        sub.rotated("whsec_" + "RERE" * 8, NOW, 60)
    assert len(sub.rotated("whsec_" + "RERE" * 8, NOW, 0).retiring_secrets) == MAX_RETIRING_SECRETS


async def test_a_running_worker_signs_with_both_secrets_after_a_rotation(
    world: WorkersWorld,
) -> None:
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await until(lambda: "p/s0" in worker.runners, what="s0 running on w1")
    [before] = await world.produce("before", 1)
    await until(lambda: before in world.hook.ids("s0"), what="the first message")

    def checks(mid: str) -> tuple[bool, bool]:
        [request] = [r for r in world.hook.on("s0") if r.id == mid]
        headers = dict(request.headers)
        return verify(SECRET, headers, request.body), verify(NEW, headers, request.body)

    assert checks(before) == (True, False)
    overlap_s = 5
    ends = await world.rotate_secret(worker, "s0", NEW, overlap_s)
    [during] = await world.produce("during", 1)
    await until(lambda: during in world.hook.ids("s0"), what="a message in the overlap")
    [request] = [r for r in world.hook.on("s0") if r.id == during]
    assert int(request.headers["webhook-timestamp"]) < ends, "delivered after the overlap"
    assert checks(during) == (True, True)
    assert len(request.headers["webhook-signature"].split()) == 2
    await until(lambda: time.time() > ends + 1, overlap_s + 5, "the overlap's end")
    [after] = await world.produce("after", 1)
    await until(lambda: after in world.hook.ids("s0"), what="a message after the overlap")
    assert checks(after) == (False, True)
