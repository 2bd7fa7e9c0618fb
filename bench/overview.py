"""How long the overview (``GET /v1/overview`` and the UI's home page) takes with many
subscriptions, on the embedded backends in this process.

    .venv/bin/python bench/overview.py --subscriptions 1000 --rounds 10

It makes ``--projects`` projects with one topic each and spreads ``--subscriptions`` over
them through the admin API, then writes a worker's status document for every subscription
(an hour of history, every tenth one failing with its circuit open, lag on every third),
as the workers publish them, and times the API and the page. It prints the median and the
slowest round and the load average beside them; it asserts nothing (``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from core.endpoint_policy import EndpointPolicy
from metastore import paths
from tests.support.control_plane import AUTH, embedded_control_plane
from tests.support.ui_pages import login


def _doc(i: int, now: int) -> bytes:
    failing = i % 10 == 0
    history = [
        [t, 5, 3 if failing else 0, 0, 1 if failing else 0, i % 3 * 10]
        for t in range(now - 3_600, now, 10)
    ]
    return json.dumps(
        {
            "worker": f"w{i % 4}",
            "in_flight": 1,
            "rates": {"delivered_per_s": 0.5, "failed_per_s": 0.3 if failing else 0.0},
            "totals": {"delivered": 1800},
            "circuit": {"state": "open" if failing else "closed", "rate_per_s": 1.0},
            "lag": i % 3 * 10,
            "oldest_unacked_ms": (now - 60) * 1000 if i % 3 else None,
            "failures": {"500": 12} if failing else {},
            "last_failure": {"at_ms": now * 1000, "status": 500, "error": "HTTP 500"}
            if failing
            else None,
            "history": history,
        }
    ).encode()


async def main(subscriptions: int, projects: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        policy = EndpointPolicy(allow_private_networks=True)
        async with embedded_control_plane(
            Path(tmp), base_url="http://testserver", endpoint_policy=policy
        ) as cp:
            client = cp.client
            t0 = time.perf_counter()
            for p in range(projects):
                await client.post("/v1/projects", json={"name": f"p{p}"})
                await client.post(f"/v1/projects/p{p}/topics", json={"name": "t", "partitions": 1})
            for i in range(subscriptions):
                body = {"name": f"s{i}", "topic": "t", "endpoint": {"url": "http://127.0.0.1:9/h"}}
                r = await client.post(f"/v1/projects/p{i % projects}/subscriptions", json=body)
                assert r.status_code == 201, r.text
            now = int(time.time()) // 10 * 10
            for i in range(subscriptions):
                await cp.meta.create(
                    paths.subscription_status(f"p{i % projects}", f"s{i}"), _doc(i, now)
                )
            print(f"made {subscriptions} subscriptions in {time.perf_counter() - t0:.1f} s")
            assert cp.app is not None
            transport = httpx.ASGITransport(app=cp.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as ui:
                await login(ui)
                api_s, page_s, read_ms = [], [], []
                for _ in range(rounds):
                    t = time.perf_counter()
                    r = await client.get("/v1/overview", headers=AUTH)
                    api_s.append(time.perf_counter() - t)
                    read_ms.append(r.json()["read_ms"])
                    t = time.perf_counter()
                    page = await ui.get("/ui/")
                    page_s.append(time.perf_counter() - t)
                    assert page.status_code == 200
            seen = r.json()
            print(
                f"overview of {seen['subscriptions']} subscriptions: "
                f"{len(seen['failing'])} failing, {len(seen['lag'])} in the lag top list"
            )
            for name, values in (("GET /v1/overview", api_s), ("GET /ui/ (home page)", page_s)):
                print(
                    f"{name:<22} median {statistics.median(values) * 1000:7.1f} ms   "
                    f"slowest {max(values) * 1000:7.1f} ms   ({rounds} rounds)"
                )
            print(f"service read (read_ms) median {statistics.median(read_ms):.1f} ms")
            print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=1_000)
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.subscriptions, args.projects, args.rounds))
