"""Resend one message of a topic to one of its subscriptions (docs/operations.md, "Resend and
recover").

The message is found by its id in the trace index (``reports.trace``): its ``accepted`` event
names the segment, partition and position the producer stored it at. It is read back from
that segment and appended to the subscription's *replay topic* — the same topic a DLQ
unsideline writes to (:mod:`control_plane.services.dead_letters`) — marked as a resend
(``segments.subscription.dlq.RESEND``). The worker holding the subscription reads it there
like an unsidelined entry, runs it through the subscription's filter, and delivers it through
its own dispatch, signing, retries and DLQ, auditing ``resent`` first so the message's trace
shows it. Nothing is written where another subscription of the topic reads.

A subscription that never needed its internal topics (nothing ever failed or waited) has no
replay topic yet: the resend makes them while no worker runs the subscription (the seek's
step-aside, :meth:`.operations.SubscriptionOps.stepped_aside`), so its runners open them when
they start again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from control_plane.services.admin import Admin
from control_plane.services.operations import SubscriptionOps
from core.envelope import MESSAGE_ID, header
from core.errors import NotFound, StorageUnavailable
from core.model import Segment, Subscription, Topic
from reports.trace import TraceIndex
from segments import scan
from segments.protocol import SegmentStore, Stored
from segments.subscription import dlq
from segments.subscription.layout import ensure_layout, load_layout

READ_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Resent:
    """Where the resent message was read from, and where it waits to be delivered again."""

    message_id: str
    segment: int
    partition: int
    position: int
    replay_position: int


async def resend(
    admin: Admin, ops: SubscriptionOps, index: TraceIndex, project: str, name: str, mid: str
) -> Resent:
    """Resend message ``mid`` of the topic of ``project/name`` to that subscription only."""
    sub = await admin.catalog.get_subscription(project, name)
    topic = await admin.catalog.get_topic(sub.topic_project, sub.topic)
    qualified = f"{topic.project}/{topic.name}"
    rows = await asyncio.to_thread(index.message, topic.project, topic.name, mid)
    accepted = next((r for r in rows if r.type == "accepted"), None)
    if accepted is None or None in (accepted.segment, accepted.partition, accepted.position):
        raise NotFound(
            f"message {mid} of {qualified} is not in the trace index: check the id, or wait a "
            "few seconds if it was just published (older than the trace retention: it cannot "
            "be found by id)"
        )
    assert accepted.segment is not None and accepted.partition is not None
    assert accepted.position is not None
    segment = topic.segment(accepted.segment)
    if segment is None:
        raise NotFound(
            f"message {mid} was stored in segment {accepted.segment} of {qualified}, which was "
            "retired: the message is no longer stored"
        )
    where = (accepted.partition, accepted.position)
    msg = await _read(_store(admin, segment.cluster), segment, *where, mid)
    layout = await load_layout(admin.catalog.store, sub)
    if layout is None:
        async with ops.stepped_aside(project, name) as held:
            cluster = _internal_cluster(held, topic, segment)
            layout = await ensure_layout(admin.catalog.store, admin.stores, held, cluster)
    origin = f"{segment.id}:{accepted.partition}:{accepted.position}"
    store = _store(admin, layout.cluster)
    replayed = await dlq.resend(store, layout, msg, origin, qualified)
    return Resent(mid, segment.id, *where, replayed)


def _store(admin: Admin, cluster: str) -> SegmentStore:
    store = admin.stores.get(cluster)
    if store is None:
        raise StorageUnavailable(f"storage cluster {cluster!r} is not configured here")
    return store


def _internal_cluster(sub: Subscription, topic: Topic, segment: Segment) -> str:
    """Where a worker would make the internal topics: on its consume segment's cluster."""
    pointer = sub.consume_pointer
    consume = topic.segment(pointer.segment_id) if pointer is not None else None
    return (consume or segment).cluster


async def _read(
    store: SegmentStore, segment: Segment, partition: int, position: int, mid: str
) -> Stored:
    """The message at ``partition``/``position`` of ``segment``, checked to be ``mid``. A read
    that comes back empty (slow under load) is read again while the store holds more
    (:func:`segments.scan.read_range`), not answered with a ``NotFound``."""
    name = segment.storage_topic
    found = await scan.read_all(
        store, name, partition, position, position + 1, timeout=READ_TIMEOUT_S, max_records=1
    )
    msg = found[0] if found else None
    if msg is None or msg.position != position or header(msg.headers, MESSAGE_ID) != mid:
        raise NotFound(
            f"message {mid} is no longer at {segment.id}:{partition}:{position} of its "
            "segment's storage (past the storage's retention)"
        )
    return msg
