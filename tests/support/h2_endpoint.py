"""An HTTPS endpoint that speaks HTTP/2 or HTTP/1.1, whichever the client's ALPN offer and
its own ``protocols`` agree on (the ``h2`` state machine on the server side; a minimal
HTTP/1.1 keep-alive loop otherwise). It answers every request with ``status`` and ``body``
and records what it saw, so tests and ``bench/senders.py`` can tell which protocol a sender
really spoke. ``make_certificate`` makes a self-signed ``localhost`` certificate with openssl.

    cert, key = make_certificate(tmp_path)
    endpoint = await H2Endpoint.start(cert, key)           # offers h2 and http/1.1
    ... HttpSender(ssl_context=ssl.create_default_context(cafile=str(cert)), http2=True)
    await endpoint.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings


def make_certificate(where: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` and its key, written into ``where``."""
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass
class H2Endpoint:
    """The server; ``requests`` holds (protocol, connection number, headers) per request."""

    server: asyncio.Server
    status: int = 200
    body: bytes = b""
    refuse_first: int = 0  # HTTP/2: reset this many streams with REFUSED_STREAM first
    max_streams: int = 100
    extra_headers: list[tuple[str, str]] = field(default_factory=list)  # in every answer
    interim: int = 0  # HTTP/2: this many 103 Early Hints before each answer
    connections: int = 0
    protocols_seen: list[str] = field(default_factory=list)
    requests: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        cert: Path,
        key: Path,
        protocols: tuple[str, ...] = ("h2", "http/1.1"),
        **options: object,
    ) -> H2Endpoint:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        context.set_alpn_protocols(list(protocols))
        endpoint = cls(server=None, **options)  # type: ignore[arg-type]
        endpoint.server = await asyncio.start_server(endpoint._handle, "127.0.0.1", 0, ssl=context)
        return endpoint

    @property
    def url(self) -> str:
        return f"https://localhost:{self.server.sockets[0].getsockname()[1]}/hook"

    async def aclose(self) -> None:
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        tls = writer.get_extra_info("ssl_object")
        protocol = (tls.selected_alpn_protocol() if tls else None) or "http/1.1"
        self.protocols_seen.append(protocol)
        try:
            if protocol == "h2":
                await self._h2(number, reader, writer)
            else:
                await self._http1(number, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _http1(
        self, number: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.lower(): v for k, _, v in (ln.partition(": ") for ln in lines[1:] if ln)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(("http/1.1", number, {":request-line": lines[0], **headers}))
            writer.write(
                f"HTTP/1.1 {self.status} X\r\nContent-Length: {len(self.body)}\r\n\r\n".encode()
                + self.body
            )
            await writer.drain()

    async def _h2(
        self, number: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding="latin-1")
        conn = h2.connection.H2Connection(config=config)
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        writer.write(conn.data_to_send())
        heads: dict[int, dict[str, str]] = {}
        while True:
            data = await reader.read(65_536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    heads[event.stream_id] = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self._answer(conn, number, event.stream_id, heads.pop(event.stream_id, {}))
            writer.write(conn.data_to_send())
            await writer.drain()

    def _answer(
        self, conn: h2.connection.H2Connection, number: int, stream_id: int, head: dict[str, str]
    ) -> None:
        if self.refuse_first > 0:
            self.refuse_first -= 1
            conn.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        self.requests.append(("h2", number, head))
        for _ in range(self.interim):
            conn.send_headers(stream_id, [(":status", "103")])
        headers = [(":status", str(self.status)), ("content-length", str(len(self.body)))]
        headers += self.extra_headers
        conn.send_headers(stream_id, headers, end_stream=not self.body)
        if self.body:
            conn.send_data(stream_id, self.body, end_stream=True)
