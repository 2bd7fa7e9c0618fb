"""The cost of topic schemas per message: validation alone, and publishing with and without.

In process, on the embedded metastore and store (no servers): it validates a small payload
and a 64 KiB one against an order schema (µs per message), then publishes batches of each
through the producer's ``Publisher`` to a topic without a schema and to one with it, and
prints msgs/s, µs per message and the ratio, with the load average before and after. It
never asserts timings. Usage::

    .venv/bin/python bench/schemas.py --seconds 3 --batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane.api.topic_schemas import add_version
from core.model import Capacity
from core.schemas import CompiledSchema
from producer_api.publish import Draft
from tests.support.producer import PROJECT, producer_env

MAX_CAPACITY = Capacity(max_qps=1_000_000, max_bytes_per_second=1024 * 1024 * 1024)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "maxLength": 64},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer", "minimum": 1},
                    "note": {"type": "string"},
                },
                "required": ["sku", "qty"],
            },
        },
    },
    "required": ["id", "amount", "currency"],
}


def payload(size: int) -> bytes:
    """A valid order of about ``size`` bytes (more lines for a larger one)."""
    order: dict[str, Any] = {"id": "o-1", "amount": 12.5, "currency": "EUR", "lines": []}
    while len(json.dumps(order)) < size:
        n = len(order["lines"])
        order["lines"].append({"sku": f"sku-{n}", "qty": 1 + n % 5, "note": "x" * 20})
    return json.dumps(order).encode()


def validation_us(data: bytes, seconds: float) -> float:
    compiled = CompiledSchema.compile(1, SCHEMA)
    assert compiled.problem(data) is None
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(10):
            compiled.problem(data)
        count += 10
    return elapsed / count * 1e6


async def publish_rate(topic: str, data: bytes, seconds: float, batch: int, env: Any) -> float:
    publisher = env.service.publisher
    drafts = [Draft(data, (), "application/json") for _ in range(batch)]
    await publisher.publish_many(PROJECT, topic, drafts)  # warm: load the topic, compile
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        results = await publisher.publish_many(PROJECT, topic, drafts)
        assert all(not isinstance(r, Exception) for r in results), results[0]
        count += batch
    return count / elapsed


async def main(seconds: float, batch: int) -> None:
    load_before = os.getloadavg()
    sizes = {"small": payload(120), "64KiB": payload(64 * 1024)}
    print(f"cpus {os.cpu_count()}; load average before {load_before}")
    print("\nvalidation alone (json.loads + jsonschema-rs Draft202012Validator, compiled once)")
    for name, data in sizes.items():
        print(f"  {name:6} {len(data):6} B  {validation_us(data, seconds):9.1f} µs/msg")
    # Capacity at its maximum: the benchmark measures the path, not the topic's limit.
    fields = {"max_message_bytes": 1 << 20, "capacity": MAX_CAPACITY}
    topics = {"plain": fields, "typed": fields}
    with tempfile.TemporaryDirectory() as tmp:
        async with producer_env(Path(tmp), topics) as env:
            await add_version(env.catalog, PROJECT, "typed", SCHEMA)
            print(f"\npublish_many, batches of {batch}, embedded store")
            print(f"  {'payload':8}{'no schema':>14}{'schema':>14}{'ratio':>8}{'+µs/msg':>10}")
            for name, data in sizes.items():
                n = batch if name == "small" else max(1, batch // 10)
                plain = await publish_rate("plain", data, seconds, n, env)
                typed = await publish_rate("typed", data, seconds, n, env)
                extra = (1 / typed - 1 / plain) * 1e6
                print(
                    f"  {name:8}{plain:>10.0f} m/s{typed:>10.0f} m/s"
                    f"{typed / plain:>8.2f}{extra:>10.1f}"
                )
    print(f"\nload average after {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.batch))
