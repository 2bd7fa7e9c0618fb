"""What the chaos tests share: the publishing load (a client per group) and the faults done
to the cluster's servers (SIGKILL, then a restart on their data)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field

import httpx

from tests.chaos.checker import Delivery, History
from tests.chaos.conftest import Cluster

ADMIN = "chaos-admin-token"
URL = "/v1/projects/shop/topics/orders/produce"


@dataclass
class Load:
    """One client per group, each publishing its sequence in order: a refused or failed
    publish is retried until acknowledged, as an ordering client must."""

    url: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acked: dict[str, list[int]] = field(default_factory=dict)
    published: dict[str, list[str]] = field(default_factory=dict)  # group → ids tried, in order
    answers: list[tuple[float, int]] = field(default_factory=list)  # (time, status; 0: error)

    async def group(self, group: str) -> None:
        seq = 0
        headers = {"Authorization": f"Bearer {ADMIN}", "X-Group-Id": group}
        async with httpx.AsyncClient(base_url=self.url, timeout=15) as client:
            while not self.stop.is_set():
                mid = f"{group}-{seq}"
                tried = self.published.setdefault(group, [])
                if not tried or tried[-1] != mid:
                    tried.append(mid)
                try:
                    r = await client.post(
                        URL,
                        content=f"{group}:{seq}".encode(),
                        headers={**headers, "X-Message-Id": mid},
                    )
                    status = r.status_code
                except httpx.HTTPError:
                    status = 0
                self.answers.append((time.time(), status))
                if status == 201:
                    self.acked.setdefault(group, []).append(seq)
                    seq += 1
                else:
                    await asyncio.sleep(0.05)  # a client's retry pace

    def history(self, deliveries: list[Delivery]) -> History:
        """What the clients recorded, with what the receivers (or the storage) got."""
        acked = {f"{g}-{s}" for g, seqs in self.acked.items() for s in seqs}
        return History(self.published, acked, list(self.answers), deliveries)


def merged(loads: list[Load], deliveries: list[Delivery]) -> History:
    """The histories of several loads (producers) as one, with ``deliveries``."""
    published: dict[str, list[str]] = {}
    acked: set[str] = set()
    answers: list[tuple[float, int]] = []
    for load in loads:
        history = load.history(deliveries)
        published.update(history.published)
        acked |= history.acked
        answers += history.answers
    return History(published, acked, sorted(answers), deliveries)


async def kill_and_restart(cluster: Cluster, name: str, down_s: float) -> None:
    """SIGKILL server ``name``, and start it again on its data ``down_s`` later."""
    await kill_for(cluster, [name], down_s)


async def kill_for(cluster: Cluster, names: list[str], down_s: float) -> float:
    """SIGKILL the servers ``names`` at once, and start them again ``down_s`` later; return
    when they answer, with the time (``time.time()``) their restart began."""
    running = cluster.supervisor.running()
    for name in names:
        os.killpg(running[name].pid, signal.SIGKILL)
    await asyncio.sleep(down_s)
    restarted_at = time.time()
    for name in names:
        cluster.supervisor.restart(name, die_with_parent=True, wait=False)
    await asyncio.to_thread(cluster.supervisor.wait, names)
    return restarted_at
