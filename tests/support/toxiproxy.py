"""A toxiproxy server for a test (scripts/tools/toxiproxy.sh builds it): TCP proxies with
latency, resets and stalls between a process and what it talks to, where the kernel has no
netem.

    async with toxiproxy() as tox:
        proxy = await tox.proxy("endpoint", upstream="127.0.0.1:8080")
        await proxy.toxic("latency", latency=200, jitter=50)
        ...  # connect to proxy.listen instead of 127.0.0.1:8080

Toxics act per connection: a ``toxicity`` of 0.1 makes one new connection in ten toxic."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from tests.support.go_tools import go_tool
from tests.support.processes import free_port
from tests.support.until import until


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


@dataclass
class Toxiproxy:
    api: httpx.AsyncClient

    async def proxy(self, name: str, upstream: str) -> Proxy:
        listen = f"127.0.0.1:{free_port()}"
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        answer = await self.api.post("/proxies", json=body)
        assert answer.status_code == 201, answer.text
        return Proxy(self.api, name, listen)


@asynccontextmanager
async def toxiproxy() -> AsyncIterator[Toxiproxy]:
    """A toxiproxy server on a free port, stopped on exit."""
    server = await asyncio.to_thread(go_tool, "toxiproxy.sh")
    port = free_port()
    proc = subprocess.Popen(
        [server, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:

            async def answers() -> bool:
                try:
                    return (await api.get("/version")).status_code == 200
                except httpx.HTTPError:
                    return False

            await until(answers, 30, "toxiproxy answering", interval=0.1)
            yield Toxiproxy(api)
    finally:
        proc.terminate()
        proc.wait(10)
