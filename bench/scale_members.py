"""Idle delivery-worker members for bench/scale.py: several per process, each a real
:class:`delivery_workers.worker.Worker` with a ZooKeeper session of its own, that joins the
group, follows its assignment, takes and watches each unit's lock, watches the subscription
and its seek node and publishes status, exactly as a worker does, but runs no deliveries
(its runner waits). So 100 members fit on one machine and what they cost ZooKeeper is what
100 workers would cost it.

    .venv/bin/python bench/scale_members.py --zookeeper H --root /scale --prefix w07 \
        --count 10 --status FILE

Every half second the process writes ``FILE`` (JSON): per member, how many units are
assigned to it and how many it holds the lock of, with the process's RSS and CPU-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core import collector, gil  # noqa: E402
from core.result import DeliveryResult  # noqa: E402
from delivery_workers.running import Running  # noqa: E402
from delivery_workers.sender import BatchDelivery, Delivery  # noqa: E402
from delivery_workers.worker import Worker  # noqa: E402
from metastore.zookeeper import ZooKeeperMetaStore  # noqa: E402

REPORT_EVERY_S = 0.5


class IdleRunning(Running):
    """Runs nothing where a runner would run: no storage is configured here, so a real
    runner would fail and start again every second (with a logged traceback) for every
    unit, which is not what a worker's unit costs."""

    async def _run(self, key: str, project: str, name: str) -> None:
        # The metastore reads a runner makes before it reads storage, then nothing.
        sub = await self.catalog.get_subscription(project, name)
        await self.disabling.watch(key, sub)
        await asyncio.Future()  # until unassigned, paused, deleted or the lock is lost


class IdleWorker(Worker):
    """A worker whose runners deliver nothing: everything else is the real worker's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        made = self.running  # the same collaborators, the runner replaced
        kept = {f.name: getattr(made, f.name) for f in fields(made) if f.init}
        self.running = IdleRunning(**kept)


class NoSender:
    """The sender an idle worker never calls (nothing is delivered)."""

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def send(self, delivery: Delivery | BatchDelivery) -> DeliveryResult:
        raise AssertionError("an idle member delivers nothing")


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _report(path: Path, workers: list[Worker]) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    state = {
        "members": {w.member_id: [len(w.assigned), len(w.holding())] for w in workers},
        "rss": _rss_bytes(),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "at": time.time(),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    sender = NoSender()
    async with contextlib.AsyncExitStack() as stack:
        workers: list[Worker] = []
        for i in range(args.count):
            meta = ZooKeeperMetaStore(
                args.zookeeper, root=args.root, session_timeout_s=args.session_timeout_s
            )
            await stack.enter_async_context(meta)
            worker = IdleWorker(
                meta, {}, sender, f"{args.prefix}-{i:02d}", status_interval_s=args.status_s
            )
            workers.append(await stack.enter_async_context(worker))
        while not stop.is_set():
            _report(args.status, workers)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REPORT_EVERY_S)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zookeeper", required=True, help="host:port,...")
    p.add_argument("--root", required=True, help="the metastore root of the run")
    p.add_argument("--prefix", required=True, help="member ids are <prefix>-<i>")
    p.add_argument("--count", type=int, default=10, help="members in this process")
    p.add_argument("--status", type=Path, required=True, help="where to write the figures")
    p.add_argument("--session-timeout-s", type=float, default=10.0)
    p.add_argument("--status-s", type=float, default=1.0, help="status publish interval")
    return p.parse_args(argv)


if __name__ == "__main__":
    collector.tune()  # as a worker process is (delivery_workers/__main__.py)
    gil.tune()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
    os._exit(0)  # kazoo's threads of a killed session must not hold the exit
