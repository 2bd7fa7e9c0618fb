"""A broker that started a moment ago must not crash the process reading group positions.

librdkafka's AdminClient dies with SIGSEGV when ``list_consumer_group_offsets`` meets a
coordinator still loading (``segments/kafka/offsets.py`` has the story): one run in three on
a fresh broker did, and a delivery worker died so in CI. The store reads them through a
consumer of the group instead. Each round starts a broker of its own and, in a child process
(a segfault must not take pytest with it), reads and commits group positions at once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dedicated import dedicated_kafka

pytestmark = [pytest.mark.kafka]
ROUNDS = 3

CHILD = """
import asyncio, sys
from segments.config import KafkaClusterConfig
from segments.kafka.config import KafkaSettings
from segments.kafka.store import KafkaSegmentStore

async def main() -> None:
    config = KafkaClusterConfig(bootstrap_servers=sys.argv[1])
    store = KafkaSegmentStore(KafkaSettings.from_config(config))
    await store.start()
    await store.create_topic("fresh", 2, retention_ms=60_000)
    # At once, while the broker still loads its offsets topic; more groups than the store
    # keeps consumers for.
    groups = [store.committed("fresh", f"g{i}") for i in range(24)]
    assert await asyncio.gather(*groups) == [{}] * 24
    await store.commit("fresh", "g1", {0: 0, 1: 0})
    assert await store.committed("fresh", "g1") == {0: 0, 1: 0}
    assert await store.backlog("fresh", "g1") == {0: 0, 1: 0}
    await store.aclose()
    print("survived")

asyncio.run(main())
"""


def test_group_positions_on_a_fresh_broker_never_crash_the_process(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        with dedicated_kafka(tmp_path / f"run{round_}") as bootstrap:
            child = subprocess.run(
                [sys.executable, "-c", CHILD, bootstrap],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=Path(__file__).parents[2],
            )
        # -11 is the SIGSEGV of the AdminClient's path
        assert child.returncode == 0, (round_, child.returncode, child.stderr[-2000:])
        assert "survived" in child.stdout
