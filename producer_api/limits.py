"""Per-topic rate limits from the topic's capacity: messages and bytes per second."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.errors import Throttled
from core.model import Capacity, Topic
from core.quotas import DebtBucket

BURST_S = 1.0  # a topic saves up to one second of its capacity


class TopicLimits:
    """Two buckets per topic (one second of burst), rebuilt when the capacity changes.
    Each producer process enforces the whole capacity: with N processes behind a balancer a
    topic can take up to N times it (documented; Hermes and Varadhi do the same).

    A request is charged by its message count and its bytes (payloads and stored headers).

    - **Bytes: one rule for a single message and a batch.** A request larger than one second
      of ``max_bytes_per_second`` passes when the bucket is full and leaves it in debt
      (:class:`~core.quotas.DebtBucket`): nothing more passes until the debt is paid, so the
      topic's long-run rate stays at its capacity, and the answer to a request depends on its
      size only, never on how many messages carry the bytes. (A batch over the burst used to
      be refused for ever while a single message of more bytes passed: issue 40.)
    - **Messages**: a batch of more messages than ``max_qps`` never fits and is refused
      whatever the bucket holds (one message always fits, so no single message is refused
      for it): split it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str], tuple[Capacity, DebtBucket, DebtBucket]] = {}

    def check(self, topic: Topic, messages: int, size: int) -> None:
        now = self._clock()
        key = (topic.project, topic.name)
        entry = self._buckets.get(key)
        if entry is None or (entry[0] is not topic.capacity and entry[0] != topic.capacity):
            cap = topic.capacity
            entry = (
                cap,
                DebtBucket(cap.max_qps, BURST_S, now),
                DebtBucket(cap.max_bytes_per_second, BURST_S, now),
            )
            self._buckets[key] = entry
        _, qps, rate = entry
        if messages > qps.burst:
            raise _never_fits(topic, messages, size)
        wait = qps.take(messages, now)
        if wait == 0.0:
            wait = rate.take(size, now)
            if wait > 0.0:
                qps.give_back(messages)  # nothing was accepted
        if wait > 0.0:
            raise Throttled(
                f"topic {topic.project}/{topic.name} is over its capacity "
                f"({topic.capacity.max_qps} msg/s, {topic.capacity.max_bytes_per_second} B/s); "
                "retry later or raise the topic's capacity",
                retry_after=wait,
            )


def _never_fits(topic: Topic, messages: int, size: int) -> Throttled:
    cap = topic.capacity
    return Throttled(
        f"this request ({messages} messages) is more than topic {topic.project}/{topic.name} "
        f"takes in one second ({cap.max_qps} messages); send smaller batches",
        retry_after=1.0,
    )
