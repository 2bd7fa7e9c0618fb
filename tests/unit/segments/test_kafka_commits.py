"""The commit client is replaced after commits in a row got no answer (``segments.kafka.commits``:
after a broker restart an AdminClient took commits and never answered one). No broker here:
creating an AdminClient contacts none, and the commit call itself is replaced."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import StorageUnavailable
from segments.kafka import commits
from segments.kafka.commits import REPLACE_AFTER, CommitClient
from segments.kafka.config import KafkaSettings


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The admin client of each commit; the first client never answers, later ones do."""
    seen: list[Any] = []

    async def commit_offsets(admin: Any, *_: Any) -> None:
        seen.append(admin)
        if admin is seen[0]:
            await asyncio.Event().wait()  # a request the broker never answers

    monkeypatch.setattr(commits, "commit_offsets", commit_offsets)
    return seen


async def test_unanswered_commits_replace_the_client_and_the_next_one_answers(
    calls: list[Any],
) -> None:
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    for _ in range(REPLACE_AFTER):
        with pytest.raises(StorageUnavailable, match="no answer"):
            await client.commit("g", "t", {0: 5}, timeout=0.05)
    assert client.replaced == 1
    await client.commit("g", "t", {0: 6}, timeout=0.05)
    assert calls[-1] is not calls[0]


async def test_an_answer_between_unanswered_commits_keeps_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = [False, True, False]
    seen: list[Any] = []

    async def commit_offsets(admin: Any, *_: Any) -> None:
        seen.append(admin)
        if not answer[len(seen) - 1]:
            await asyncio.Event().wait()

    monkeypatch.setattr(commits, "commit_offsets", commit_offsets)
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    for answered in answer:
        if answered:
            await client.commit("g", "t", {0: 1}, timeout=0.05)
        else:
            with pytest.raises(StorageUnavailable):
                await client.commit("g", "t", {0: 1}, timeout=0.05)
    assert client.replaced == 0 and len({id(a) for a in seen}) == 1
