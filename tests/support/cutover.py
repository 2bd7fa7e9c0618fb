"""What the cutover integration tests share: the clusters, a grouped load, a consumer that
walks the segments with ``SegmentReader``, the checks, and the pause and timeline reports."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import ssl
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from core.model import Segment, SegmentState, Subscription
from metastore.catalog import Catalog
from segments.config import ClusterConfig, KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import SegmentStore
from segments.reader import SegmentReader, commit_group
from tests.support.services import RealServices
from tests.support.until import until_sync

ADMIN = "cutover-admin-token-0123456789"


def clusters(real: RealServices) -> dict[str, ClusterConfig]:
    """The real clusters with the shipped defaults (produce timeout, no ``fence_settle_s``):
    the cutover tests measure the pause a deployment gets."""
    return {
        "kafka-main": KafkaClusterConfig(bootstrap_servers=real.kafka),
        "pulsar-main": PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin),
    }


def producer_settings(real: RealServices, root: str, member: str) -> dict[str, Any]:
    return {
        "admin_token": ADMIN,
        "metastore": {"kind": "zookeeper", "hosts": real.zookeeper, "root": root},
        "clusters": {n: c.model_dump() for n, c in clusters(real).items()},
        "member_id": member,
        "cutover_hold_timeout_s": 5.0,
    }


@dataclass
class Load:
    """``groups`` groups; each sends its next sequence number once the previous one got a
    2xx, about every ``interval_s``, spreading its messages over every producer."""

    urls: Sequence[str]
    path: str
    groups: int = 200
    interval_s: float = 2.0
    acked: dict[str, list[int]] = field(default_factory=dict)
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)  # status 0: why
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        # One TLS context for every client: httpx builds one per client otherwise (certifi
        # loaded each time, 45 ms on a busy machine), and 400 of them kept the load from
        # starting before the cutovers it was to load were over.
        tls = ssl.create_default_context()
        await asyncio.gather(*(self._group(tls, f"g{i}", i) for i in range(self.groups)))

    async def _group(self, tls: ssl.SSLContext, group: str, index: int) -> None:
        # A client per group (one request in flight at most), keeping its connections: in a
        # pool shared by groups, httpcore (1.0.9) can close a connection it has just handed to
        # a queued request (one whose keep-alive expired meanwhile, or an idle one it needs
        # room for), and that request's answer is lost as a ReadError caused by anyio's
        # ClosedResourceError (encode/httpcore#1110; seen in two clean-clone CI runs, with a
        # pool of 100 and again of one connection per group). A pool nobody else uses is never
        # swept while its only request waits.
        n = len(self.urls)
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=None)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        client = httpx.AsyncClient(limits=limits, headers=headers, timeout=15, verify=tls)
        async with client:
            await self._publish(client, group, index)

    async def _publish(self, client: httpx.AsyncClient, group: str, index: int) -> None:
        acked = self.acked.setdefault(group, [])
        await asyncio.sleep(random.random() * self.interval_s)
        seq, attempts = 0, itertools.count(index)
        while not self.stop.is_set():
            url = self.urls[next(attempts) % len(self.urls)]
            start = time.time()
            try:
                r = await client.post(
                    url + self.path,
                    content=f"{group}:{seq}".encode(),
                    headers={"X-Group-Id": group},
                )
                status, segment = (
                    r.status_code,
                    (r.json().get("segment", 0) if r.status_code == 201 else 0),
                )
            except httpx.HTTPError as exc:
                status, segment = 0, 0
                why = f"{type(exc).__name__}: {exc} (cause {exc.__cause__!r})"
                self.errors.append((start, f"{url}: {why}"))
            self.samples.append((start, time.time() - start, status, segment))
            if status == 201:
                acked.append(seq)
                seq += 1
                await asyncio.sleep(self.interval_s * (0.5 + random.random()))
            else:
                await asyncio.sleep(0.1)

    def refused(self) -> int:
        return sum(1 for s in self.samples if s[2] != 201)


async def consume_all(
    catalog: Catalog, stores: dict[str, SegmentStore], sub: Subscription, deadline_s: float = 60
) -> dict[str, list[int]]:
    """Read the subscription segment by segment, as a worker would: every partition to its
    end, commit, and advance the consume pointer, which must succeed for a sealed segment.
    Within ``deadline_s`` in all, an empty read is retried, never taken for the end (a
    reader's first read can come back empty under load: a clean-clone run once read an
    unsealed segment short that way); see :func:`_read_partition`."""
    reader = SegmentReader(catalog, stores)
    deadline = time.monotonic() + deadline_s
    out: dict[str, list[int]] = {}
    while True:
        sub = await catalog.get_subscription(sub.project, sub.name)
        _, seg = await reader.consume_segment(sub)
        sealed = seg.state in (SegmentState.SEALED, SegmentState.RETIRED)
        if sealed:
            assert seg.end_positions is not None
            ends = dict(seg.end_positions)
        else:
            ends = await reader.store(seg).end_positions(seg.storage_topic)
        starts = await reader.start_positions(sub, seg)
        for p in range(seg.partitions):
            await _read_partition(reader, sub, seg, p, (starts[p], ends.get(p, 0)), out, deadline)
        if not sealed:
            return out
        advanced = await reader.try_advance(sub)
        assert advanced is not None, f"sealed segment {seg.id} read and committed, yet no advance"


async def _read_partition(
    reader: SegmentReader,
    sub: Subscription,
    seg: Segment,
    partition: int,
    span: tuple[int, int],
    out: dict[str, list[int]],
    deadline: float,
) -> None:
    """Read ``partition`` from ``span``'s start to its end into ``out``, committing as a
    worker does. Positions need not be dense (a Pulsar end names the next entry, past the
    last message), so a position short of the end does not say a message is left: after an
    empty read, the partition is done once the position committed for what was read reaches
    the end; until then (or ``deadline``) it is read again."""
    pos, end = span
    store, group, committed = reader.store(seg), commit_group(sub), span[0]
    while pos < end:
        batch = await reader.read(sub, seg, partition, pos, max_records=1000, timeout=1)
        past = False
        for msg in batch:
            if past := msg.position >= end:
                break  # past the end: consumers never see it
            group_id, seq = msg.value.decode().split(":")
            out.setdefault(group_id, []).append(int(seq))
            pos = msg.position + 1
        if pos != committed:  # like a worker: commit after the last message handled
            await reader.commit(sub, seg, {partition: pos})
            committed = pos
        if past:
            return
        if batch:
            continue
        if (await store.committed(seg.storage_topic, group)).get(partition, 0) >= end:
            return
        assert time.monotonic() < deadline, (
            f"segment {seg.id} partition {partition}: read to {pos} of {end}, nothing more came"
        )


def check_delivery(acked: dict[str, list[int]], delivered: dict[str, list[int]]) -> int:
    """Every 2xx'd message delivered, per group in sequence order; returns the count.
    A message stored whose answer was lost is sent again by its client: the same number
    twice in a row is a duplicate (at-least-once), never a reordering."""
    total = 0
    for group, seqs in acked.items():
        got = delivered.get(group, [])
        deduped = [s for i, s in enumerate(got) if i == 0 or got[i - 1] != s]
        assert deduped == list(range(len(deduped))), f"group {group} out of order: {deduped[:50]}"
        missing = set(seqs) - set(deduped)
        assert not missing, f"group {group}: 2xx'd but not delivered: {sorted(missing)[:20]}"
        total += len(seqs)
    return total


def _t(doc: dict[str, Any], phase: str) -> float | None:
    value = doc["phase_times"].get(phase)
    return None if value is None else datetime.fromisoformat(value).timestamp()


def pause_report(load: Load, doc: dict[str, Any]) -> str:
    """Publish latency of the requests that started inside the SWITCH window (SWITCH until
    COMPLETE, or the rollback)."""
    start = _t(doc, "SWITCH")
    end = _t(doc, "COMPLETE") or _t(doc, "ROLLED_BACK") or _t(doc, "ABORTED")
    if start is None or end is None:
        return f"cutover {doc['id']}: no SWITCH window ({doc['phase']})"
    lat = sorted(s[1] * 1000 for s in load.samples if start <= s[0] <= end)
    if not lat:
        return f"cutover {doc['id']}: SWITCH window {1000 * (end - start):.0f} ms, no request in it"
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    base = sorted(s[1] * 1000 for s in load.samples if s[0] < start - 1 and s[2] == 201)
    base_txt = (
        f"; before it p50 {statistics.median(base):.0f} ms / "
        f"p99 {base[min(len(base) - 1, int(len(base) * 0.99))]:.0f} ms"
        if base
        else ""
    )
    return (
        f"cutover {doc['from_segment']}->{doc['to_segment']} ({doc['cluster']}, "
        f"{doc['partitions']}p): SWITCH window {1000 * (end - start):.0f} ms, {len(lat)} requests, "
        f"publish latency p50 {statistics.median(lat):.0f} ms / p99 {p99:.0f} ms / "
        f"max {lat[-1]:.0f} ms{base_txt}"
    )


def timeline(doc: dict[str, Any]) -> str:
    t0 = _t(doc, "PREPARE") or 0.0
    lines = [f"timeline of cutover {doc['id']} ({doc['phase']}), ms after PREPARE:"]
    events: list[tuple[float, str]] = []
    for phase, at in doc["phase_times"].items():
        events.append((datetime.fromisoformat(at).timestamp(), f"phase {phase}"))
    for step, at in doc.get("step_times", {}).items():
        events.append((datetime.fromisoformat(at).timestamp(), f"  {step}"))
    for member, acks in doc["producers"].items():
        for key, at in acks.items():
            if at:
                events.append((datetime.fromisoformat(at).timestamp(), f"{member} {key}"))
    for at, what in sorted(events):
        lines.append(f"  {1000 * (at - t0):8.1f}  {what}")
    if doc.get("error"):
        lines.append(f"  error: {doc['error']}")
    return "\n".join(lines)


class LoadProcess:
    """The :class:`Load` in a process of its own, so its clients do not slow down the
    coordinator that runs in the test's event loop. ``stop`` returns what it measured.

    The constructor returns once the process is loading: on a busy machine its imports can
    take longer than a short test, and a SIGTERM that arrives before its handler is installed
    kills it with nothing written (the fence test failed that way under load)."""

    def __init__(self, urls: Sequence[str], path: str, workdir: Path, groups: int = 200) -> None:
        self.out = workdir / f"load-{uuid.uuid4().hex[:6]}.json"
        ready = self.out.with_suffix(".ready")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cutover", str(self.out), path,
             str(groups), *urls],
        )  # fmt: skip
        self.result = Load(urls, path, groups)
        until_sync(
            lambda: ready.exists() or self.proc.poll() is not None,
            timeout=60,
            what="the load process installed its SIGTERM handler",
        )
        assert self.proc.poll() is None, f"the load process exited with {self.proc.returncode}"

    def stop(self) -> Load:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        data = json.loads(self.out.read_text())
        self.result.acked = data["acked"]
        self.result.samples = [tuple(s) for s in data["samples"]]  # type: ignore[misc]
        self.result.errors = [tuple(e) for e in data["errors"]]  # type: ignore[misc]
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _main(argv: list[str]) -> None:
    out, path, groups, *urls = argv
    load = Load(urls, path, int(groups))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, load.stop.set)
        Path(out).with_suffix(".ready").touch()
        await load.run()

    asyncio.run(run())
    found = {"acked": load.acked, "samples": load.samples, "errors": load.errors}
    Path(out).write_text(json.dumps(found))


if __name__ == "__main__":
    _main(sys.argv[1:])


class Worker:
    """A real delivery runner for ``sub`` pushing to a local endpoint that records
    ``group -> [seq, ...]`` in the order it received them."""

    def __init__(self, catalog: Catalog, stores: dict[str, SegmentStore]) -> None:
        self.catalog, self.stores = catalog, stores
        self.received: dict[str, list[int]] = {}
        self.url = ""
        self._site: Any = None
        self._task: asyncio.Task[None] | None = None
        self.runner: Any = None

    async def endpoint(self) -> str:
        from aiohttp import web

        async def hook(request: web.Request) -> web.Response:
            group, seq = (await request.read()).decode().split(":")
            self.received.setdefault(group, []).append(int(seq))
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self._site = web.AppRunner(app)
        await self._site.setup()
        site = web.TCPSite(self._site, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self.url

    async def start(self, sub: Subscription) -> None:
        from delivery_workers.http_sender import HttpSender
        from delivery_workers.runner import SubscriptionRunner
        from delivery_workers.tracking import CommitPolicy

        self.sender = HttpSender()
        await self.sender.start()
        reader = SegmentReader(self.catalog, self.stores)
        self.runner = SubscriptionRunner(
            sub, reader, self.sender, commit_policy=CommitPolicy(every_n=200, every_s=0.5)
        )
        self._task = asyncio.create_task(self.runner.run())

    def count(self) -> int:
        return sum(len(v) for v in self.received.values())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            await self.sender.aclose()
        if self._site is not None:
            await self._site.cleanup()
