"""The poison scenario (tests/support/poison.py) through a real Worker on the embedded
backend: a message the sender raises on, and one the runner itself fails on again and again
while reading it or preparing its attempt (dead-lettered after three crashes in a row at its
position), grouped and not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.poison import POISON, Crash, poison_scenario
from tests.support.world import embedded_world


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "ungrouped"])
@pytest.mark.parametrize("crash", ["sender", "runner", "attempt"])
async def test_a_poison_message_goes_to_the_dlq_and_the_rest_is_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: Crash, grouped: bool
) -> None:
    async with embedded_world(tmp_path, partitions=3, grouped=grouped) as world:
        outcome = await poison_scenario(
            world, grouped=grouped, crash=crash, monkeypatch=monkeypatch
        )
    assert outcome.delivered == outcome.expected_delivered(grouped)
    assert outcome.dead_ids == ([POISON, "bad0", "bad1", "bad2"] if grouped else [POISON])
    reason = outcome.dead[0].last_error or ""
    assert "UnicodeDecodeError" in reason
    if crash != "sender":  # the runner failed: it starts over, three times
        assert "failed on this message 3 times in a row" in reason
