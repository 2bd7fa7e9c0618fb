"""The producer's HTTP protocol: produce requests served straight from the parser.

uvicorn serves every request through an ASGI cycle: a scope, a cycle object, an event per
request, the app's ``receive`` and two ``send`` messages whose headers are checked and
re-encoded. For ``POST .../produce`` and ``.../produce/batch`` that is a fifth of the
producer's CPU per message (``bench/produce.py --py-spy``). :class:`ProduceFront` is
:class:`core.http_server.GuardedHttpToolsProtocol` (so every limit on clients holds: header
size and time, body time, one ``Host``) that, for those two routes, runs the same handlers
as :class:`producer_api.fastpath.ProducerASGI` (:func:`produce_one`, :func:`produce_many`)
on a :class:`ProduceCycle` of its own and writes the answer in one piece. Any other request,
and a produce request it does not take (a query string, an escaped path, a concurrency
limit), goes through uvicorn's cycle to the ASGI app, which answers it the same way.

Made per set of limits by :func:`produce_front`, for uvicorn's ``http`` option.
"""

from __future__ import annotations

import asyncio
import logging
import re
from http import HTTPStatus
from typing import Any

from core.http_server import GuardedHttpToolsProtocol, HttpServerLimits

from .fastpath import ProducerASGI, Receive, produce_many, produce_one
from .service import Service

log = logging.getLogger(__name__)

# Names of printable ASCII without an escape or a query: anything else takes the ASGI path.
_ROUTE = re.compile(rb"/v1/projects/([!-$&-.0->@-~]+)/topics/([!-$&-.0->@-~]+)/produce(/batch)?")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # uvicorn refuses these in a header value
_STATUS = {
    s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus if s.value >= 200
}
_JSON_HEAD = b"content-type: application/json\r\ncontent-length: "
_CLOSE = b"connection: close\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_FAILED = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


def response(
    status: int,
    headers: dict[str, str],
    body: bytes,
    keep_alive: bool,
    defaults: list[tuple[bytes, bytes]],
) -> bytes:
    """A whole JSON response: status line, uvicorn's ``defaults`` (``date``, ``server``),
    ``headers`` and the body."""
    head = [_STATUS[status]]
    for default, given in defaults:
        head += [default, b": ", given, b"\r\n"]
    head += [_JSON_HEAD, str(len(body)).encode(), b"\r\n"]
    for name, value in headers.items():
        raw = value.encode("latin-1")
        if _BAD_VALUE.search(raw):
            raise ValueError(f"the value of response header {name} has a control character")
        head += [name.lower().encode("latin-1"), b": ", raw, b"\r\n"]
    if not keep_alive:
        head.append(_CLOSE)
    head += [b"\r\n", body]
    return b"".join(head)


class ProduceCycle:
    """One produce request on a :class:`ProduceFront` connection: the attributes uvicorn's
    protocol reads and writes on its cycle (``body``, ``more_body``, ``message_event``,
    ``response_started``, ``response_complete``, ``disconnected``, ``keep_alive``), the body
    as the handler's ``receive``, and the answer written in one piece."""

    __slots__ = (
        "body",
        "disconnected",
        "keep_alive",
        "message_event",
        "more_body",
        "response_complete",
        "response_started",
        "_batch",
        "_headers",
        "_project",
        "_front",
        "_topic",
        "_continue",
    )

    def __init__(
        self, front: ProduceFront, match: re.Match[bytes], keep_alive: bool, expect: bool
    ) -> None:
        self.body = bytearray()
        self.more_body = True
        self.message_event = asyncio.Event()
        self.response_started = False
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        self._front = front
        self._project = match[1].decode("ascii")
        self._topic = match[2].decode("ascii")
        self._batch = match[3] is not None
        self._headers = front.headers
        self._continue = expect

    async def run(self, service: Service) -> None:
        handler = produce_many if self._batch else produce_one
        receive: Receive = self.receive
        try:
            status, headers, body = await handler(
                service, self._project, self._topic, self._headers, receive
            )
            defaults = self._front.server_state.default_headers
            answer = response(status, headers, body, self.keep_alive, defaults)
        except Exception:
            log.exception("produce to %s/%s failed", self._project, self._topic)
            self.keep_alive = False
            answer = _FAILED
        await self._answer(answer)

    async def receive(self) -> dict[str, Any]:
        """The body as ASGI ``http.request`` messages, or ``http.disconnect``."""
        front = self._front
        if self._continue and not front.transport.is_closing():
            front.write_now(_CONTINUE)
            self._continue = False
        front.flow.resume_reading()  # paused once the body passed uvicorn's high-water mark
        while not self.body and self.more_body and not self.disconnected:
            self.message_event.clear()
            await self.message_event.wait()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = bytes(self.body), bytearray()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def _answer(self, answer: bytes) -> None:
        front = self._front
        if front.flow.write_paused and not self.disconnected:
            await front.flow.drain()
        if self.disconnected:  # gone, or refused by a limit meanwhile: the answer goes nowhere
            return
        self.response_started = self.response_complete = True
        front.write_now(answer)
        if not self.keep_alive:
            front.transport.close()
        front.on_response_complete()


class ProduceFront(GuardedHttpToolsProtocol):
    """See the module doc; made per set of limits by :func:`produce_front`."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        app = config.app
        self._producer: ProducerASGI | None = app if isinstance(app, ProducerASGI) else None

    def serve_request(self) -> None:
        cycle = self._produce_cycle()
        if cycle is None:
            super().serve_request()
            return
        existing, self.cycle = self.cycle, cycle  # type: ignore[assignment]
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, None)
        else:  # pipelined behind a request still being answered
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, None))  # type: ignore[arg-type]

    def _produce_cycle(self) -> ProduceCycle | None:
        if (
            self._producer is None
            or self.limit_concurrency is not None
            or self.parser.get_method() != b"POST"
        ):
            return None
        match = _ROUTE.fullmatch(self.url)
        if match is None:
            return None
        version = self.parser.get_http_version()
        keep_alive = version != "1.0" and self.parser.should_keep_alive()
        return ProduceCycle(self, match, keep_alive, self.expect_100_continue)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if not isinstance(cycle, ProduceCycle):
            super()._start_asgi_task(cycle, app)
            return
        assert self._producer is not None
        service: Service = self._producer.app.state.service
        task = self.loop.create_task(cycle.run(service))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)


def produce_front(limits: HttpServerLimits) -> type[ProduceFront]:
    """A protocol class for uvicorn's ``http`` option: :class:`ProduceFront` with ``limits``."""
    return type("ProduceFront", (ProduceFront,), {"limits": limits})
