"""The commit client is replaced after commits in a row got no answer (``segments.kafka.commits``:
after a broker restart an AdminClient took commits and never answered one). No broker here:
creating an AdminClient contacts none, and the commit call itself is replaced."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace
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

    def send_commit(admin: Any, *_: Any) -> concurrent.futures.Future[Any]:
        seen.append(admin)
        return _pending() if admin is seen[0] else _answered()  # the first: never answered

    monkeypatch.setattr(commits, "send_commit", send_commit)
    return seen


def _pending() -> concurrent.futures.Future[Any]:
    return concurrent.futures.Future()


def _answered() -> concurrent.futures.Future[Any]:
    sent: concurrent.futures.Future[Any] = concurrent.futures.Future()
    sent.set_result(SimpleNamespace(topic_partitions=[]))
    return sent


async def test_unanswered_commits_replace_the_client_and_the_next_one_answers(
    calls: list[Any],
) -> None:
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    for i in range(REPLACE_AFTER):
        with pytest.raises(StorageUnavailable, match="no answer"):
            await client.commit(f"g{i}", "t", {0: 5}, timeout=0.05)
    assert client.replaced == 1
    await client.commit("other", "t", {0: 6}, timeout=0.05)
    assert calls[-1] is not calls[0]
    # g0's request is still under way on the replaced client: g0 waits for it (until that
    # client is let go, which fails it), and its waiting does not count against the new one.
    with pytest.raises(StorageUnavailable, match="replaced client"):
        await client.commit("g0", "t", {0: 6}, timeout=0.05)
    assert client.replaced == 1


async def test_a_group_left_on_a_replaced_client_commits_once_that_client_is_let_go(
    calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replaced client never answers; once it is let go, the groups whose requests it held
    send anew through the new client instead of waiting on it for good."""
    monkeypatch.setattr(commits, "RETIRED_FOR_S", 0.0)
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    for i in range(REPLACE_AFTER):
        with pytest.raises(StorageUnavailable, match="no answer"):
            await client.commit(f"g{i}", "t", {0: 5}, timeout=0.05)
    assert client.replaced == 1
    await client.commit("g0", "t", {0: 6}, timeout=0.05)
    assert calls[-1] is not calls[0] and client.under_way == 0


async def test_an_answer_between_unanswered_commits_keeps_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = [False, True, False]
    seen: list[Any] = []

    def send_commit(admin: Any, *_: Any) -> concurrent.futures.Future[Any]:
        seen.append(admin)
        return _answered() if answer[len(seen) - 1] else _pending()

    monkeypatch.setattr(commits, "send_commit", send_commit)
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    for i, answered in enumerate(answer):
        if answered:
            await client.commit(f"g{i}", "t", {0: 1}, timeout=0.05)
        else:
            with pytest.raises(StorageUnavailable):
                await client.commit(f"g{i}", "t", {0: 1}, timeout=0.05)
    assert client.replaced == 0 and len({id(a) for a in seen}) == 1


async def test_a_group_never_has_two_requests_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit waits for its group's unanswered request instead of sending another (the
    requests a client holds stay bounded by its groups however long the outage), and sends
    once that one is answered; other groups are not held up."""
    sent: list[concurrent.futures.Future[Any]] = []

    def send_commit(admin: Any, group: str, *_: Any) -> concurrent.futures.Future[Any]:
        sent.append(_pending() if group == "slow" and not sent else _answered())
        return sent[-1]

    monkeypatch.setattr(commits, "send_commit", send_commit)
    client = CommitClient(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    with pytest.raises(StorageUnavailable, match="no answer"):
        await client.commit("slow", "t", {0: 1}, timeout=0.05)
    with pytest.raises(StorageUnavailable, match="previous commit"):
        await client.commit("slow", "t", {0: 2}, timeout=0.05)
    assert len(sent) == 1 and client.under_way == 1
    await client.commit("other", "t", {0: 2}, timeout=0.05)
    sent[0].set_result(SimpleNamespace(topic_partitions=[]))
    await client.commit("slow", "t", {0: 3}, timeout=0.5)
    assert len(sent) == 3 and client.under_way == 0
