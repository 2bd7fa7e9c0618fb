"""The endpoint double: one local webhook endpoint (aiohttp, in the test's event loop) that
records what it gets and answers as the test says.

    async with serve_hook() as hook:
        sub = Subscription(..., endpoint=Endpoint(url=hook.url_for("s1")))
        hook.behaviour = lambda mid, n: (503, {"Retry-After": "0"}) if n < 3 else (204, {})
        ...
        assert hook.delivered() == ["m-0", "m-1"]

It serves ``POST /hook`` and ``POST /hook/{path}`` (a path per subscription when several
share it). ``behaviour(message id, attempt seen here)`` gives the answer's status and
headers; ``delay(path)`` the seconds to wait before answering; ``answer(path, body)`` the
body of the answer; the paths in ``down`` answer 503 (an outage); while ``open`` is cleared
every request waits, then is answered 503 once it is set again (a held endpoint); requests
on the paths in ``held`` wait until ``released`` is set, then are answered as usual (a slow
endpoint, released on exit); with ``secret`` set it counts requests whose Standard Webhooks
signature does not verify.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiohttp import web

from core.signing import verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Answer (status, headers) for (message id, attempt number as seen by the endpoint).
Behaviour = Callable[[str, int], tuple[int, dict[str, str]]]


def always_204(mid: str, attempt: int) -> tuple[int, dict[str, str]]:
    return 204, {}


def no_delay(path: str) -> float:
    return 0.0


def no_body(path: str, request_body: bytes) -> bytes:
    return b""


class Delivered(NamedTuple):
    """A request the endpoint answered with a 2xx."""

    group: str
    id: str
    at: float  # time.time() when it arrived
    attempt: int  # its X-Attempt


@dataclass
class Request:
    """Every request the endpoint got, whatever it answered."""

    at: float  # time.time() when it arrived
    path: str  # "" for /hook, else the part after /hook/
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    status: int
    peer: int = 0  # the client's port: which process sent it (tests.support.peers)
    conn: int = 0  # the connection it came on (1, 2, …): one client process per connection
    sender: str = ""  # who sent it, by ``Hook.identify`` (asked once per connection)
    host: str = ""  # the client's address (a worker in a network namespace has its own)
    done: float = 0.0  # time.time() when it was answered (0: not yet)

    @property
    def id(self) -> str:
        return self.headers["X-Message-Id"]

    def signed_json(self, secret: str) -> Any:
        """The body as JSON, once its signature checks with ``secret`` (Standard Webhooks)."""
        assert verify(secret, dict(self.headers), self.body), f"bad signature on {self.path}"
        return json.loads(self.body)


@dataclass
class Hook:
    url: str = ""
    behaviour: Behaviour = always_204
    delay: Callable[[str], float] = no_delay
    answer: Callable[[str, bytes], bytes] = no_body  # (path, request body) → answer's body
    secret: str = ""
    down: set[str] = field(default_factory=set)
    open: asyncio.Event = field(default_factory=asyncio.Event)
    held: set[str] = field(default_factory=set)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    got: list[Delivered] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    tries: dict[str, list[float]] = field(default_factory=dict)  # id → arrival times
    bad_signatures: int = 0
    concurrent: int = 0
    max_concurrent: int = 0
    _conns: weakref.WeakKeyDictionary[object, int] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    _serial: int = 0
    # Asked once per connection, at its first request while it is surely open: who holds
    # the client end of the connection from this port (tests.support.peers).
    identify: Callable[[int], str] | None = None
    _senders: dict[int, str] = field(default_factory=dict)

    def _conn_of(self, transport: object) -> int:
        """The connection's serial, numbered in order of first request (never reused)."""
        if transport not in self._conns:
            self._conns[transport] = self._serial = self._serial + 1
        return self._conns[transport]

    def url_for(self, path: str) -> str:
        return f"{self.url}/{path}"

    def delivered(self) -> list[str]:
        return [d.id for d in self.got]

    def of_group(self, group: str) -> list[str]:
        return [d.id for d in self.got if d.group == group]

    def arrival(self, mid: str) -> float:
        return next(d.at for d in self.got if d.id == mid)

    def on(self, path: str) -> list[Request]:
        """The requests on ``path`` answered with a 2xx, in arrival order."""
        return [r for r in self.requests if r.path == path and 200 <= r.status < 300]

    def ids(self, path: str) -> list[str]:
        return [r.id for r in self.on(path)]

    async def _handle(self, request: web.Request) -> web.Response:
        if not self.open.is_set():
            await self.open.wait()
            return web.Response(status=503)
        at, body = time.time(), await request.read()
        path = request.match_info.get("path", "")
        if path in self.held:
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
            try:
                await self.released.wait()
            finally:
                self.concurrent -= 1
        if self.secret and not verify(self.secret, dict(request.headers), body):
            self.bad_signatures += 1
        mid = request.headers.get("X-Message-Id", "")
        self.tries.setdefault(mid, []).append(at)
        status, headers = self.behaviour(mid, len(self.tries[mid]))
        if path in self.down:
            status, headers = 503, {}
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            transport = request.transport
            peer = transport.get_extra_info("peername") if transport else None
            port = int(peer[1]) if peer else 0
            host = str(peer[0]) if peer else ""
            conn = self._conn_of(transport) if transport else 0
            if self.identify is not None and conn not in self._senders:
                self._senders[conn] = self.identify(port)
            headers_copy = request.headers.copy()
            sender = self._senders.get(conn, "")
            req = Request(at, path, headers_copy, body, status, port, conn, sender, host)
            self.requests.append(req)
            if 200 <= status < 300:
                group = request.headers.get("X-Group-Id", "")
                attempt = int(request.headers.get("X-Attempt", "0"))
                self.got.append(Delivered(group, mid, at, attempt))
            wait = self.delay(path)
            if wait:
                await asyncio.sleep(wait)
            req.done = time.time()
        finally:
            self.concurrent -= 1
        return web.Response(status=status, headers=headers, body=self.answer(path, body) or None)


@asynccontextmanager
async def serve_hook(**options: object) -> AsyncIterator[Hook]:
    """A :class:`Hook` (``options`` are its fields) served on a free port until exit."""
    hook = Hook(**options)  # type: ignore[arg-type]
    hook.open.set()
    app = web.Application()
    app.router.add_post("/hook", hook._handle)
    app.router.add_post("/hook/{path}", hook._handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        hook.open.set()
        hook.released.set()
        await runner.cleanup()


def inversions(delivered: list[Request]) -> list[str]:
    """Per group (``X-Group-Id``), the message ids whose first delivery came after a later
    message's first: an order broken (ids sort in publish order)."""
    firsts: dict[str, list[str]] = {}
    seen: set[str] = set()
    for r in delivered:
        if r.id not in seen:
            seen.add(r.id)
            firsts.setdefault(r.headers.get("X-Group-Id", ""), []).append(r.id)
    return [f"{g}: {ids}" for g, ids in firsts.items() if ids != sorted(ids)]
