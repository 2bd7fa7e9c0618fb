"""Per-topic rate limits from the topic's capacity: messages and bytes per second."""

from __future__ import annotations

from core.errors import Throttled
from core.model import Capacity, Topic
from core.token_bucket import TokenBucket


class TopicLimits:
    """Two token buckets per topic (one second of burst), rebuilt when the capacity changes.
    Each producer process enforces the whole capacity: with N processes behind a balancer a
    topic can take up to N times it (documented; Hermes and Varadhi do the same).

    A request is charged by its message count and its bytes (payloads and stored headers).
    A batch that could never fit the burst (more messages than ``max_qps``, or more bytes
    than ``max_bytes_per_second``) is refused whatever the bucket holds: letting it through
    would let one request carry any rate. One message larger than the byte burst still
    passes when the bucket is full, so no message the topic takes is impossible to send."""

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
        if messages > qps.burst or (messages > 1 and size > rate.burst):
            raise _never_fits(topic, messages, size)
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


def _never_fits(topic: Topic, messages: int, size: int) -> Throttled:
    cap = topic.capacity
    return Throttled(
        f"this request ({messages} messages, {size} bytes) is more than topic "
        f"{topic.project}/{topic.name} takes in one second ({cap.max_qps} messages, "
        f"{cap.max_bytes_per_second} bytes); send smaller batches",
        retry_after=1.0,
    )
