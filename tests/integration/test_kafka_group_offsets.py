"""Group positions read while a broker starts must never kill the process: librdkafka's
AdminClient did (``list_consumer_group_offsets`` meeting a coordinator still loading SIGSEGVed
one run in three, and a delivery worker in CI; ``segments/kafka/offsets.py`` has the story),
so the store reads them through a consumer of the group instead.

The test starts a broker of its own (the suite's shared one is never signalled) and drives the
store from a child process, so a crash fails the test instead of taking pytest with it.
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
