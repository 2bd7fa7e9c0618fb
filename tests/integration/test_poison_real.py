"""The poison scenario (tests/support/poison.py) on real ZooKeeper and Kafka and Pulsar: one
message the worker cannot handle (the sender raises on it, or the runner fails on it again
and again) goes to the DLQ, and every message behind it is delivered within seconds, grouped
and not. The same scenario runs on the embedded backend in the unit tests."""

from __future__ import annotations

import pytest

from tests.support.poison import POISON, Crash, poison_scenario
from tests.support.services import RealServices
from tests.support.world import BACKENDS, real_world


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "ungrouped"])
@pytest.mark.parametrize("crash", ["sender", "runner"])
async def test_a_poison_message_goes_to_the_dlq_and_the_rest_is_delivered(
    kind: str,
    real_services: RealServices,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
    crash: Crash,
    grouped: bool,
) -> None:
    async with real_world(kind, real_services, unique, partitions=3, grouped=grouped) as world:
        outcome = await poison_scenario(
            world, grouped=grouped, crash=crash, monkeypatch=monkeypatch
        )
    assert outcome.delivered == outcome.expected_delivered(grouped)
    assert outcome.dead_ids == ([POISON, "bad0", "bad1", "bad2"] if grouped else [POISON])
    assert "UnicodeDecodeError" in (outcome.dead[0].last_error or "")
