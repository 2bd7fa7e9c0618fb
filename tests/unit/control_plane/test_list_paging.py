"""The list routes of projects, topics and subscriptions page by cursor and search on the
server (control_plane.services.listing), through the app on the embedded metastore."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from control_plane.services.listing import SEARCH_CHUNK, ListQuery, SearchTexts, page_of
from core.model import Endpoint, Project, Subscription, Topic
from metastore.catalog import Catalog
from tests.support.control_plane import ControlPlane, embedded_control_plane, json_of
from tests.support.until import until
from tests.support.world import segment

TOPICS = "/v1/projects/shop/topics"
SUBS = "/v1/projects/shop/subscriptions"
SECRET = "whsec_" + "A" * 32


async def add_topic(catalog: Catalog, name: str, description: str = "") -> None:
    """Metadata only (the list reads no storage)."""
    await catalog.create_topic(
        Topic(project="shop", name=name, description=description),
        segment("embedded", storage=f"paging.{name}", partitions=1),
    )


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path) as built:
        await built.catalog.create_project(Project(name="shop", description="the web shop"))
        for i in range(23):
            described = "refunds of the Billing team" if i == 7 else f"topic number {i}"
            await add_topic(built.catalog, f"t{i:02d}", described)
        yield built


async def get(cp: ControlPlane, url: str, **params: Any) -> dict[str, Any]:
    return json_of(await cp.client.get(url, params=params))


def names(page: dict[str, Any]) -> list[str]:
    return [item["name"] for item in page["items"]]


async def walk(cp: ControlPlane, url: str, **params: Any) -> list[str]:
    """Every name the cursors lead to, page after page."""
    seen: list[str] = []
    page = await get(cp, url, **params)
    while True:
        seen += names(page)
        if page["next_cursor"] is None:
            return seen
        page = await get(cp, url, **params, cursor=page["next_cursor"])


async def test_first_middle_and_last_page_by_cursor_and_back(cp: ControlPlane) -> None:
    first = await get(cp, TOPICS, limit=10)
    assert names(first) == [f"t{i:02d}" for i in range(10)]
    assert (first["total"], first["offset"], first["prev_cursor"]) == (23, 0, None)
    middle = await get(cp, TOPICS, limit=10, cursor=first["next_cursor"])
    assert names(middle) == [f"t{i:02d}" for i in range(10, 20)]
    assert middle["offset"] == 10 and middle["prev_cursor"]
    last = await get(cp, TOPICS, limit=10, cursor=middle["next_cursor"])
    assert names(last) == ["t20", "t21", "t22"] and last["next_cursor"] is None
    # each item is the whole topic, with its timeline
    assert [s["id"] for s in last["items"][0]["segments"]] == [1]
    back = await get(cp, TOPICS, limit=10, cursor=last["prev_cursor"])
    assert names(back) == names(middle) and back["next_cursor"]
    back = await get(cp, TOPICS, limit=10, cursor=back["prev_cursor"])
    assert names(back) == names(first) and back["prev_cursor"] is None


async def test_offset_still_pages_for_old_clients_but_not_with_a_cursor(cp: ControlPlane) -> None:
    page = await get(cp, TOPICS, offset=20, limit=10)
    assert names(page) == ["t20", "t21", "t22"] and page["offset"] == 20
    assert page["next_cursor"] is None and page["prev_cursor"]
    first = await get(cp, TOPICS, limit=10)
    r = await cp.client.get(TOPICS, params={"offset": 10, "cursor": first["next_cursor"]})
    assert (r.status_code, r.json()["code"]) == (400, "malformed")
    assert "offset" in r.json()["message"]


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-cursor!",
        base64.urlsafe_b64encode(b"x:t05").decode(),  # not ours: wrong kind
        base64.urlsafe_b64encode(b"a:").decode(),  # no name
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not text
    ],
)
async def test_a_cursor_the_api_did_not_give_is_a_400(cp: ControlPlane, bad: str) -> None:
    for url in (TOPICS, SUBS, "/v1/projects"):
        r = await cp.client.get(url, params={"cursor": bad})
        assert (r.status_code, r.json()["code"]) == (400, "malformed"), (url, r.text)
        assert "start again without one" in r.json()["message"]


async def test_search_by_name_and_description_any_case(cp: ControlPlane) -> None:
    assert names(await get(cp, TOPICS, q="T1")) == [f"t{i}" for i in range(10, 20)]
    assert names(await get(cp, TOPICS, q="billing")) == ["t07"]  # the description
    # searching pages too: 10 hits by 4, every one once
    assert await walk(cp, TOPICS, q="t1", limit=4) == [f"t{i}" for i in range(10, 20)]
    page = await get(cp, TOPICS, q="t1", limit=4)
    assert page["total"] == 23 and page["next_cursor"]


async def test_search_with_no_hit(cp: ControlPlane) -> None:
    page = await get(cp, TOPICS, q="no-such-thing")
    assert (page["items"], page["next_cursor"], page["prev_cursor"]) == ([], None, None)
    assert page["total"] == 23


async def test_creates_between_pages_repeat_or_skip_no_name_listed_before(
    cp: ControlPlane,
) -> None:
    before = [f"t{i:02d}" for i in range(23)]
    page = await get(cp, TOPICS, limit=5)
    seen = names(page)
    # Names sorting before, inside and after what was listed appear meanwhile, and one goes.
    for name in ("a-first", "t02b", "t07b", "t15b", "zz-last"):
        await add_topic(cp.catalog, name)
    await cp.catalog.delete_topic("shop", "t12")
    while page["next_cursor"] is not None:
        page = await get(cp, TOPICS, limit=5, cursor=page["next_cursor"])
        seen += names(page)
    existing = [n for n in before if n != "t12"]
    assert [n for n in seen if n in before] == existing  # each once, in order
    assert len(seen) == len(set(seen))
    assert {"t07b", "t15b", "zz-last"} <= set(seen)  # created after the cursor's place


async def test_subscriptions_page_and_search(cp: ControlPlane) -> None:
    for i in range(7):
        sub = Subscription(
            project="shop",
            name=f"s{i}",
            topic_project="shop",
            topic="t07" if i == 3 else "t01",
            endpoint=Endpoint(url=f"http://127.0.0.1:9/hook{i}"),
            signing_secret=SECRET,
            description="the ledger" if i == 5 else "",
        )
        await cp.catalog.create_subscription(sub)
    assert await walk(cp, SUBS, limit=3) == [f"s{i}" for i in range(7)]
    assert names(await get(cp, SUBS, q="shop/T07")) == ["s3"]  # its topic
    assert names(await get(cp, SUBS, q="LEDGER")) == ["s5"]  # its description
    assert names(await get(cp, SUBS, q="hook6")) == ["s6"]  # its endpoint
    page = await get(cp, SUBS, limit=3)
    assert {"circuit", "dlq", "last_failure"} <= page["items"][0].keys()  # what a row shows


async def test_projects_page_and_search(cp: ControlPlane) -> None:
    for name in ("ads", "billing", "crm"):
        await cp.catalog.create_project(Project(name=name, description=f"{name} team"))
    assert await walk(cp, "/v1/projects", limit=2) == ["ads", "billing", "crm", "shop"]
    assert names(await get(cp, "/v1/projects", q="WEB SHOP")) == ["shop"]
    assert names(await get(cp, "/v1/projects", q="bill")) == ["billing"]
    r = await cp.client.get("/v1/projects/nowhere/topics")
    assert r.status_code == 404


async def test_a_description_changed_through_the_api_is_found_at_once(cp: ControlPlane) -> None:
    assert names(await get(cp, TOPICS, q="ledger")) == []  # its texts are kept now
    topic = await get(cp, f"{TOPICS}/t03")
    body = {"description": "the Ledger", "version": topic["version"]}
    r = await cp.client.put(f"{TOPICS}/t03", json=body)
    assert r.status_code == 200, r.text
    assert names(await get(cp, TOPICS, q="ledger")) == ["t03"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_search_texts_are_kept_a_while_then_read_again_behind_the_answer() -> None:
    stored = {"a": "First", "b": "Second"}
    described: list[str] = []

    async def describe(wanted: list[str]) -> dict[str, str]:
        described.extend(wanted)
        return {n: stored[n] for n in wanted if n in stored}

    clock = Clock()
    texts = SearchTexts(ttl_s=10, clock=clock)
    assert await texts.texts("k", ["a", "b"], describe=describe) == {"a": "first", "b": "second"}
    stored["a"] = "changed elsewhere"
    stored["c"] = "Third"
    found = await texts.texts("k", ["a", "b", "c"], describe=describe)
    assert found == {"a": "first", "b": "second", "c": "third"}  # only the new name is read
    assert described == ["a", "b", "c"]
    clock.now += 11  # stale: answered as kept, read again behind the answer
    assert (await texts.texts("k", ["a", "b", "c"], describe=describe))["a"] == "first"

    async def read_again() -> bool:
        kept = await texts.texts("k", ["a", "b", "c"], describe=describe)
        return kept["a"] != "first"

    await until(read_again, timeout=5, what="the texts read again")
    assert (await texts.texts("k", ["a"], describe=describe))["a"] == "changed elsewhere"
    await texts.aclose()
    uncached = SearchTexts(ttl_s=0)
    described.clear()
    await uncached.texts("k", ["a"], describe=describe)
    await uncached.texts("k", ["a"], describe=describe)
    assert described == ["a", "a"]


async def test_a_search_reads_texts_only_as_far_as_its_page_needs() -> None:
    names = [f"n{i:04d}" for i in range(3_000)]
    asked: list[str] = []

    async def texts(wanted: list[str]) -> dict[str, str]:
        asked.extend(wanted)
        return {n: "x marks it" if n in ("n0005", "n0006", "n0007") else "" for n in wanted}

    async def fetch(name: str) -> str:
        return name

    found = await page_of(names, ListQuery(q="X MARKS", limit=2), fetch, texts)
    assert (found.items, found.total, found.offset) == (["n0005", "n0006"], 3_000, 5)
    assert found.next_cursor and len(asked) == SEARCH_CHUNK  # not the 3 000
    rest = await page_of(names, ListQuery(q="x marks", cursor=found.next_cursor), fetch, texts)
    assert (rest.items, rest.next_cursor) == (["n0007"], None)
    assert rest.prev_cursor  # the page before it holds hits


async def test_a_list_shown_warms_its_search_texts_once() -> None:
    described: list[str] = []

    async def describe(wanted: list[str]) -> dict[str, str]:
        described.extend(wanted)
        return {n: f"text of {n}" for n in wanted}

    texts = SearchTexts(ttl_s=30)
    names = [f"n{i}" for i in range(100)]
    texts.warm("k", names, describe=describe)
    texts.warm("k", names, describe=describe)  # under way: not twice
    await until(lambda: len(described) >= 100, timeout=5, what="the warm-up")
    found = await texts.texts("k", names, describe=describe)
    assert found["n7"] == "text of n7" and sorted(described) == sorted(names)
    texts.warm("k", names, describe=describe)  # kept: nothing more is read
    assert len(described) == 100
    await texts.aclose()


async def test_the_first_page_warms_the_search_of_the_list(cp: ControlPlane) -> None:
    texts: SearchTexts = cp.app.state.search_texts  # type: ignore[union-attr]
    await get(cp, TOPICS, limit=5)

    async def kept() -> bool:
        return len(await texts.texts("topics/shop", [], describe=_never)) == 23

    await until(kept, timeout=10, what="the topics' texts read in the background")
    assert names(await get(cp, TOPICS, q="billing")) == ["t07"]


async def _never(names: list[str]) -> dict[str, str]:
    raise AssertionError(f"{names} should be kept already")
