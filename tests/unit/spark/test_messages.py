"""The message columns of the segment-aware reader, from raw records (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from spark.messages import RAW_SCHEMA, kafka_options, messages
from spark.plan import (
    KafkaSource,
    PositionRange,
    PulsarSource,
    SegmentPlan,
    TimelinePlan,
    after,
    ends_of,
)


def _raw(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    keyed = [r if len(r) == len(RAW_SCHEMA) else (*r, None) for r in rows]
    return spark.createDataFrame(keyed, RAW_SCHEMA)


def test_envelope_headers_become_columns_and_missing_ones_fall_back(spark: Any) -> None:
    rows = [
        (
            1,
            "t.1",
            0,
            5,
            1_000,
            [("x-message-id", b"m\xe9"), ("x-group-id", b"g"), ("x-produced-at", b"2000")],
            b"\x00\xff",
        ),
        (1, "t.1", 1, 7, 3_000, [("x-produced-at", b"soon")], b""),
        (2, "t.2", 0, 9, 4_000, None, None),
        (2, "t.2", 0, 11, 4_000, None, None, b"k\xe9"),
    ]
    out = {r["position"]: r for r in messages(_raw(spark, rows), "x-message-id").collect()}
    assert out[5]["id"] == "mé" and out[5]["group"] == "g"  # latin-1, as core.envelope
    assert int(out[5]["produced_at"].timestamp() * 1000) == 2_000
    assert bytes(out[5]["payload"]) == b"\x00\xff"
    assert out[7]["id"] == "t.1:1:7" and out[7]["group"] is None
    assert int(out[7]["produced_at"].timestamp() * 1000) == 3_000  # not digits: storage time
    assert out[9]["id"] == "t.2:0:9"
    assert out[11]["group"] == "ké"  # no group header: the record key, as ExternalStore gives it


def test_an_external_topic_names_its_own_id_header(spark: Any) -> None:
    rows = [
        (1, "legacy", 0, 0, 1, [("event-id", b"e1")], b""),
        (1, "legacy", 0, 1, 1, [("event-id", b"e2"), ("x-message-id", b"m2")], b""),
        (1, "legacy", 0, 2, 1, [], b""),
    ]
    ids = [r["id"] for r in messages(_raw(spark, rows), "event-id").collect()]
    assert ids == ["e1", "m2", "legacy:0:2"]  # as segments.external.ExternalStore gives them


def test_kafka_options_assign_exactly_the_non_empty_ranges() -> None:
    seg = SegmentPlan(
        segment=1,
        storage_topic="t.1",
        source=KafkaSource(bootstrap_servers="k:9092", client={"security.protocol": "SSL"}),
        ranges={0: PositionRange(start=3, end=9), 1: PositionRange(start=4, end=4)},
    )
    opts = kafka_options(seg, seg.source)  # type: ignore[arg-type]
    assert json.loads(opts["assign"]) == {"t.1": [0]}
    assert json.loads(opts["startingOffsets"]) == {"t.1": {"0": 3}}
    assert json.loads(opts["endingOffsets"]) == {"t.1": {"0": 9}}
    assert opts["kafka.security.protocol"] == "SSL" and opts["includeHeaders"] == "true"


def test_a_plan_is_json_and_keeps_its_segments_in_timeline_order() -> None:
    pulsar = PulsarSource(service_url="pulsar://p:6650", tenant="t", namespace="n")
    assert pulsar.partition_topic("s.2", 3) == "persistent://t/n/s.2-partition-3"
    seg = SegmentPlan(segment=2, storage_topic="s.2", source=pulsar, ranges={})
    plan = TimelinePlan(project="p", topic="t", segments=[seg])
    assert TimelinePlan.model_validate_json(plan.model_dump_json()) == plan
    with pytest.raises(ValidationError):
        TimelinePlan(project="p", topic="t", segments=[seg, seg])


def test_a_followed_plan_starts_where_the_checkpoint_left_off() -> None:
    kafka = KafkaSource(bootstrap_servers="k:9092")
    plan = TimelinePlan(
        project="p",
        topic="t",
        segments=[
            SegmentPlan(
                segment=1,
                storage_topic="s.1",
                source=kafka,
                ranges={0: PositionRange(start=0, end=10), 1: PositionRange(start=2, end=5)},
            ),
            SegmentPlan(
                segment=2,
                storage_topic="s.2",
                source=kafka,
                ranges={0: PositionRange(start=0, end=4)},
            ),
        ],
    )
    assert ends_of(plan) == {1: {0: 10, 1: 5}, 2: {0: 4}}
    narrowed = after(plan, {1: {0: 7, 1: 1}})
    assert narrowed.segments[0].ranges == {
        0: PositionRange(start=7, end=10),
        1: PositionRange(start=2, end=5),
    }
    assert narrowed.segments[1].ranges == {0: PositionRange(start=0, end=4)}  # new segment
    assert after(plan, ends_of(plan)).segments[0].reads == {}
