"""Reading a partition to its end without taking an empty read for the end.

A read comes back empty when nothing arrives within its timeout, which a fetch slow under
load gives with messages left; and positions need not be dense (a Pulsar end names the next
entry, past the last message), so a position short of the end does not say a message is left
either. The store's ``last_positions`` does: after an empty read, the scan asks once for the
partition's last message and reads again until it has read past it, within ``patience_s``;
past that it raises ``StorageUnavailable`` rather than answer with part of the partition.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from core.errors import StorageUnavailable

from .protocol import SegmentStore, Stored

PATIENCE_S = 30.0
"""How long a scan waits for messages the store says it holds, in all, after an empty read."""


async def read_range(
    store: SegmentStore,
    name: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout: float = 0.5,
    max_records: int = 1_000,
    patience_s: float = PATIENCE_S,
) -> AsyncGenerator[list[Stored], None]:
    """The messages of ``partition`` at positions in [``start``, ``end``), in batches."""
    position, last, deadline = start, None, 0.0
    while position < end and (last is None or position <= last):
        batch = await store.read(
            name, partition, position, max_records=max_records, timeout=timeout
        )
        if batch:
            if within := [m for m in batch if m.position < end]:
                yield within
            position = batch[-1].position + 1
        elif last is None:  # the first empty read: is anything left?
            last = (await store.last_positions(name)).get(partition, -1)
            deadline = time.monotonic() + patience_s
        elif time.monotonic() >= deadline:
            raise StorageUnavailable(
                f"{name}[{partition}]: read to position {position}, but the store holds "
                f"messages up to {last} and none came in {patience_s:.0f}s; try again later",
                details={"topic": name, "partition": partition, "position": position},
            )


async def read_all(
    store: SegmentStore,
    name: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout: float = 0.5,
    max_records: int = 1_000,
    patience_s: float = PATIENCE_S,
) -> list[Stored]:
    """:func:`read_range`'s messages in one list."""
    out: list[Stored] = []
    batches = read_range(
        store, name, partition, start, end,
        timeout=timeout, max_records=max_records, patience_s=patience_s,
    )  # fmt: skip
    async for batch in batches:
        out.extend(batch)
    return out
