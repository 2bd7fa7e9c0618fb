"""The poison-message scenario, on any world (embedded in the unit tests, Kafka in the
integration suite): a real :class:`~delivery_workers.worker.Worker` delivers a topic on which
one message makes the worker fail, either

- ``"sender"``: the production sender raises on it (an unforeseen bug in preparing, signing
  or sending one message), or
- ``"runner"``: the runner itself raises while reading it (as the latin-1 ``Content-Type``
  once made it do), so the runner crashes and restarts at the same position, or
- ``"attempt"``: the worker raises while preparing its attempt, outside the sender, so the
  runner stops and starts over (before, the message stayed in flight and its group stalled).

Either way the poison message must end in the DLQ and every message behind it must be
delivered within seconds. Grouped: the poison heads group ``bad``, three more of ``bad``
follow it (they follow it into the DLQ, in order: group order is the contract), the rest are
spread over five other groups.

    outcome = await poison_scenario(world, grouped=True, crash="runner", monkeypatch=mp)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pytest

import delivery_workers.attempt
import delivery_workers.intake
from core.envelope import MESSAGE_ID, Envelope
from core.model import RetryPolicy, Subscription
from core.result import DeliveryResult
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import Delivery
from delivery_workers.worker import Worker
from metastore import paths
from segments.protocol import Record, Stored
from segments.subscription import dlq
from segments.subscription.layout import Layout, load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.until import until
from tests.support.world import World, record, subscribe

POISON = "poison"
BEHIND = 50
Crash = Literal["sender", "runner", "attempt"]


class RaisesOnPoison(HttpSender):
    """The production sender, except that it raises on the poison message."""

    async def send(self, delivery: Delivery) -> DeliveryResult:
        if delivery.message_id == POISON:
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")
        return await super().send(delivery)


class PoisonEnvelope(Envelope):
    """The envelope as the runner reads it, except that it cannot read the poison message."""

    @classmethod
    def of(cls, headers: Sequence[tuple[str, bytes]]) -> Envelope:
        if (MESSAGE_ID, POISON.encode()) in headers:
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")
        return Envelope.of(headers)


def poison_delivery(
    subscription: Subscription, topic: str, message: Stored, attempt: int = 1
) -> Delivery:
    """The attempt as the worker builds it, except that it cannot build the poison one's."""
    if (MESSAGE_ID, POISON.encode()) in message.headers:
        raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")
    return Delivery(subscription, topic, message, attempt)


@dataclass
class PoisonOutcome:
    delivered: set[str]  # ids the endpoint answered 2xx for
    dead: list[RetryMeta]  # the DLQ's live entries, in order
    dead_ids: list[str]

    def expected_delivered(self, grouped: bool) -> set[str]:
        rest = {f"m{i}" for i in range(BEHIND)}
        return rest if grouped else rest | {f"bad{i}" for i in range(3)}


def plan(grouped: bool) -> list[Record]:
    """The poison message first, then the rest (see the module doc)."""
    ids = [(POISON, "bad"), *((f"m{i}", f"g{i % 5}") for i in range(BEHIND))]
    ids[10:10] = [(f"bad{i}", "bad") for i in range(3)]
    return [record(mid, group if grouped else None) for mid, group in ids]


async def poison_scenario(
    world: World, *, grouped: bool, crash: Crash, monkeypatch: pytest.MonkeyPatch
) -> PoisonOutcome:
    """Run the scenario on ``world`` (topic ``p/t``, grouped as the world was built)."""
    policy = RetryPolicy(max_attempts=2, initial_delay_ms=10, max_delay_ms=50, jitter=0)
    sub = await subscribe(world, "s", retry=policy)
    for one in plan(grouped):
        await world.store.produce(world.storage, one)
    if crash == "runner":
        monkeypatch.setattr(delivery_workers.intake, "Envelope", PoisonEnvelope)
    if crash == "attempt":
        monkeypatch.setattr(delivery_workers.attempt, "Delivery", poison_delivery)
    sender = RaisesOnPoison() if crash == "sender" else HttpSender()
    options = {"commit_every_s": 0.1, "lock_retry_s": 0.1, "error_retry_s": 0.1}
    async with sender, Worker(world.meta, world.stores, sender, "w1", **options):  # type: ignore[arg-type]
        await world.meta.create(paths.assignment("w1"), json.dumps(["p/s"]).encode())
        await until(lambda: len(_delivered(world)) >= BEHIND, 20, "the messages behind it")
        layout = await until(lambda: load_layout(world.catalog.store, sub), 5, "the layout")
        expected = 4 if grouped else 1  # its group follows it
        dead = await until(lambda: _dead(world, layout, expected), 20, "the DLQ entries")
    metas = [RetryMeta.of(m.headers) for m in dead.live()]
    ids = [_message_id(m.headers) for m in dead.live()]
    return PoisonOutcome(_delivered(world), metas, ids)


def _delivered(world: World) -> set[str]:
    return {r.id for r in world.hook.requests if 200 <= r.status < 300}


async def _dead(world: World, layout: Layout, count: int = 1) -> dlq.DlqView | None:
    view = await dlq.scan(world.store, layout)
    return view if len(view.live()) >= count else None


def _message_id(headers: Sequence[tuple[str, bytes]]) -> str:
    return next(v.decode() for k, v in headers if k == MESSAGE_ID)
