"""What the browser tests share: Debian's Chromium driven by Playwright (headless, no browser
download), logging in, screenshots for the README tour, a webhook endpoint whose answer the
test can change (to break it and fix it), and publishing through the producer."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Lock, Thread
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.async_api import Page as AsyncPage
from playwright.async_api import async_playwright
from playwright.sync_api import Browser, Page, expect, sync_playwright

from scripts.realservices.ports import free_port
from tests.support.dev import Dev

TOKEN = "ui-browser-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium: apt-get install -y chromium"
)


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@asynccontextmanager
async def async_page(base_url: str, token: str, start: str) -> AsyncIterator[AsyncPage]:
    """Chromium (async API, for tests already on an event loop), logged in with ``token``
    at ``base_url`` and on page ``start``."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            await page.goto(f"{base_url}{start}")
            await page.fill("input[name=token]", token)
            await page.click("button:has-text('Log in')")
            await page.wait_for_url(re.compile(re.escape(start) + "$"))
            yield page
        finally:
            await browser.close()


@asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """``app`` served by uvicorn on a free 127.0.0.1 port of this event loop; its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextmanager
def new_page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        yield context.new_page()
    finally:
        context.close()


def shot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as docs/screenshots/<name>.png (the README's tour)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    target = SHOTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    print(f"screenshot {target}")
    return target


def log_in(page: Page, dev: Dev, start: str = "/ui/projects") -> None:
    """Open ``start``, get sent to the login form, log in and land on ``start``."""
    page.goto(f"{dev.control_plane}{start}")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.fill("input[name=token]", TOKEN)
    page.click("button:has-text('Log in')")
    expect(page).to_have_url(re.compile(re.escape(start) + "$"))


class Hook:
    """A webhook endpoint in this process: answers ``status`` (change it to break or fix
    the endpoint) and records the bodies of the requests it answered with a 2xx."""

    def __init__(self) -> None:
        self.status = 204
        self.delivered: list[bytes] = []
        self.calls = 0
        self._lock = Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with hook._lock:
                    status = hook.status
                    hook.calls += 1
                    if status < 300:
                        hook.delivered.append(body)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextmanager
def hook() -> Iterator[Hook]:
    endpoint = Hook()
    try:
        yield endpoint
    finally:
        endpoint.close()


def publish(dev: Dev, project: str, topic: str, bodies: Sequence[bytes]) -> None:
    """Publish through the producer API, one request per message (each answered 201)."""
    url = f"{dev.producer}/v1/projects/{project}/topics/{topic}/produce"
    with httpx.Client(headers=AUTH, timeout=15) as client:
        for body in bodies:
            r = client.post(url, content=body)
            assert r.status_code == 201, r.text


def admin(dev: Dev) -> httpx.Client:
    """An admin API client of the running control plane."""
    return httpx.Client(base_url=dev.control_plane, headers=AUTH, timeout=30)


@pytest.fixture(name="browser", scope="module")
def browser_fixture() -> Iterator[Browser]:
    """Chromium for a test module: tests/integration/conftest.py gives it."""
    with chromium() as launched:
        yield launched


@pytest.fixture(name="page")
def page_fixture(browser: Browser) -> Iterator[Page]:
    """A fresh page of its own for each test: tests/integration/conftest.py gives it."""
    with new_page(browser) as opened:
        yield opened


@pytest.fixture(name="endpoint")
def endpoint_fixture() -> Iterator[Hook]:
    """The webhook endpoint of one test: tests/integration/conftest.py gives it."""
    with hook() as made:
        yield made
