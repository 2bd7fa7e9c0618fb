"""docs/receiving.md's receiver example, taken from the page and run as written, verifies real
deliveries: a worker on the embedded backend pushes to it over HTTP, before, during and after
a signing-secret rotation. During the overlap a receiver holding either secret accepts every
delivery; after it, only one holding the new secret does. A duplicate is answered 2xx and not
handled twice. If the page's example changes, this test runs the new one."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.model import RetryPolicy
from tests.support.contract_api import served
from tests.support.hook import SECRET
from tests.support.until import until
from tests.support.workers import WorkersWorld, workers_world_fixture
from tests.support.world import subscription

__all__ = ["workers_world_fixture"]

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "receiving.md"
MARK = "<!-- receiver example: tested -->"
NEW = "whsec_" + "QkJC" * 8
OVERLAP_S = 5
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def example() -> str:
    """The Python block right after the page's mark."""
    after = GUIDE.read_text().split(MARK, 1)[1]
    assert after.lstrip().startswith("```python\n"), "the mark must precede the example"
    return after.split("```python\n", 1)[1].split("\n```", 1)[0]


@dataclass
class Receiver:
    """One run of the example, configured with one secret, and what it handled."""

    namespace: dict[str, Any]
    handled: list[str]

    @property
    def app(self) -> Any:
        return self.namespace["app"]

    async def answer(self, request: Seen) -> int:
        """Its answer to a request as it arrived at another receiver (replayed in-process)."""
        names = ("content-type", "webhook-id", "webhook-timestamp", "webhook-signature")
        headers = {k: v for k, v in request.headers.items() if k in names}
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as client:
            r = await client.post("/hook", content=request.body, headers=headers)
        return r.status_code


def receiver(secret: str, monkeypatch: pytest.MonkeyPatch) -> Receiver:
    monkeypatch.setenv("HTTPBUS_SIGNING_SECRET", secret)
    namespace: dict[str, Any] = {"__name__": "receiver_example"}
    exec(compile(example(), str(GUIDE), "exec"), namespace)
    handled: list[str] = []
    # The example's placeholder for "your work", looked up when a request comes.
    namespace["handle"] = lambda message_id, headers, body: handled.append(message_id)
    return Receiver(namespace, handled)


@dataclass
class Seen:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def id(self) -> str:
        return self.headers["x-message-id"]


class Recorded:
    """An ASGI app in front of another: every request and the status it was answered."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[Seen] = []

    def of(self, mid: str) -> Seen | None:
        return next((s for s in self.seen if s.id == mid), None)

    async def __call__(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        status: list[int] = []

        async def reading() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        await self.app(scope, reading, sending)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen.append(Seen(headers, b"".join(chunks), status[0]))


async def test_the_guide_example_verifies_real_deliveries_through_a_rotation(
    world: WorkersWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = receiver(SECRET, monkeypatch), receiver(NEW, monkeypatch)
    live = Recorded(old.app)  # the endpoint the worker pushes to holds the old secret
    with served(live) as base:
        once = RetryPolicy(max_attempts=1)  # what the old receiver refuses goes to the DLQ
        await world.catalog.create_subscription(subscription("s", f"{base}/hook", retry=once))
        worker = await world.worker("w1")

        async def delivered(prefix: str, count: int) -> list[Seen]:
            ids = await world.produce(prefix, count)
            seen = await until(
                lambda: all(live.of(m) for m in ids) and [live.of(m) for m in ids],
                what=f"{prefix} delivered",
            )
            return [s for s in seen if s is not None]

        for request in await delivered("before", 3):
            assert request.status == 204
            assert await new.answer(request) == 401
            assert len(request.headers["webhook-signature"].split()) == 1
        assert sorted(old.handled) == ["before-0", "before-1", "before-2"]
        duplicate = live.seen[0]
        assert await old.answer(duplicate) == 204  # already handled: not handled again
        assert len(old.handled) == 3

        ends = await world.rotate_secret(worker, "s", NEW, OVERLAP_S)
        for request in await delivered("during", 3):
            assert int(request.headers["webhook-timestamp"]) < ends, "sent after the overlap"
            assert len(request.headers["webhook-signature"].split()) == 2
            assert request.status == 204  # the receiver on the old secret
            assert await new.answer(request) == 204  # and one on the new secret

        await until(lambda: time.time() > ends + 1, OVERLAP_S + 5, "the overlap's end")
        for request in await delivered("after", 2):
            assert request.status == 401  # the old secret signs no more
            assert await new.answer(request) == 204
        assert not [m for m in old.handled if m.startswith("after")]
