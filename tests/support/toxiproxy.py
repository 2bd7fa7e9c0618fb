"""A toxiproxy server for a test (scripts/tools/toxiproxy.sh builds it): TCP proxies with
latency, resets and stalls between a process and what it talks to, where the kernel has no
netem.

    async with toxiproxy() as tox:
        proxy = await tox.proxy("endpoint", upstream="127.0.0.1:8080")
        await proxy.toxic("latency", latency=200, jitter=50)
        ...  # connect to proxy.listen instead of 127.0.0.1:8080

Toxics act per connection: a ``toxicity`` of 0.1 makes one new connection in ten toxic.
A server that must outlive an event loop (a module's cluster behind proxies) is
:func:`toxiproxy_server`, a plain context manager giving the API's URL (proxies made
with :func:`add_proxy`); ``Toxiproxy.existing`` reaches them by name from a test."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from tests.support.go_tools import go_tool
from tests.support.processes import free_port


@dataclass
class Proxy:
    api: httpx.AsyncClient
    name: str
    listen: str  # host:port to connect to instead of the upstream

    async def toxic(
        self, kind: str, *, toxicity: float = 1.0, stream: str = "downstream", **attributes: float
    ) -> None:
        """Add a toxic of ``kind`` (latency, reset_peer, timeout, …; toxiproxy's README)."""
        body = {
            "name": f"{kind}-{stream}",
            "type": kind,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": attributes,
        }
        answer = await self.api.post(f"/proxies/{self.name}/toxics", json=body)
        assert answer.status_code == 200, answer.text

    async def clear(self) -> None:
        """Remove every toxic: the path is clean again."""
        answer = await self.api.get(f"/proxies/{self.name}/toxics")
        assert answer.status_code == 200, answer.text
        for toxic in answer.json():
            gone = await self.api.delete(f"/proxies/{self.name}/toxics/{toxic['name']}")
            assert gone.status_code == 204, gone.text


@dataclass
class Toxiproxy:
    api: httpx.AsyncClient

    async def proxy(self, name: str, upstream: str) -> Proxy:
        listen = f"127.0.0.1:{free_port()}"
        answer = await self.api.post("/proxies", json=_proxy_body(name, listen, upstream))
        assert answer.status_code == 201, answer.text
        return Proxy(self.api, name, listen)

    async def existing(self, name: str) -> Proxy:
        """The proxy ``name`` made earlier (by :func:`add_proxy`)."""
        answer = await self.api.get(f"/proxies/{name}")
        assert answer.status_code == 200, answer.text
        return Proxy(self.api, name, answer.json()["listen"])


def add_proxy(api_url: str, name: str, listen: str, upstream: str) -> None:
    """A proxy ``name`` on ``listen`` (host:port) to ``upstream``, made before any event loop
    runs (a server started behind it advertises ``listen``)."""
    answer = httpx.post(f"{api_url}/proxies", json=_proxy_body(name, listen, upstream), timeout=10)
    assert answer.status_code == 201, answer.text


def _proxy_body(name: str, listen: str, upstream: str) -> dict[str, object]:
    return {"name": name, "listen": listen, "upstream": upstream, "enabled": True}


@contextmanager
def toxiproxy_server(log: Path | None = None) -> Iterator[str]:
    """A toxiproxy server on a free port, its API's URL yielded; stopped on exit. ``log``:
    where it writes its log (JSON lines, from ``info``: :func:`accepted` reads them)."""
    server = go_tool("toxiproxy.sh")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") if log else open(os.devnull, "wb") as out:
        proc = subprocess.Popen(
            [server, "-host", "127.0.0.1", "-port", str(port)],
            stdout=out,
            stderr=out,
            env={**os.environ, "LOG_LEVEL": "info"},
        )
    try:
        deadline = time.monotonic() + 30
        while not _answers(url):
            assert time.monotonic() < deadline, "toxiproxy did not answer in 30 s"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass(frozen=True)
class Accepted:
    at: float  # time.time(), to the second (toxiproxy's log)
    proxy: str
    client_port: int  # the connecting process's port


def accepted(log: Path) -> list[Accepted]:
    """Every connection a proxy accepted, in order, from ``toxiproxy_server``'s log."""
    found = []
    for line in log.read_text().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("message") == "Accepted client":
            at = datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
            port = int(entry["client"].rsplit(":", 1)[1])
            found.append(Accepted(at, entry["name"], port))
    return found


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@asynccontextmanager
async def toxiproxy() -> AsyncIterator[Toxiproxy]:
    """A toxiproxy server on a free port for one test, stopped on exit. Started and stopped
    off the event loop (building the binary, waiting for it to answer), which other tasks of
    the test may already share."""
    server = ExitStack()
    url = await asyncio.to_thread(server.enter_context, toxiproxy_server())
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as api:
            yield Toxiproxy(api)
    finally:
        await asyncio.to_thread(server.close)
