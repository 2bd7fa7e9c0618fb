"""Delivery in batches (embedded backend): batches up to max_messages and max_bytes, signed as
one request, group order within and across batches, a failed batch retried as one attempt and
dead-lettered message by message, and the max_wait flush of a batch that does not fill."""

from __future__ import annotations

import base64
import json

import pytest

from core.model import BatchPolicy, Endpoint, RetryPolicy, Subscription
from segments.subscription import dlq
from tests.support.hook import SECRET
from tests.support.until import until
from tests.support.world import (
    World,
    embedded_world_fixture,  # noqa: F401  (the world fixture)
    layout_of,
    produce,
    quick_running,
    subscribe,
)

FAST = RetryPolicy(
    max_attempts=3,
    backoff="fixed",
    initial_delay_ms=150,
    jitter=0,
    delay_levels_ms=(100,),
)


async def _batched(world: World, name: str = "s", **fields: object) -> Subscription:
    """Subscription ``name`` in batches of up to 50 (or 100 ms), retried :data:`FAST`."""
    batch = BatchPolicy(max_messages=50, max_wait_ms=100)
    return await subscribe(world, name, batch=batch, retry=FAST, **fields)


def batches(world: World, path: str = "") -> list[list[dict[str, object]]]:
    """The JSON arrays the endpoint answered with a 2xx, in arrival order."""
    return [json.loads(r.body) for r in world.hook.on(path)]


def ids_of(batch: list[dict[str, object]]) -> list[str]:
    return [str(m["id"]) for m in batch]


async def test_batches_keep_group_order_and_deliver_each_message_once(world: World) -> None:
    world.hook.secret = SECRET
    policy = BatchPolicy(max_messages=8, max_bytes=1_000_000, max_wait_ms=50)
    sub = await subscribe(world, batch=policy)
    sent = [await produce(world, f"g{i % 12}-{i // 12}", f"g{i % 12}") for i in range(120)]
    async with quick_running(world, sub):
        await until(lambda: sum(map(len, batches(world))) >= 120, 30, "120 messages")
    got = batches(world)
    assert sorted(mid for b in got for mid in ids_of(b)) == sorted(sent)  # each exactly once
    assert all(1 <= len(b) <= 8 for b in got) and max(map(len, got)) > 1
    for b in got:  # the rule: at most one message of a group per batch
        groups = [m["group"] for m in b]
        assert len(groups) == len(set(groups))
    for g in range(12):  # and a group's messages in order across batches
        seen = [mid for b in got for mid in ids_of(b) if mid.startswith(f"g{g}-")]
        assert seen == [f"g{g}-{i}" for i in range(10)]
    assert world.hook.bad_signatures == 0
    first = world.hook.on("")[0]
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["webhook-id"].startswith("batch_")
    assert first.headers["X-Batch-Size"] == str(len(got[0]))
    entry = got[0][0]
    assert set(entry) == {
        "id",
        "group",
        "headers",
        "produced_at",
        "attempt",
        "content_type",
        "encoding",
        "payload",
    }
    assert entry["encoding"] == "base64"  # no content type: application/octet-stream
    assert base64.b64decode(str(entry["payload"])) == str(entry["id"]).encode()


async def test_max_bytes_bounds_a_batch_and_text_payloads_come_as_text(world: World) -> None:
    policy = BatchPolicy(max_messages=100, max_bytes=10, max_wait_ms=50)
    sub = await subscribe(world, batch=policy)
    for i in range(9):  # payloads of 3 bytes ("uN-i"... is 4): at most 2 per batch
        await produce(world, f"u{i}", None, **{"content-type": b"text/plain; charset=utf-8"})
    async with quick_running(world, sub):
        await until(lambda: sum(map(len, batches(world))) >= 9, 30, "9 messages")
    got = batches(world)
    assert all(sum(len(str(m["payload"])) for m in b) <= 10 for b in got)
    assert all(m["encoding"] == "text" and m["payload"] == m["id"] for b in got for m in b)


async def test_a_batch_that_does_not_fill_goes_after_max_wait(world: World) -> None:
    policy = BatchPolicy(max_messages=1_000, max_bytes=1_000_000, max_wait_ms=300)
    sub = await subscribe(world, batch=policy)
    for i in range(3):
        await produce(world, f"w{i}", None)
    async with quick_running(world, sub) as runner:
        await until(lambda: runner.stats.delivered == 3, 10, "the three, flushed by max_wait")
    assert sorted(mid for b in batches(world) for mid in ids_of(b)) == ["w0", "w1", "w2"]


async def test_a_failed_batch_is_retried_as_one_and_its_messages_dead_lettered(
    world: World,
) -> None:
    # The first request fails, the second succeeds: every message of it attempted twice.
    world.hook.behaviour = lambda mid, n: (503, {}) if n == 1 else (204, {})
    ok = await _batched(world, "ok", endpoint=Endpoint(url=world.hook.url_for("ok")))
    sent = [await produce(world, f"r{i}", None) for i in range(5)]
    async with quick_running(world, ok) as runner:
        await until(lambda: runner.stats.delivered == 5, 20, "the batch, on its second attempt")
        assert runner.stats.dead_lettered == 0 and runner.stats.failed_attempts == 5
    delivered = [m for b in batches(world, "ok") for m in b]
    assert sorted(ids_of(delivered)) == sent
    assert {m["attempt"] for m in delivered} == {2}
    # An endpoint that always fails: each message of the batch ends in the DLQ, its own entry.
    world.hook.down.add("dead")
    dead = await _batched(world, "dead", endpoint=Endpoint(url=world.hook.url_for("dead")))
    async with quick_running(world, dead) as runner:
        await until(lambda: runner.stats.dead_lettered == 5, 20, "five dead letters")
        assert runner.stats.attempts == 15  # 3 attempts each, in batches
    layout = await layout_of(world, dead)

    async def dead_lettered() -> bool:
        view = await dlq.scan(world.store, layout)
        return sorted(dict(e.headers)["x-message-id"].decode() for e in view.live()) == sent

    await until(dead_lettered, 10, "the five in the DLQ, one entry each")


def failing(*ids: str) -> object:
    """An ``answer`` naming ``ids`` failed when a batch carries them."""

    def answer(path: str, body: bytes) -> bytes:
        named = [m["id"] for m in json.loads(body) if m["id"] in ids]
        return json.dumps({"failed": named}).encode() if named else b""

    return answer


async def test_a_message_the_answer_names_failed_is_retried_alone_and_dead_lettered(
    world: World,
) -> None:
    world.hook.behaviour = lambda mid, n: (200, {})
    world.hook.answer = failing("b3")  # type: ignore[assignment]
    sub = await _batched(world)
    sent = [await produce(world, f"b{i}", None) for i in range(6)]
    async with quick_running(world, sub) as runner:
        await until(lambda: runner.stats.dead_lettered == 1, 20, "b3 dead-lettered")
        assert runner.stats.delivered == 5
        assert runner.stats.failed_attempts == 3  # b3's three attempts, no other message's
    requests = batches(world)
    once = [mid for b in requests for mid in ids_of(b) if mid != "b3"]
    assert sorted(once) == [m for m in sent if m != "b3"]  # each of the rest once
    alone = [ids_of(b) for b in requests if "b3" in ids_of(b)]
    assert alone[1:] == [["b3"], ["b3"]]  # retried alone
    assert [m["attempt"] for b in requests for m in b if m["id"] == "b3"] == [1, 2, 3]
    layout = await layout_of(world, sub)

    async def dead_lettered() -> list[str]:
        view = await dlq.scan(world.store, layout)
        return [dict(e.headers)["x-message-id"].decode() for e in view.live()]

    assert await until(dead_lettered, 10, "b3 in the DLQ") == ["b3"]


async def test_on_a_grouped_topic_a_failed_message_s_group_waits_behind_it(
    world: World,
) -> None:
    world.hook.behaviour = lambda mid, n: (200, {})
    accepted: list[str] = []  # what the endpoint took, in order
    tries = {"g1-0": 0}

    def answer(path: str, body: bytes) -> bytes:  # g1-0 fails its first attempt only
        ids = [m["id"] for m in json.loads(body)]
        failed = []
        if "g1-0" in ids:
            tries["g1-0"] += 1
            failed = ["g1-0"] if tries["g1-0"] == 1 else []
        accepted.extend(mid for mid in ids if mid not in failed)
        return json.dumps({"failed": failed}).encode()

    world.hook.answer = answer
    sub = await _batched(world)
    for i in range(3):
        for g in ("g1", "g2"):
            await produce(world, f"{g}-{i}", g)
    async with quick_running(world, sub) as runner:
        await until(lambda: runner.stats.delivered == 6, 20, "all six")
        assert runner.stats.failed_attempts == 1 and runner.stats.dead_lettered == 0
    assert [m for m in accepted if m.startswith("g1")] == ["g1-0", "g1-1", "g1-2"]
    assert [m for m in accepted if m.startswith("g2")] == ["g2-0", "g2-1", "g2-2"]
    assert tries["g1-0"] == 2


IN_PLACE = RetryPolicy(
    max_attempts=3, backoff="fixed", initial_delay_ms=50, jitter=0, delay_levels_ms=(100,)
)


@pytest.mark.parametrize("retry", [IN_PLACE, FAST], ids=["in-place", "through-a-level"])
async def test_each_message_an_answer_names_failed_counts_as_retried_with_its_attempt(
    world: World, retry: RetryPolicy
) -> None:
    """Issue 40: two messages named failed are two retries, and each resend carries its own
    attempt (2) in ``X-Attempt`` and in its entry, whether it is retried in place or comes
    back through a delay level in a batch of its own."""
    world.hook.behaviour = lambda mid, n: (200, {})
    seen: dict[str, int] = {}

    def answer(path: str, body: bytes) -> bytes:  # b1 and b3 fail their first attempt
        ids = [m["id"] for m in json.loads(body)]
        for mid in ids:
            seen[mid] = seen.get(mid, 0) + 1
        return json.dumps(
            {"failed": [m for m in ids if m in ("b1", "b3") and seen[m] == 1]}
        ).encode()

    world.hook.answer = answer
    sub = await subscribe(world, batch=BatchPolicy(max_messages=50, max_wait_ms=100), retry=retry)
    for i in range(6):
        await produce(world, f"b{i}", None)
    async with quick_running(world, sub) as runner:
        await until(lambda: runner.stats.delivered == 6, 20, "all six")
        assert (runner.stats.retried, runner.stats.failed_attempts) == (2, 2)
    resends = [r for r in world.hook.on("") if "b0" not in ids_of(json.loads(r.body))]
    entries = [m for r in resends for m in json.loads(r.body)]
    assert sorted((m["id"], m["attempt"]) for m in entries) == [("b1", 2), ("b3", 2)]
    assert [r.headers["X-Attempt"] for r in resends] == ["2"] * len(resends)
