"""What the HTTP server costs a request, before any work: the guarded protocol of every
service (``core/http_server.py``) with a bare ASGI app, the same protocol with the app's
route answered directly (``core/http_direct.py``, how the producer serves produce), and a raw
uvloop + httptools protocol, the floor of Python HTTP here.

Each server runs in a process of its own and answers every ``POST`` with 201 and ``{}``
after reading the body; wrk loads it (64 connections, 1 KiB bodies by default, a warm-up
first). Per server: requests/s, p99, µs of server CPU a request, and its ratio to the raw
protocol's. Needs no other server. Usage::

    .venv/bin/python bench/http_server.py --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

import _support as s
from _support import LoadSpec, Server

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("raw", "asgi", "direct")
_ANSWER = b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
_HEALTHY = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"


async def _asgi(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    status = 201 if scope["method"] == "POST" else 200
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


class _Direct:
    """The ASGI app, with ``POST`` answered directly."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await _asgi(scope, receive, send)

    def http_direct_route(self, method: bytes, path: bytes) -> Any:
        return self._accept if method == b"POST" else None

    async def _accept(self, headers: Any, receive: Any) -> tuple[int, list[Any], bytes]:
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        return 201, [(b"content-type", b"application/json")], b"{}"


class _Raw:
    """One connection of the raw protocol: httptools callbacks, an answer per request."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def eof_received(self) -> None:
        return None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:  # not HTTP: hang up
            self.transport.close()

    def on_message_complete(self) -> None:
        post = self.parser.get_method() == b"POST"
        self.transport.write(_ANSWER if post else _HEALTHY)


def serve(kind: str, port: int) -> None:
    import uvloop

    if kind == "raw":

        async def main() -> None:
            loop = asyncio.get_running_loop()
            server = await loop.create_server(_Raw, "127.0.0.1", port, backlog=2048)  # type: ignore[arg-type]
            await server.serve_forever()

        uvloop.run(main())
        return
    import uvicorn

    sys.path.insert(0, str(ROOT))
    from core.http_server import HttpServerLimits, uvicorn_options

    app = _Direct() if kind == "direct" else _asgi
    options = uvicorn_options(HttpServerLimits())
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning",
                access_log=False, lifespan="off", **options)  # fmt: skip


def measure(args: argparse.Namespace, workdir: Path) -> list[list[str]]:
    wrk = s.ensure_wrk()
    if wrk is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    found: dict[str, tuple[float, float, float]] = {}
    for kind in args.kinds:
        port = s.free_port()
        argv = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
        with Server(kind, argv, port, workdir / f"{kind}.log") as server:
            spec = LoadSpec(
                url=f"{server.url}/v1/x",
                body=b"x" * args.size,
                headers={"Content-Type": "application/octet-stream"},
                connections=args.connections,
                threads=2,
                seconds=args.warmup,
            )
            s.run_wrk(wrk, spec, workdir)
            load = s.load_average()
            before = server.cpu_seconds()
            result = s.run_wrk(wrk, dataclasses.replace(spec, seconds=args.seconds), workdir)
            cpu = server.cpu_seconds() - before
        per_request = 1e6 * cpu / max(1, result.ok)
        found[kind] = (result.ok / result.seconds, result.p99_ms, per_request)
        print(f"  {kind}: {found[kind][0]:,.0f} req/s, {per_request:.1f} µs (load {load:.2f})")
    floor = found.get("raw", (0.0, 0.0, 0.0))[2]
    return [
        [
            kind,
            s.fmt(rate, 0),
            s.fmt(p99, 2),
            s.fmt(cost, 1),
            f"{cost / floor:.2f}x" if floor else "-",
        ]
        for kind, (rate, p99, cost) in found.items()
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="length of each measured run")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured run before each")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--size", type=int, default=1024, help="request body in bytes")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help="for logs (default: a new temp dir)")
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    workdir = s.bench_workdir(args.workdir, "httpbus-bench-http-")
    print(f"== http server: {args.seconds:g}s per run, {args.connections} connections, "
          f"{args.size} B bodies; load average {s.load_average():.2f}")  # fmt: skip
    rows = measure(args, workdir)
    print()
    s.print_table(["server", "req/s", "p99 ms", "µs of server CPU a request", "of raw"], rows)
    print(f"\nlogs: {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
