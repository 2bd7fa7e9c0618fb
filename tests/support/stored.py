"""Reading back what a segment store holds, for tests that check every record."""

from __future__ import annotations

from segments.protocol import SegmentStore, Stored


async def read_all(
    store: SegmentStore, topic: str, *, max_records: int, timeout: float
) -> list[Stored]:
    """Every record of ``topic``, partition by partition, each in stored order (read
    ``max_records`` at a time); a partition that reads nothing short of its end fails."""
    out: list[Stored] = []
    for partition, end in sorted((await store.end_positions(topic)).items()):
        start = 0
        while start < end:
            got = await store.read(
                topic, partition, start, max_records=max_records, timeout=timeout
            )
            assert got, f"partition {partition} ends at {end} but nothing read from {start}"
            out.extend(got)
            start = got[-1].position + 1
    return out
