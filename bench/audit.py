"""The audit reconciliation on 1,000,000 generated audit events: Spark vs plain Python.

    .venv/bin/python bench/audit.py [--events 1000000] [--master local[*]] [--workdir DIR]

Generates a trail (accepted, attempted and delivered per message, with planted losses, late
outcomes, filtered and dead-lettered messages and duplicate deliveries) as JSON-lines files, as
``httpbus audit run`` exports them, then times:

- **spark**: :func:`spark.reconcile.reconcile` on those files (read, parse with the
  explicit schema, dedupe, join, aggregate, collect the findings), printed with its Spark config;
- **python**: the same reconciliation in plain Python (``json.loads`` per line, dicts) -- the
  baseline, one core.

Both must name the same lost / late / duplicate ids (checked, printed). Figures only, no
assertion on time. The JVM start is timed apart: a long-lived service pays it once.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

T0 = 1_700_000_000_000
SUBS = [("shop/billing", "orders"), ("shop/audit", "orders"), ("shop/pay", "payments")]
HORIZON = 300_000


def generate(folder: Path, events: int, seed: int = 7) -> dict[str, set[str]]:
    """Write about ``events`` events into ``folder``; the planted faults."""
    rng = random.Random(seed)
    planted: dict[str, set[str]] = {"lost": set(), "late": set(), "duplicate": set()}
    files = [(folder / f"part-{i}.jsonl").open("w") for i in range(8)]
    written, i = 0, 0
    while written < events:
        topic = "orders" if i % 4 else "payments"
        mid = f"m{i:08d}"
        at = T0 + i * 3  # ~3 ms apart: a million events span about an hour
        lines = [
            {
                "v": 1,
                "type": "accepted",
                "message_id": mid,
                "project": "shop",
                "topic": topic,
                "segment": 1,
                "partition": i % 8,
                "position": i,
                "at_ms": at,
                "produced_at_ms": at,
            }
        ]
        for sub, sub_topic in SUBS:
            if sub_topic != topic:
                continue
            common = {
                "v": 1,
                "message_id": mid,
                "project": "shop",
                "topic": topic,
                "subscription": sub,
                "segment": 1,
                "partition": i % 8,
                "position": i,
            }
            roll = rng.random()
            if roll < 0.0005:
                planted["lost"].add(f"{sub}:{mid}")
                continue
            if roll < 0.001:
                planted["late"].add(f"{sub}:{mid}")
                lines.append({**common, "type": "delivered", "at_ms": at + HORIZON + 1})
                continue
            if roll < 0.05:
                lines.append({**common, "type": "filtered", "at_ms": at + 2})
                continue
            if roll < 0.052:
                lines.append({**common, "type": "dead_lettered", "at_ms": at + 2_000})
                continue
            lines.append(
                {**common, "type": "attempted", "at_ms": at + 5, "status": 200, "attempt": 1}
            )
            lines.append({**common, "type": "delivered", "at_ms": at + 6, "status": 200})
            if roll > 0.999:
                planted["duplicate"].add(f"{sub}:{mid}")
                lines.append({**common, "type": "delivered", "at_ms": at + 900, "status": 200})
        out = files[i % len(files)]
        for line in lines:
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
        written += len(lines)
        i += 1
    for f in files:
        f.close()
    return planted


def python_baseline(folder: Path, as_of: int, until: int) -> dict[str, set[str]]:
    """The reconciliation of spark.reconcile, in plain Python."""
    accepted: dict[str, tuple[str, int]] = {}
    terminal: dict[tuple[str, str], int] = {}
    deliveries: dict[tuple[str, str], int] = defaultdict(int)
    seen: set[str] = set()
    for path in sorted(folder.glob("*.jsonl")):
        with path.open() as f:
            for raw in f:
                if raw in seen:  # exact copies (none here, but the job pays for the check)
                    continue
                seen.add(raw)
                e = json.loads(raw)
                kind, mid = e["type"], e["message_id"]
                if kind == "accepted":
                    prev = accepted.get(mid)
                    if prev is None or e["at_ms"] < prev[1]:
                        accepted[mid] = (e["topic"], e["at_ms"])
                elif kind in ("delivered", "filtered", "dead_lettered"):
                    key = (e["subscription"], mid)
                    terminal[key] = min(terminal.get(key, e["at_ms"]), e["at_ms"])
                    if kind == "delivered":
                        deliveries[key] += 1
    found: dict[str, set[str]] = {"lost": set(), "late": set(), "duplicate": set()}
    for mid, (topic, at) in accepted.items():
        if at >= until:
            continue
        for sub, sub_topic in SUBS:
            if sub_topic != topic:
                continue
            done = terminal.get((sub, mid))
            if done is None:
                if as_of - at > HORIZON:
                    found["lost"].add(f"{sub}:{mid}")
            elif done - at > HORIZON:
                found["late"].add(f"{sub}:{mid}")
            if deliveries.get((sub, mid), 0) > 1:
                found["duplicate"].add(f"{sub}:{mid}")
    return found


def spark_run(
    folder: Path, master: str, as_of: int, until: int
) -> tuple[dict[str, set[str]], float, float, dict[str, str]]:
    from core.audit import AuditSubscription
    from spark.reconcile import reconcile, subscriptions_frame
    from spark.schema import read_files
    from spark.session import build_session, describe

    t0 = time.perf_counter()
    spark = build_session(master, app_name="httpbus-bench-audit")
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()  # the JVM and the first job
    started = time.perf_counter() - t0
    subs = subscriptions_frame(
        spark, [AuditSubscription(name=s, topic_project="shop", topic=t) for s, t in SUBS]
    )
    t0 = time.perf_counter()
    result = reconcile(
        read_files(spark, str(folder)),
        subs,
        since_ms=0,
        until_ms=until,
        as_of_ms=as_of,
        horizon_ms=HORIZON,
    )
    took = time.perf_counter() - t0
    found: dict[str, set[str]] = defaultdict(set)
    for f in result.findings:
        found[f.kind.value].add(f"{f.subscription}:{f.message_id}")
    print(f"spark: {result.events} distinct events, {result.total('expected')} expected pairs")
    config = describe(spark)
    spark.stop()
    return dict(found), started, took, config


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args()
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="httpbus-bench-audit-"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    planted = generate(folder, args.events)
    size = sum(f.stat().st_size for f in folder.glob("*.jsonl"))
    lines = sum(1 for f in folder.glob("*.jsonl") for _ in f.open())
    took = time.perf_counter() - t0
    print(f"generated {lines:,} events ({size / 2**20:.0f} MiB) in {took:.1f}s in {folder}")
    as_of = until = T0 + 10 * 3_600_000
    found, jvm_s, spark_s, config = spark_run(folder, args.master, as_of, until)
    t0 = time.perf_counter()
    base = python_baseline(folder, as_of, until)
    python_s = time.perf_counter() - t0
    for kind in ("lost", "late", "duplicate"):
        same = found.get(kind, set()) == base[kind] == planted[kind]
        print(
            f"  {kind:9}: planted {len(planted[kind]):4}, spark {len(found.get(kind, ())):4}, "
            f"python {len(base[kind]):4}  {'same ids' if same else 'DIFFERENT'}"
        )
    print("spark config: " + ", ".join(f"{k}={v}" for k, v in config.items()))
    print(f"spark session start (JVM + first job): {jvm_s:.1f} s")
    print(f"reconciliation, spark : {spark_s:.1f} s  ({lines / spark_s:,.0f} events/s)")
    print(f"reconciliation, python: {python_s:.1f} s  ({lines / python_s:,.0f} events/s)")
    print(f"ratio spark/python time: {spark_s / python_s:.2f} (below 1: spark faster)")


if __name__ == "__main__":
    main()
