"""Per-topic rate limits from the topic's capacity: messages and bytes per second."""

from __future__ import annotations

from core.errors import Throttled
from core.model import Capacity, Topic
from core.token_bucket import TokenBucket


class TopicLimits:
    """Two token buckets per topic (one second of burst), rebuilt when the capacity changes.
    Each producer process enforces the whole capacity: with N processes behind a balancer a
    topic can take up to N times it (documented; Hermes and Varadhi do the same)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tuple[Capacity, TokenBucket, TokenBucket]] = {}

    def check(self, topic: Topic, messages: int, size: int) -> None:
        key = (topic.project, topic.name)
        entry = self._buckets.get(key)
        if entry is None or (entry[0] is not topic.capacity and entry[0] != topic.capacity):
            cap = topic.capacity
            entry = (cap, TokenBucket(cap.max_qps), TokenBucket(cap.max_bytes_per_second))
            self._buckets[key] = entry
        _, qps, rate = entry
        wait = qps.take(messages)
        if wait == 0.0:
            wait = rate.take(size)
            if wait > 0.0:
                qps.give_back(messages)  # nothing was accepted
        if wait > 0.0:
            raise Throttled(
                f"topic {topic.project}/{topic.name} is over its capacity "
                f"({topic.capacity.max_qps} msg/s, {topic.capacity.max_bytes_per_second} B/s); "
                "retry later or raise the topic's capacity",
                retry_after=wait,
            )
