"""Idempotent publish on a topic with ``dedupe_window``: a repeated X-Message-Id is
answered 200 with the original's place and ``"duplicate": true`` and stores nothing."""

from __future__ import annotations

from pathlib import Path

from tests.support.producer import produce_url, producer_env


async def test_a_repeated_id_is_answered_with_the_original_and_stored_once(
    tmp_path: Path,
) -> None:
    async with producer_env(tmp_path, {"d": {"dedupe_window": "10m"}, "plain": {}}) as env:
        first = await env.client.post(
            produce_url("d"), content=b"a", headers={"X-Message-Id": "m1"}
        )
        again = await env.client.post(
            produce_url("d"), content=b"b", headers={"X-Message-Id": "m1"}
        )
        assert first.status_code == 201 and "duplicate" not in first.json()
        assert again.status_code == 200
        assert again.json() == {**first.json(), "duplicate": True}
        assert again.headers["X-Message-Id"] == "m1"
        assert [s.value for s in await env.stored("d")] == [b"a"]
        metrics = (await env.client.get("/metrics")).text
        assert 'httpbus_produce_duplicates_total{project="shop",topic="d"} 1.0' in metrics
        # no window: every publish is stored
        for _ in range(2):
            r = await env.client.post(
                produce_url("plain"), content=b"x", headers={"X-Message-Id": "m1"}
            )
            assert r.status_code == 201
        assert len(await env.stored("plain")) == 2


async def test_a_batch_reports_duplicates_per_message(tmp_path: Path) -> None:
    async with producer_env(tmp_path, {"d": {"dedupe_window": "1h"}}) as env:
        await env.client.post(produce_url("d"), content=b"a", headers={"X-Message-Id": "old"})
        batch = {
            "messages": [
                {"payload": "1", "headers": {"X-Message-Id": "old"}},
                {"payload": "2", "headers": {"X-Message-Id": "new"}},
                {"payload": "3", "headers": {"X-Message-Id": "new"}},
                {"payload": "4"},
            ]
        }
        r = await env.client.post(produce_url("d") + "/batch", json=batch)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["accepted"] == 4 and body["failed"] == 0 and body["duplicates"] == 2
        results = body["results"]
        assert [x["status"] for x in results] == [200, 201, 200, 201]
        assert [x.get("duplicate", False) for x in results] == [True, False, True, False]
        assert results[2]["position"] == results[1]["position"]
        assert sorted(s.value for s in await env.stored("d")) == [b"2", b"4", b"a"]
        again = await env.client.post(produce_url("d") + "/batch", json=batch)
        assert again.status_code == 200 and again.json()["duplicates"] == 3  # all but "4"
        every = {"messages": [{"payload": "5", "headers": {"X-Message-Id": "new"}}] * 2}
        both = (await env.client.post(produce_url("d") + "/batch", json=every)).json()
        assert [x["duplicate"] for x in both["results"]] == [True, True]
        assert both["results"][0]["position"] == results[1]["position"]
        assert len(await env.stored("d")) == 4


async def test_a_topic_refuses_a_window_beyond_a_day() -> None:
    from pydantic import ValidationError

    from core.model import Topic

    try:
        Topic(project="shop", name="t", dedupe_window="25h")
    except ValidationError as exc:
        assert "between 1s and 1d" in str(exc)
    else:
        raise AssertionError("a 25 h window was taken")


async def test_a_topic_made_again_starts_with_no_ids(tmp_path: Path) -> None:
    from core.model import Topic
    from tests.support.until import until
    from tests.support.world import segment

    async with producer_env(tmp_path, {"d": {"dedupe_window": "10m"}}) as env:
        first = await env.client.post(produce_url("d"), content=b"a", headers={"X-Message-Id": "m"})
        assert first.status_code == 201
        old = await env.catalog.get_topic("shop", "d")
        await env.catalog.delete_topic("shop", "d")
        # the same name and window, made anew (its ids are the old topic's, kept per creation)
        seg = segment("embedded", storage="st.d", partitions=2)
        await env.catalog.create_topic(Topic(project="shop", name="d", dedupe_window="10m"), seg)
        assert (await env.catalog.get_topic("shop", "d")).created_at != old.created_at

        async def stored_anew() -> bool:
            r = await env.client.post(produce_url("d"), content=b"b", headers={"X-Message-Id": "m"})
            return r.status_code == 201

        await until(stored_anew, 10, "the id stored again on the new topic")
