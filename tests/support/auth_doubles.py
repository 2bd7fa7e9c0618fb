"""Doubles for endpoint authentication (subscription ``auth``): an OAuth 2.0 token server, a
receiver that checks each request with a test's function, and a test CA (``cryptography``)
for TLS receivers that require a client certificate.

    async with serve_token_server({"httpbus": ["s3cret"]}, expires_in=3) as tokens, \\
            serve_receiver(tokens.bearer_ok) as receiver:
        sub = ...auth={"type": "oauth2_client_credentials", "token_url": tokens.url, ...}
        ...
        assert receiver.refused == []

Neither is a server httpbus claims to support: they stand for the receivers and token
servers of its users.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import uvicorn
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    token: str
    client_id: str
    secret: str
    expires_at: float  # time.monotonic()


@dataclass
class TokenServer:
    """``POST /token``: the client credentials grant, the client in HTTP Basic. ``clients``
    maps each client to the secrets it may use (two during a secret's rotation, as Okta and
    Entra ID allow). A token is valid until its ``expires_in`` has passed and while the
    secret it was issued under is still accepted (a secret withdrawn revokes its tokens)."""

    clients: dict[str, list[str]]
    expires_in: float = 3_600
    url: str = ""
    issued: list[Issued] = field(default_factory=list)
    forms: list[dict[str, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.forms.append(form)
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        client, _, secret = base64.b64decode(encoded or "Og==").decode().partition(":")
        client, secret = unquote(client), unquote(secret)
        if scheme != "Basic" or secret not in self.clients.get(client, []):
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        token = f"tok-{len(self.issued)}-{client}"
        expires_at = time.monotonic() + self.expires_in
        self.issued.append(Issued(token, client, secret, expires_at))
        body = {"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in}
        return web.json_response(body)

    def valid(self, token: str) -> bool:
        found = next((i for i in self.issued if i.token == token), None)
        return (
            found is not None
            and time.monotonic() < found.expires_at
            and found.secret in self.clients.get(found.client_id, [])
        )

    def bearer_ok(self, headers: Mapping[str, str]) -> bool:
        """A receiver's check: the request carries a valid token of this server."""
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        return scheme == "Bearer" and self.valid(token)


@asynccontextmanager
async def serve_token_server(
    clients: dict[str, list[str]], expires_in: float = 3_600
) -> AsyncIterator[TokenServer]:
    server = TokenServer({k: list(v) for k, v in clients.items()}, expires_in)
    app = web.Application()
    app.router.add_post("/token", server.handle)
    async with _served(app) as port:
        server.url = f"http://127.0.0.1:{port}/token"
        yield server


Check = Callable[[Mapping[str, str]], bool | Awaitable[bool]]


@dataclass
class Received:
    path: str
    headers: Mapping[str, str]
    status: int
    at: float

    @property
    def id(self) -> str:
        return self.headers.get("X-Message-Id", "")


@dataclass
class Receiver:
    """``POST /hook/{path}``: 204 when ``check(headers)`` passes, else 401."""

    check: Check
    url: str = ""
    got: list[Received] = field(default_factory=list)

    def url_for(self, path: str) -> str:
        return f"{self.url}/{path}"

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        passed = self.check(request.headers)
        if not isinstance(passed, bool):
            passed = await passed
        status = 204 if passed else 401
        path = request.match_info.get("path", "")
        self.got.append(Received(path, request.headers, status, time.time()))
        return web.Response(status=status)

    def accepted(self, path: str) -> list[str]:
        return [r.id for r in self.got if r.path == path and r.status == 204]

    def refused(self, path: str) -> list[Received]:
        return [r for r in self.got if r.path == path and r.status != 204]


@asynccontextmanager
async def serve_receiver(check: Check) -> AsyncIterator[Receiver]:
    receiver = Receiver(check)
    app = web.Application()
    app.router.add_post("/hook/{path}", receiver.handle)
    async with _served(app) as port:
        receiver.url = f"http://127.0.0.1:{port}/hook"
        yield receiver


@asynccontextmanager
async def _served(app: web.Application) -> AsyncIterator[int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        server: Any = site._server
        yield server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


# ------------------------------------------------------------ a test CA


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class Issuance:
    cert_pem: str
    key_pem: str

    def write(self, folder: Path, name: str) -> tuple[Path, Path]:
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_text(self.cert_pem)
        key.write_text(self.key_pem)
        return cert, key


@dataclass
class TestCA:
    """A CA that issues server certificates (for ``localhost`` and 127.0.0.1) and client
    certificates."""

    __test__ = False  # not a test class
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, name: str = "httpbus test CA") -> TestCA:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, name: str, *, server: bool) -> Issuance:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issuance(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem(key))


@asynccontextmanager
async def serve_asgi(app: Any, **options: Any) -> AsyncIterator[int]:
    """``app`` served by uvicorn on a free 127.0.0.1 port of this event loop (``options``:
    uvicorn's, such as ``ssl_certfile``, ``ssl_cert_reqs``); its port."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", **options
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[_bound()]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.02)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


def _bound() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class AsgiReceiver:
    """A bare ASGI receiver: records each request's path and headers, answers 204."""

    got: list[Received] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        headers = {**headers, "X-Message-Id": headers.get("x-message-id", "")}
        self.got.append(Received(scope["path"].rsplit("/", 1)[-1], headers, 204, time.time()))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def accepted(self, path: str) -> list[str]:
        return [r.id for r in self.got if r.path == path]
