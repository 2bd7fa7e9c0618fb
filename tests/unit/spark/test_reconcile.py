"""The reconciliation on a trail with planted faults names exactly those messages: lost (no
terminal event past the horizon), late (terminal after it), duplicate deliveries with their
count; in-flight ones are pending, not lost; filtered and dead-lettered are terminal; exact
copies of an event (a record written twice) are no duplicate; a terminal outcome without an
accepted event counts as unaccepted; a subscription created later expects only later messages."""

from __future__ import annotations

from typing import Any

from core.audit import AuditSubscription, AuditType, FindingKind
from core.shards import Shard
from spark.reconcile import reconcile, subscriptions_frame
from spark.schema import EVENT_SCHEMA
from tests.support.audit_events import SUB, T0, ev, frame

A, D, F, DL, AT = (
    AuditType.ACCEPTED,
    AuditType.DELIVERED,
    AuditType.FILTERED,
    AuditType.DEAD_LETTERED,
    AuditType.ATTEMPTED,
)
R = AuditType.RESENT
HORIZON = 60_000


def test_the_schema_has_every_field_of_the_event() -> None:
    from core.audit import AuditEvent

    assert EVENT_SCHEMA.fieldNames() == list(AuditEvent.model_fields)


def test_the_batch_job_keeps_every_column_the_reconciliation_reads() -> None:
    from spark.jobs import JOB_COLUMNS
    from spark.reconcile import COLUMNS

    assert set(COLUMNS) <= set(JOB_COLUMNS)


def _trail() -> list[Any]:
    events = []
    for i in range(100):  # 100 healthy messages
        mid = f"ok-{i}"
        events += [ev(A, mid, i), ev(AT, mid, i + 5, attempt=1, status=200), ev(D, mid, i + 10)]
    events += [ev(A, "filt", 1), ev(F, "filt", 3)]
    events += [ev(A, "dead", 1), ev(DL, "dead", 50_000)]
    events += [ev(A, "lost-1", 2), ev(AT, "lost-1", 4, status=503)]  # attempted, never terminal
    events += [ev(A, "lost-2", 3)]
    events += [ev(A, "late-1", 4), ev(D, "late-1", 4 + HORIZON + 1)]
    events += [ev(A, "dup-1", 5), ev(D, "dup-1", 6), ev(D, "dup-1", 900)]
    events += [ev(A, "dup-3", 5), ev(D, "dup-3", 6), ev(D, "dup-3", 7), ev(D, "dup-3", 8)]
    # Resent by an operator: its second delivery was asked for, no duplicate; one more is.
    events += [ev(A, "resent", 5), ev(D, "resent", 6), ev(R, "resent", 99), ev(D, "resent", 100)]
    events += [ev(A, "dup-r", 5), ev(D, "dup-r", 6), ev(R, "dup-r", 9), ev(D, "dup-r", 10)]
    events += [ev(D, "dup-r", 11)]
    copy = ev(D, "copy", 7)
    events += [ev(A, "copy", 6), copy, copy]  # the same event twice: the sink wrote it twice
    events += [ev(A, "inflight", 200_000 - 1_000)]  # accepted a second before as_of
    events += [ev(D, "orphan", 10)]  # its accepted event was lost with a crashed producer
    events += [ev(A, "other-topic", 10, topic="payments")]  # no subscription reads it
    return events


def test_planted_faults_are_named_exactly(spark: Any) -> None:
    subs = subscriptions_frame(
        spark, [AuditSubscription(name=SUB, topic_project="shop", topic="orders")]
    )
    result = reconcile(
        frame(spark, _trail()),
        subs,
        since_ms=T0,
        until_ms=T0 + 300_000,
        as_of_ms=T0 + 200_000,
        horizon_ms=HORIZON,
    )
    by_kind = {k: sorted(f.message_id for f in result.findings if f.kind is k) for k in FindingKind}
    assert by_kind[FindingKind.LOST] == ["lost-1", "lost-2"]
    assert by_kind[FindingKind.LATE] == ["late-1"]
    assert by_kind[FindingKind.DUPLICATE] == ["dup-1", "dup-3", "dup-r"]
    counts = {f.message_id: f.count for f in result.findings if f.kind is FindingKind.DUPLICATE}
    assert counts == {"dup-1": 2, "dup-3": 3, "dup-r": 2}
    (tally,) = result.tallies
    assert tally.subscription == SUB
    assert tally.expected == 100 + 11
    assert (tally.delivered, tally.filtered, tally.dead_lettered) == (105, 1, 1)
    assert (tally.lost, tally.late, tally.pending, tally.duplicates) == (2, 1, 1, 4)
    assert result.unaccepted == 1
    lost = next(f for f in result.findings if f.message_id == "lost-2")
    assert (lost.subscription, lost.accepted_at_ms, lost.terminal_at_ms) == (SUB, T0 + 3, None)


def test_a_later_subscription_and_the_window_bound_what_is_expected(spark: Any) -> None:
    subs = subscriptions_frame(
        spark,
        [
            AuditSubscription(name=SUB, topic_project="shop", topic="orders"),
            AuditSubscription(
                name="shop/late-sub", topic_project="shop", topic="orders", created_at_ms=T0 + 100
            ),
        ],
    )
    events = [ev(A, "early", 0), ev(D, "early", 1), ev(A, "after", 150), ev(D, "after", 151)]
    events += [ev(D, "after", 152, subscription="shop/late-sub"), ev(A, "outside", 5_000)]
    result = reconcile(
        frame(spark, events),
        subs,
        since_ms=T0,
        until_ms=T0 + 1_000,
        as_of_ms=T0 + 10_000_000,
        horizon_ms=HORIZON,
    )
    tallies = {t.subscription: t for t in result.tallies}
    assert (tallies[SUB].expected, tallies[SUB].lost) == (2, 0)
    assert (tallies["shop/late-sub"].expected, tallies["shop/late-sub"].lost) == (1, 0)
    assert result.findings == []


def _legitimately_waiting() -> tuple[list[Any], list[AuditSubscription]]:
    """One topic and subscription per reason to wait, and two real losses (the issue's
    "an audit that never cries wolf"). As of T0 + 200 s, horizon 60 s."""
    RE, CI, PA, RS = AuditType.RETRIED, AuditType.CIRCUIT, AuditType.PAUSED, AuditType.RESUMED
    DI, EN = AuditType.DISABLED, AuditType.ENABLED
    subs, events = [], []

    def scenario(name: str, trail: list[tuple[Any, ...]], **sub: Any) -> None:
        topic = f"t-{name}"
        subs.append(
            AuditSubscription(name=f"shop/{name}", topic_project="shop", topic=topic, **sub)
        )
        for kind, mid, at, *extra in trail:
            fields = extra[0] if extra else {}
            events.append(
                ev(
                    kind,
                    mid,
                    at,
                    topic=topic,
                    subscription=None if kind is A else f"shop/{name}",
                    **fields,
                )
            )

    scenario("deliver-at", [(A, "d1", 0, {"due_at_ms": T0 + 190_000})])
    scenario("delay", [(A, "d2", 0)], delay_ms=150_000)
    scenario(
        "retry",
        [(A, "r1", 0), (AT, "r1", 5, {"status": 503}), (RE, "r1", 6, {"due_at_ms": T0 + 170_000})],
    )
    scenario(
        "pause",
        [(PA, "", 10), (A, "p1", 0), (A, "p2", 0), (RS, "", 150_000), (D, "p2", 150_500)],
    )
    scenario("paused-now", [(PA, "", 10), (A, "pn", 0)], paused=True)
    scenario(  # disabled by its failing endpoint, enabled at 150 s: one delivered, one due
        "disabled",
        [(DI, "", 10), (A, "x1", 0), (A, "x2", 0), (EN, "", 150_000), (D, "x2", 150_500)],
    )
    scenario(
        "circuit",
        [
            (CI, "", 20, {"circuit_to": "open"}),
            (CI, "", 100_000, {"circuit_to": "half_open"}),
            (CI, "", 120_000, {"circuit_to": "closed"}),
            (A, "c1", 0),
            (D, "c1", 125_000),
            (A, "c2", 0),  # the circuit closed at 120 s: due by 180 s, never delivered
        ],
    )
    scenario(
        "real",
        [
            (A, "lost", 0),  # nothing at all
            (A, "dlq", 0),
            (RE, "dlq", 100_000, {"due_at_ms": T0 + 140_000}),
            (DL, "dlq", 150_000),
        ],
    )
    return events, subs


def test_pauses_delays_retries_and_open_circuits_are_never_lost(spark: Any) -> None:
    events, subs = _legitimately_waiting()
    result = reconcile(
        frame(spark, events),
        subscriptions_frame(spark, subs),
        since_ms=T0,
        until_ms=T0 + 1_000,
        as_of_ms=T0 + 200_000,
        horizon_ms=HORIZON,
    )
    lost = sorted(
        (f.subscription, f.message_id) for f in result.findings if f.kind is FindingKind.LOST
    )
    assert lost == [("shop/circuit", "c2"), ("shop/real", "lost")]
    assert [f for f in result.findings if f.kind is FindingKind.LATE] == []
    pending = {t.subscription: t.pending for t in result.tallies if t.pending}
    assert pending == {
        "shop/deliver-at": 1,
        "shop/delay": 1,
        "shop/retry": 1,
        "shop/pause": 1,
        "shop/paused-now": 1,
        "shop/disabled": 1,
    }
    tallies = {t.subscription: t for t in result.tallies}
    assert (tallies["shop/pause"].delivered, tallies["shop/circuit"].delivered) == (1, 1)
    assert tallies["shop/real"].dead_lettered == 1


def _topic(
    name: str, trail: list[tuple[Any, ...]], **sub: Any
) -> tuple[list[Any], AuditSubscription]:
    """Subscription ``shop/name`` on topic ``t-name`` and its trail: ``(type, id, at,
    fields)``; accepted events carry no subscription."""
    topic, full = f"t-{name}", f"shop/{name}"
    events = [
        ev(kind, mid, at, topic=topic, subscription=None if kind is A else full, **fields)
        for kind, mid, at, fields in trail
    ]
    return events, AuditSubscription(name=full, topic_project="shop", topic=topic, **sub)


def _judge(spark: Any, *topics: tuple[list[Any], AuditSubscription]) -> Any:
    events = [e for trail, _ in topics for e in trail]
    return reconcile(
        frame(spark, events),
        subscriptions_frame(spark, [sub for _, sub in topics]),
        since_ms=T0,
        until_ms=T0 + 1_000,
        as_of_ms=T0 + 200_000,
        horizon_ms=HORIZON,
    )


def _named(result: Any, kind: FindingKind) -> list[str]:
    return sorted(f.message_id for f in result.findings if f.kind is kind)


def test_a_grouped_message_waits_behind_its_group(spark: Any) -> None:
    """Followers of a head that is retrying (in the window or before it), or that was
    delivered late after a long retry, are pending or on time, never lost or late; a follower
    never delivered after its head was is lost, and what waits behind it is pending."""
    RE = AuditType.RETRIED

    def acc(mid: str, at: int, group: str | None, position: int, segment: int = 1) -> Any:
        where = {"group": group, "segment": segment, "partition": 0, "position": position}
        return (A, mid, at, where)

    retrying = {"due_at_ms": T0 + 170_000}  # as of 200 s: due 30 s ago, inside the horizon
    trail = [
        # g1: the head waits in a delay level; its followers have no event at all
        acc("g1-head", 0, "g1", 0),
        (AT, "g1-head", 5, {"status": 503}),
        (RE, "g1-head", 6, retrying),
        acc("g1-next", 0, "g1", 1),
        acc("g1-last", 1, "g1", 2),
        # g2: the head delivered after a long retry; a follower right after it (not late),
        # another one still on its way (due from the follower's delivery: pending)
        acc("g2-head", 0, "g2", 3),
        (RE, "g2-head", 10, {"due_at_ms": T0 + 140_000}),
        (D, "g2-head", 150_000, {}),
        acc("g2-next", 0, "g2", 4),
        (D, "g2-next", 150_100, {}),
        acc("g2-last", 0, "g2", 5),
        # g3: a real loss: the head delivered at once, its follower never; behind it: pending
        acc("g3-head", 0, "g3", 6),
        (D, "g3-head", 10, {}),
        acc("g3-lost", 0, "g3", 7),
        acc("g3-behind", 0, "g3", 8),
        # g4: produce order is segment first: position 0 of segment 2 follows segment 1
        acc("g4-head", 0, "g4", 9, segment=1),
        (RE, "g4-head", 10, retrying),
        acc("g4-next", 1, "g4", 0, segment=2),
        # g5: its head was accepted before the window and still retries
        acc("g5-head", -10_000, "g5", 10),
        (RE, "g5-head", 10, retrying),
        acc("g5-next", 0, "g5", 11),
        # ungrouped: nothing holds it
        acc("u-lost", 0, None, 12),
    ]
    result = _judge(spark, _topic("grouped", trail))
    assert _named(result, FindingKind.LOST) == ["g3-lost", "u-lost"]
    assert _named(result, FindingKind.LATE) == []
    (tally,) = result.tallies
    assert tally.expected == 13  # the head before the window is not expected, only waited for
    assert (tally.delivered, tally.lost, tally.late) == (3, 2, 0)
    assert tally.pending == 13 - 3 - 2


def _owned_by(shard: Shard, count: int = 40) -> list[str]:
    return [g for g in (f"grp-{i}" for i in range(count)) if shard.owns(g, 0)]


def test_a_shard_blocks_only_the_messages_it_owns(spark: Any) -> None:
    """Two shards, each with its own circuit (and, on another subscription, its own pause):
    shard 0 blocked until 150 s, shard 1 until 30 s. Shard 0's messages (ungrouped on an even
    partition, or of a group whose CRC32 is even) are pending or on time; shard 1's messages
    never delivered are lost; the closing of shard 1's circuit does not end shard 0's."""
    CI, PA, RS = AuditType.CIRCUIT, AuditType.PAUSED, AuditType.RESUMED
    s0, s1 = Shard(0, 2), Shard(1, 2)
    g0, g1 = _owned_by(s0)[0], _owned_by(s1)[0]

    def acc(mid: str, partition: int, group: str | None = None) -> Any:
        return (A, mid, 0, {"group": group, "segment": 1, "partition": partition, "position": 0})

    messages = [
        acc("s0-late", 2),
        (D, "s0-late", 155_000, {}),  # 5 s after its shard's circuit closed: on time
        acc("s0-waiting", 0),  # 50 s of unblocked time: pending
        acc("s0-group", 3, g0),  # odd partition, but its group is shard 0's
        acc("s1-lost", 1),
        acc("s1-group", 0, g1),  # even partition, but its group is shard 1's
    ]

    def circuit(shard: Shard, at: int, to: str) -> Any:
        return (CI, "", at, {"circuit_to": to, "shard": shard.label})

    def pause(shard: Shard, at: int, kind: Any) -> Any:
        return (kind, "", at, {"shard": shard.label})

    circuits = [circuit(s0, 10, "open"), circuit(s1, 20, "open")]
    circuits += [circuit(s1, 30_000, "closed"), circuit(s0, 150_000, "closed")]
    pauses = [pause(s0, 10, PA), pause(s1, 10, PA), pause(s1, 30_000, RS)]
    pauses += [pause(s0, 150_000, RS)]  # shard 0's worker resumed last
    result = _judge(
        spark, _topic("sharded", circuits + messages), _topic("paused", pauses + messages)
    )
    lost = sorted(
        (f.subscription, f.message_id) for f in result.findings if f.kind is FindingKind.LOST
    )
    expected_lost = [
        (f"shop/{s}", m) for s in ("paused", "sharded") for m in ("s1-group", "s1-lost")
    ]
    assert lost == expected_lost
    assert _named(result, FindingKind.LATE) == []
    for tally in result.tallies:
        assert (tally.expected, tally.delivered, tally.pending, tally.lost) == (5, 1, 2, 2)
