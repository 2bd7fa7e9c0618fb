"""The trace index benchmark: how fast the audit trail is indexed, and how fast one message is
looked up once the index holds many.

It fills ``trace_events`` (``reports.trace.TraceIndex``, the indexer's own insert) with the
events of ``--messages`` messages, ``--events`` each (accepted, then attempted/delivered for
two subscriptions: 5 by default), in batches of ``--batch`` as the indexer writes them, and
prints events indexed per second with the CPU per event. Beside it runs the baseline: the same
rows through a bare ``executemany`` INSERT of the database driver (no conflict clause, no
SQLAlchemy), on a table of the same shape. Then it looks up ``--lookups`` random message ids
(``TraceIndex.message``) and prints p50/p99 latency, and the same for the last messages of a
group. SQLite by default (a file under /tmp); ``--url postgresql://…`` for PostgreSQL. It
prints figures, never asserts. Usage::

    .venv/bin/python bench/trace.py [--messages 1000000] [--url sqlite:////tmp/trace-bench.db]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sqlite3
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from core.audit import AuditEvent, AuditType
from reports import migrate
from reports.trace import SourcedEvent, TraceIndex

SUBS = ("shop/mailer", "shop/search")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _events(messages: int, per_message: int) -> Iterator[SourcedEvent]:
    kinds = [AuditType.ACCEPTED] + [AuditType.ATTEMPTED, AuditType.DELIVERED] * len(SUBS)
    at = 1_700_000_000_000
    for m in range(messages):
        mid = f"01J{m:023d}"
        for i, kind in enumerate(kinds[:per_message]):
            sub = None if kind is AuditType.ACCEPTED else SUBS[(i - 1) // 2 % len(SUBS)]
            event = AuditEvent(
                type=kind,
                message_id=mid,
                project="shop",
                topic="orders",
                subscription=sub,
                group=f"g{m % 1000}",
                at_ms=at + m,
                attempt=1 if sub else None,
                status=204 if sub else None,
                segment=1,
                partition=m % 4,
                position=m // 4,
                size=1024,
            )
            yield SourcedEvent(f"{m % 4}:{m}:{i}", event)


def _batches(events: Iterator[SourcedEvent], size: int) -> Iterator[list[SourcedEvent]]:
    batch: list[SourcedEvent] = []
    for event in events:
        batch.append(event)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def bench_index(index: TraceIndex, messages: int, per_message: int, batch: int) -> None:
    rows = 0
    wall, cpu = time.perf_counter(), _cpu()
    for chunk in _batches(_events(messages, per_message), batch):
        index.insert(chunk)
        rows += len(chunk)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    print(
        f"TraceIndex.insert: {rows:,} events in {wall:.1f} s = {rows / wall:,.0f} events/s, "
        f"{cpu / rows * 1e6:.1f} µs CPU/event"
    )


def bench_baseline(path: Path, messages: int, per_message: int, batch: int) -> None:
    """The same rows through sqlite3's executemany, no conflict clause, no SQLAlchemy."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, source TEXT UNIQUE, message_id TEXT, project "
        "TEXT, topic TEXT, subscription TEXT, type TEXT, at_ms INTEGER, group_id TEXT, "
        "segment INTEGER, partition INTEGER, position INTEGER, attempt INTEGER, status "
        "INTEGER, size INTEGER, produced_at_ms INTEGER, error TEXT)"
    )
    conn.execute("CREATE INDEX a ON t (project, topic, message_id)")
    conn.execute("CREATE INDEX b ON t (project, topic, group_id, at_ms)")
    conn.execute("CREATE INDEX c ON t (at_ms)")
    columns = list(next(_events(1, 1)).row())
    sql = f"INSERT INTO t ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    rows = 0
    wall, cpu = time.perf_counter(), _cpu()
    for chunk in _batches(_events(messages, per_message), batch):
        with conn:
            conn.executemany(sql, [tuple(e.row().values()) for e in chunk])
        rows += len(chunk)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    print(
        f"baseline sqlite3 executemany: {rows / wall:,.0f} events/s, "
        f"{cpu / rows * 1e6:.1f} µs CPU/event"
    )
    conn.close()
    path.unlink(missing_ok=True)


def bench_lookups(index: TraceIndex, messages: int, lookups: int) -> None:
    rng = random.Random(7)
    times = []
    for _ in range(lookups):
        mid = f"01J{rng.randrange(messages):023d}"
        started = time.perf_counter()
        found = index.message("shop", "orders", mid)
        times.append(time.perf_counter() - started)
        assert found, mid
    groups = []
    for _ in range(min(lookups, 200)):
        started = time.perf_counter()
        index.group("shop", "orders", f"g{rng.randrange(1000)}", 20)
        groups.append(time.perf_counter() - started)
    for name, found in (("message by id", times), ("last 20 of a group", groups)):
        q = statistics.quantiles(found, n=100)
        print(
            f"look-up, {name}, {messages:,} messages indexed: p50 {q[49] * 1000:.2f} ms, "
            f"p99 {q[98] * 1000:.2f} ms ({len(found)} look-ups)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=5, help="events per message (1-5)")
    parser.add_argument("--batch", type=int, default=2_000, help="events per insert")
    parser.add_argument("--lookups", type=int, default=1_000)
    parser.add_argument("--url", default="sqlite:////tmp/trace-bench.db")
    parser.add_argument(
        "--reuse", action="store_true", help="look up in the index a previous run filled"
    )
    args = parser.parse_args()
    if args.url.startswith("sqlite:///") and not args.reuse:
        Path(args.url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.url}")
    migrate.upgrade(args.url)
    index = TraceIndex.from_url(args.url)
    try:
        if not args.reuse:
            bench_index(index, args.messages, args.events, args.batch)
        bench_lookups(index, args.messages, args.lookups)
    finally:
        index.close()
    if args.url.startswith("sqlite") and not args.reuse:
        bench_baseline(Path("/tmp/trace-bench-baseline.db"), args.messages, args.events, args.batch)


if __name__ == "__main__":
    main()
