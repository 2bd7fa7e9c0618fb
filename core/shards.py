"""Shards: one subscription delivered by several workers, each owning a slice of it.

A subscription with ``shards`` = N > 1 is N units of assignment. Shard k owns the messages

- of every group whose CRC32 is k modulo N (grouped messages), and
- of every partition that is k modulo N (messages without a group),

so a group lives in exactly one shard whatever the partition count of the segment it is in,
and its order and its retry state stay with that shard across a cutover. The producer puts a
grouped message in partition ``crc32(group) % P`` (:func:`segments.protocol.partition_for`),
so when N divides P shard k finds all its messages in the partitions that are k modulo N and
reads only those; otherwise every shard reads every partition and skips what is not its own.

Each shard has its own name for everything it keeps: ``project/sub#k`` as assignment key,
lock and status node, and its own storage commit group. A subscription of one shard keeps the
plain names (no ``#0``), so N = 1 is exactly the unsharded subscription.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

SEPARATOR = "#"
MAX_SHARDS = 64


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` of ``count``; :data:`WHOLE` is the one shard of an unsharded one."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count <= MAX_SHARDS:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def suffix(self) -> str:
        """What the shard's names end with: nothing for the whole subscription."""
        return "" if self.whole else f"{SEPARATOR}{self.index}"

    @property
    def label(self) -> str | None:
        """How the audit trail names the shard (``AuditEvent.shard``): ``"k/N"``, or None for
        the whole subscription. The Spark reconciliation parses it back (``spark.reconcile``)."""
        return None if self.whole else f"{self.index}/{self.count}"

    def owns(self, group: bytes | str | None, partition: int) -> bool:
        """Whether the message of ``group`` (None: ungrouped) read from ``partition`` is
        this shard's to deliver."""
        if self.whole:
            return True
        if group is None:
            return partition % self.count == self.index
        data = group.encode() if isinstance(group, str) else group
        return zlib.crc32(data) % self.count == self.index

    def reads(self, partition: int, partitions: int) -> bool:
        """Whether the shard must read ``partition`` of a segment of ``partitions``: all of
        them unless the shard count divides the partition count (see the module doc)."""
        if self.whole or partitions % self.count:
            return True
        return partition % self.count == self.index


WHOLE = Shard()


def shards(count: int) -> list[Shard]:
    """Every shard of a subscription of ``count`` shards."""
    return [Shard(k, count) for k in range(count)]


def unit_key(project: str, name: str, shard: Shard) -> str:
    """The assignment key of one shard: ``project/sub`` or ``project/sub#k``."""
    return f"{project}/{name}{shard.suffix}"


def parse_unit_key(key: str) -> tuple[str, str, int | None]:
    """``(project, subscription, shard index or None)`` of an assignment key."""
    project, _, rest = key.partition("/")
    name, sep, index = rest.partition(SEPARATOR)
    if not sep:
        return project, name, None
    if not index.isdigit():
        raise ValueError(f"bad shard in assignment key {key!r}")
    return project, name, int(index)
