"""The Parquet export of a topic with a Kafka segment and a Pulsar segment, on the real servers.

    .venv/bin/python bench/export.py [--messages 1000000] [--pulsar-share 0.1] \\
        [--fill-seconds 240] [--master local[2]] [--size 200] [--workdir DIR]

Fills two storage topics straight through the raw clients (confluent-kafka, pulsar-client
``send_async``), with the headers the producer service writes (``x-message-id``,
``x-group-id``, ``x-produced-at`` over the last two hours), ``--pulsar-share`` of them on
Pulsar; the fill stops at ``--fill-seconds`` whatever the count (the count reached is what is
exported). Then it times :func:`spark.export.export_parquet` over
:func:`spark.messages.read_timeline` of both segments, checks the Parquet count, and prints
messages/s, the CPU time per message of this process and every process it started (the Spark
JVM and its Python workers; 100% = one core), the host's CPU share and the load average
before and after. The JVM start is timed apart. Topics and files are removed at the end.
Figures only, no assertion on time; on a shared machine compare the CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import Cpu, Endpoints, add_run_args, fmt, print_table
from core import envelope
from core import pulsar_format as wire
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from segments.registry import open_store

HOUR_MS = 3_600_000
PARTITIONS = 4
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds of ``root`` (this process) and every live descendant, with what their
    reaped children used (``cutime``/``cstime``)."""
    root = root or os.getpid()
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid = int(fields[1])
        cpu = sum(int(x) for x in fields[11:15]) / TICKS
        stats[int(entry.name)] = (ppid, cpu)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += [p for p, (ppid, _) in stats.items() if ppid == pid]
    return total


def _headers(i: int, now_ms: int) -> tuple[int, list[tuple[str, bytes]]]:
    at = now_ms - 2 * HOUR_MS + (i * 7919) % (2 * HOUR_MS)
    return at, [
        (envelope.MESSAGE_ID, f"b{i:09d}".encode()),
        (envelope.GROUP_ID, f"g{i % 1000}".encode()),
        (envelope.PRODUCED_AT, str(at).encode()),
    ]


def _numbered(
    first: int, count: int, until: float
) -> Iterator[tuple[int, int, list[tuple[str, bytes]]]]:
    """Messages ``first`` … ``first + count - 1``: each number, timestamp and headers; ends
    early (looked at every 10,000) once the monotonic clock is past ``until``."""
    now = int(time.time() * 1000)
    for i in range(first, first + count):
        if i % 10_000 == 0 and time.monotonic() > until:
            return
        at, headers = _headers(i, now)
        yield i, at, headers


def fill_kafka(bootstrap: str, topic: str, first: int, count: int, size: int, until: float) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "enable.idempotence": True}
    )
    payload = os.urandom(size)
    sent = 0
    for _, at, headers in _numbered(first, count, until):
        while True:
            try:
                producer.produce(topic, payload, key=headers[1][1], headers=headers, timestamp=at)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        producer.poll(0)
    producer.flush(60)
    return sent


def fill_pulsar(url: str, topic: str, first: int, count: int, size: int, until: float) -> int:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producers = [
        client.create_producer(
            f"persistent://public/default/{topic}-partition-{p}",
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        for p in range(PARTITIONS)
    ]
    payload = os.urandom(size)
    sent = 0
    for i, at, headers in _numbered(first, count, until):
        producers[i % PARTITIONS].send_async(
            payload,
            None,
            properties=wire.properties(tuple(headers), headers[1][1]),
            partition_key=wire.partition_key(headers[1][1]),
            event_timestamp=at,
        )
        sent += 1
    for producer in producers:
        producer.flush()
    client.close()
    return sent


async def _topics(end: Endpoints, names: tuple[str, str], create: bool) -> list[dict[int, int]]:
    kafka_cfg = KafkaClusterConfig(bootstrap_servers=end.kafka)
    pulsar_cfg = PulsarClusterConfig(service_url=end.pulsar, admin_url=end.pulsar_admin)
    async with open_store(kafka_cfg) as kafka, open_store(pulsar_cfg) as pulsar:
        stores = (kafka, pulsar)
        if create:
            for store, name in zip(stores, names, strict=True):
                await store.create_topic(name, PARTITIONS, retention_ms=6 * HOUR_MS)
            return []
        ends = [await s.end_positions(n) for s, n in zip(stores, names, strict=True)]
        return ends


async def _delete(end: Endpoints, names: tuple[str, str]) -> None:
    kafka_cfg = KafkaClusterConfig(bootstrap_servers=end.kafka)
    pulsar_cfg = PulsarClusterConfig(service_url=end.pulsar, admin_url=end.pulsar_admin)
    async with open_store(kafka_cfg) as kafka, open_store(pulsar_cfg) as pulsar:
        for store, name in ((kafka, names[0]), (pulsar, names[1])):
            try:
                await store.delete_topic(name)
            except Exception as exc:  # report, keep cleaning
                print(f"could not delete {name}: {exc}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--pulsar-share", type=float, default=0.1)
    p.add_argument("--size", type=int, default=200, help="payload bytes")
    p.add_argument("--fill-seconds", type=float, default=240.0)
    p.add_argument("--master", default="local[2]")
    add_run_args(p)
    args = p.parse_args(argv)
    end = Endpoints.read(args.services_file)
    run = uuid.uuid4().hex[:8]
    names = (f"bench.{run}.export.1", f"bench.{run}.export.2")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="httpbus-bench-export-"))
    out = workdir / "parquet"
    on_pulsar = int(args.messages * args.pulsar_share)
    on_kafka = args.messages - on_pulsar
    load_before = os.getloadavg()
    asyncio.run(_topics(end, names, create=True))
    try:
        t0 = time.monotonic()
        budget = t0 + args.fill_seconds
        sent_k = fill_kafka(end.kafka, names[0], 0, on_kafka, args.size, budget)
        sent_p = fill_pulsar(end.pulsar, names[1], on_kafka, on_pulsar, args.size, budget)
        fill_s = time.monotonic() - t0
        total = sent_k + sent_p
        print(f"filled {sent_k:,} on Kafka + {sent_p:,} on Pulsar in {fill_s:.1f}s")
        k_ends, p_ends = asyncio.run(_topics(end, names, create=False))
        _export(args, end, names, (k_ends, p_ends), out, total, load_before)
    finally:
        asyncio.run(_delete(end, names))
        shutil.rmtree(workdir, ignore_errors=True)


def _export(
    args: argparse.Namespace,
    end: Endpoints,
    names: tuple[str, str],
    ends: tuple[dict[int, int], dict[int, int]],
    out: Path,
    total: int,
    load_before: tuple[float, float, float],
) -> None:
    from scripts.realservices.__main__ import DEFAULT_CACHE
    from scripts.realservices.maven import spark_jars
    from spark.export import export_parquet
    from spark.messages import read_timeline
    from spark.plan import KafkaSource, PositionRange, PulsarSource, SegmentPlan, TimelinePlan
    from spark.session import build_session, describe

    def ranges(found: dict[int, int]) -> dict[int, PositionRange]:
        return {q: PositionRange(start=0, end=e) for q, e in found.items()}

    plan = TimelinePlan(
        project="bench",
        topic="export",
        segments=[
            SegmentPlan(
                segment=1,
                storage_topic=names[0],
                source=KafkaSource(bootstrap_servers=end.kafka),
                ranges=ranges(ends[0]),
            ),
            SegmentPlan(
                segment=2,
                storage_topic=names[1],
                source=PulsarSource(service_url=end.pulsar),
                ranges=ranges(ends[1]),
            ),
        ],
    )
    t0 = time.monotonic()
    spark = build_session(args.master, jars=spark_jars(DEFAULT_CACHE), app_name="bench-export")
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.monotonic() - t0
    print(f"Spark session started in {start_s:.1f}s: {describe(spark)}")
    cpu_before = tree_cpu_seconds()
    with Cpu(tree_cpu_seconds) as cpu:
        t1 = time.monotonic()
        result = export_parquet(read_timeline(spark, plan), str(out))
        took = time.monotonic() - t1
    cpu_s = tree_cpu_seconds() - cpu_before
    written = spark.read.parquet(str(out)).count()
    load_after = os.getloadavg()
    spark.stop()
    print_table(
        ["figure", "value"],
        [
            ["messages produced", fmt(total, 0)],
            ["messages exported", fmt(result.messages, 0)],
            ["read back from Parquet", fmt(written, 0)],
            ["hours", str(len(result.hours))],
            ["export seconds", fmt(took, 2)],
            ["messages/s", fmt(result.messages / took, 0)],
            ["CPU µs per message (driver+JVM+workers)", fmt(cpu_s / max(1, total) * 1e6, 1)],
            ["CPU of the tree (100% = one core)", f"{fmt(cpu.process * 100)}%"],
            ["host CPU (100% = all cores)", f"{fmt(cpu.host * 100)}%"],
            ["load average before (1/5/15 min)", " ".join(f"{x:.2f}" for x in load_before)],
            ["load average after (1/5/15 min)", " ".join(f"{x:.2f}" for x in load_after)],
        ],
    )
    if written != result.messages or result.messages != total:
        print(f"MISMATCH: produced {total}, exported {result.messages}, read back {written}")


if __name__ == "__main__":
    main()
