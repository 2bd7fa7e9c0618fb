"""The control plane knows its caller before it reads a body, and reads no body past the cap
(issue 38, item 4): an unknown caller's 100 MB is refused unread, an over-cap body is 413
``too_large`` whether its size is declared, missing (chunked) or a lie, the UI's forms and
the login form included."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.app import create_app
from control_plane.request_guard import LOGIN_BODY_BYTES
from control_plane.settings import ControlPlaneSettings
from core.http_server import HttpServerLimits, uvicorn_options
from tests.support.control_plane import AUTH, TOKEN, ControlPlane, embedded_control_plane
from tests.support.ui_pages import csrf, hidden, login
from tests.support.uvicorn_thread import uvicorn_thread

CHUNK = 64 * 1024
CAP = 64 * 1024  # the tests' max_body_bytes: small, so over-cap bodies stay cheap
HUNDRED_MB = 100 * 1024 * 1024


class Upload:
    """A body sent chunk by chunk, counting what the server pulled of it."""

    def __init__(self, total: int, chunk: int = CHUNK) -> None:
        self.total, self.chunk, self.pulled = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        block = b"x" * self.chunk
        while self.pulled < self.total:
            self.pulled += self.chunk
            yield block


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(
        tmp_path, admin=False, base_url="http://testserver", max_body_bytes=CAP
    ) as built:
        yield built


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer hbk.nope.nope"}],
    ids=["none", "wrong-token", "unknown-api-token"],
)
async def test_an_unknown_callers_body_is_refused_unread(
    cp: ControlPlane, headers: dict[str, str]
) -> None:
    upload = Upload(HUNDRED_MB)
    r = await cp.client.post("/v1/projects", content=upload, headers=headers)
    assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
    assert r.headers["connection"] == "close"
    assert upload.pulled == 0  # not a chunk read


async def test_a_ui_form_without_a_session_is_refused_unread(cp: ControlPlane) -> None:
    upload = Upload(HUNDRED_MB)
    r = await cp.client.post("/ui/projects/new", content=upload)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
    assert upload.pulled == 0


async def test_a_known_callers_body_over_the_cap_is_413(cp: ControlPlane) -> None:
    # Declared: refused before a byte is read.
    r = await cp.client.post(
        "/v1/projects", content=b"{" * (CAP + 1), headers={**AUTH, "Content-Type": "text/json"}
    )
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    assert r.headers["connection"] == "close"
    # Chunked (no length): refused once the count passes the cap, reading no further.
    upload = Upload(HUNDRED_MB)
    r = await cp.client.post("/v1/projects", content=upload, headers=AUTH)
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    assert upload.pulled <= CAP + CHUNK


async def test_a_length_that_lies_is_still_bounded(cp: ControlPlane) -> None:
    upload = Upload(HUNDRED_MB)
    headers = {**AUTH, "Content-Length": "10"}  # ASGI passes on what the client said
    r = await cp.client.post("/v1/projects", content=upload, headers=headers)
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    assert upload.pulled <= CAP + CHUNK


async def test_a_body_under_the_cap_is_served(cp: ControlPlane) -> None:
    r = await cp.client.post("/v1/projects", json={"name": "shop"}, headers=AUTH)
    assert r.status_code == 201, r.text


async def test_the_login_form_is_capped_and_the_ui_forms_too(cp: ControlPlane) -> None:
    page = await cp.client.get("/ui/login")
    form = {"token": TOKEN, "nonce": hidden(page.text, "nonce"), "next": "x" * LOGIN_BODY_BYTES}
    r = await cp.client.post("/ui/login", data=form)
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    assert (await login(cp.client)).status_code == 303  # a form of the right size logs in
    token = await csrf(cp.client)
    r = await cp.client.post(
        "/ui/projects/new", data={"csrf": token, "name": "shop", "description": "d" * CAP}
    )
    assert (r.status_code, r.json()["code"]) == (413, "too_large")


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_100_mb_unauthenticated_over_a_socket_costs_no_memory(tmp_path: Path) -> None:
    """The real server (uvicorn with the guarded protocol, in this process): the client's
    upload is cut short after the 401, and this process's memory hardly grows."""
    settings = ControlPlaneSettings(
        admin_token=TOKEN, database_url=f"sqlite:///{tmp_path / 'reports.db'}"
    )
    app = create_app(settings)
    peak: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.005):
            peak.append(max(peak[-1], _rss()))

    with uvicorn_thread(app, **uvicorn_options(HttpServerLimits())) as port:
        before = _rss()
        peak.append(before)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sent, answer = _send_unauthenticated(port, HUNDRED_MB)
        done.set()
        watcher.join()
    growth = max(peak) - before
    print(
        f"sent {sent / 1e6:.1f} MB of 100 MB; memory growth {growth / 1e6:.1f} MB; {answer[:12]!r}"
    )
    assert sent < 20 * 1024 * 1024, sent  # the server stopped reading
    assert growth < 10 * 1024 * 1024, growth
    assert answer == b"" or answer.startswith(b"HTTP/1.1 401"), answer[:200]


def _send_unauthenticated(port: int, total: int) -> tuple[int, bytes]:
    """POST ``total`` bytes of JSON without a credential: what was sent before the server
    cut it off, and the start of the answer (empty if the reset came first)."""
    head = (
        f"POST /v1/projects HTTP/1.1\r\nHost: cp\r\nContent-Type: application/json\r\n"
        f"Content-Length: {total}\r\n\r\n"
    ).encode()
    block = b" " * (1024 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        deadline = time.monotonic() + 30
        try:
            while sent < total and time.monotonic() < deadline:
                sock.sendall(block)
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    return sent, answer


async def test_the_caller_is_resolved_once(cp: ControlPlane) -> None:
    """The guard's answer is the routes' answer: an API token is looked up once a request."""
    assert cp.app is not None
    principals = cp.app.state.authenticator.principals
    assert (await cp.client.post("/v1/projects", json={"name": "shop"}, headers=AUTH)).is_success
    r = await cp.client.post("/v1/tokens", json={"roles": ["owner:shop"]}, headers=AUTH)
    assert r.status_code == 201, r.text
    bearer = {"Authorization": f"Bearer {r.json()['token']}"}
    calls = 0
    looked_up = principals.token_principal

    def counting(token: str) -> object:
        nonlocal calls
        calls += 1
        return looked_up(token)

    principals.token_principal = counting
    try:
        topic = {"name": "orders", "partitions": 1}
        r = await cp.client.post("/v1/projects/shop/topics", json=topic, headers=bearer)
    finally:
        del principals.token_principal
    assert r.status_code == 201, r.text
    assert calls == 1


async def test_requests_without_a_body_are_untouched(cp: ControlPlane) -> None:
    assert (await cp.client.get("/healthz")).status_code == 200
    r = await cp.client.get("/v1/projects")
    assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
    assert (await cp.client.get("/ui/projects")).status_code == 303
