"""The DLQ count as the control plane shows it: a worker's document, and a sharded
subscription's shards added up (control_plane.services.shard_status)."""

from __future__ import annotations

from control_plane.services.shard_status import dlq_figures, merge_dlq, merge_figures


def _doc(size: int, heads: int, live: bool = True) -> dict[str, object]:
    return {
        "dlq": {
            "size": size,
            "failed_heads": heads,
            "sidelined": size - heads,
            "read_to": 99,
            "live": live,
        }
    }


def test_a_workers_count_is_shown_as_counted_by_the_worker() -> None:
    assert dlq_figures(_doc(961, 6)["dlq"]) == {
        "size": 961,
        "failed_heads": 6,
        "sidelined": 955,
        "counted_by": "worker",
        "live": True,
    }


def test_no_count_or_a_garbled_one_is_none() -> None:
    assert dlq_figures(None) is None
    assert dlq_figures({"size": 3}) is None
    assert dlq_figures({"size": "x", "failed_heads": 1, "sidelined": 0}) is None


def test_shards_add_up_and_a_shard_without_a_count_makes_it_unknown() -> None:
    merged = merge_dlq([_doc(10, 2), _doc(5, 1, live=False)])
    assert merged == {"size": 15, "failed_heads": 3, "sidelined": 12, "live": False}
    assert merge_dlq([_doc(10, 2), {}]) is None
    assert merge_figures([_doc(10, 2), _doc(1, 1)])["dlq"]["size"] == 11
