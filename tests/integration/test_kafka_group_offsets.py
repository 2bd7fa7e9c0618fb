"""Group positions read and committed while a broker starts or freezes must never kill the
process: librdkafka's AdminClient did (``segments/kafka/offsets.py`` has the story), so the
store goes through a consumer of the group instead.

- A broker that started a moment ago: ``list_consumer_group_offsets`` meeting a coordinator
  still loading SIGSEGVed one run in three, and a delivery worker in CI.
- A broker frozen for ~30 s under commits, then thawed: ``alter_consumer_group_offsets``
  aborted the process (an assertion in librdkafka) 2 runs in 2.

Each test starts a broker of its own (the suite's shared one is never signalled) and drives the
store from a child process, so a crash fails the test instead of taking pytest with it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dedicated import DedicatedKafka, dedicated_kafka

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


FROZEN = """
import asyncio, sys
from core.errors import StorageUnavailable
from segments.config import KafkaClusterConfig
from segments.kafka.config import KafkaSettings
from segments.kafka.store import KafkaSegmentStore

async def main() -> None:
    config = KafkaClusterConfig(bootstrap_servers=sys.argv[1], produce_timeout_s=3)
    store = KafkaSegmentStore(KafkaSettings.from_config(config))
    await store.start()
    await store.create_topic("frozen", 2, retention_ms=60_000)
    await store.commit("frozen", "g", {0: 0, 1: 0})
    print("ready", flush=True)
    sys.stdin.readline()  # the broker is frozen now
    for _ in range(6):  # ~36 s: past librdkafka's 10 s socket timeouts
        for call in (
            lambda: store.commit("frozen", "g", {0: 1, 1: 1}),
            lambda: store.committed("frozen", "g"),
        ):
            try:
                await call()
            except StorageUnavailable:
                pass
    print("thaw", flush=True)
    sys.stdin.readline()  # the broker runs again
    for _ in range(30):
        try:
            await store.commit("frozen", "g", {0: 2, 1: 2})
            break
        except StorageUnavailable:
            await asyncio.sleep(1)
    assert await store.committed("frozen", "g") == {0: 2, 1: 2}
    await asyncio.sleep(3)  # what librdkafka still had queued
    await store.aclose()
    print("survived", flush=True)

asyncio.run(main())
"""


def test_commits_through_a_frozen_broker_never_abort_the_process(tmp_path: Path) -> None:
    kafka = DedicatedKafka(tmp_path / "run")
    kafka.start()
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", FROZEN, kafka.bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            kafka.signal(signal.SIGSTOP)
            child.stdin.write("\n")
            child.stdin.flush()
            lines = []
            while (line := child.stdout.readline()) and line.strip() != "thaw":
                lines.append(line)
            kafka.signal(signal.SIGCONT)
            child.stdin.write("\n")
            child.stdin.flush()
            out, _ = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    finally:
        kafka.stop()
    # -6 is the abort of the AdminClient's path
    assert child.returncode == 0, (child.returncode, "".join(lines)[-1000:], out[-2000:])
    assert "survived" in out
