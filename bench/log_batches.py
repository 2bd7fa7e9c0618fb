"""What a Kafka client really wrote: the record batches in a broker's log segments.

Issue 36 asks why the Kafka broker spends three to six times Hermes's CPU per message on our
writes. A broker's work per message follows the batches it is sent (one append, one CRC check
and one index entry per batch, not per record) and their bytes; both are in its log segments,
the same whatever the machine's load. This reads them with no JVM: a segment file is a run of
record batches (message format v2), each ``baseOffset int64, batchLength int32`` followed by
``batchLength`` bytes whose fixed header holds the attributes (compression in the low 3 bits)
and the record count::

    python bench/log_batches.py /path/to/kafka-logs bench1234   # topics whose name has it

``bench/peers.py --hermes`` prints it for our storage topic, our audit topic and Hermes's
topic after each run, before they are deleted.
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HEAD = struct.Struct(">qi")  # baseOffset, batchLength
# After the first 12 bytes: partitionLeaderEpoch i32, magic i8, crc u32, attributes i16,
# lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16,
# baseSequence i32, recordsCount i32.
BODY = struct.Struct(">ibIhiqqqhii")
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass
class Batches:
    """The batches of some log segments, summed."""

    batches: int = 0
    records: int = 0
    bytes: int = 0  # on disk, batch headers included
    control: int = 0  # transaction markers and the like (attributes bit 5)
    codecs: frozenset[str] = frozenset()

    def add(self, other: Batches) -> Batches:
        return Batches(
            self.batches + other.batches,
            self.records + other.records,
            self.bytes + other.bytes,
            self.control + other.control,
            self.codecs | other.codecs,
        )

    def line(self) -> str:
        if not self.batches:
            return "no batches"
        per_batch = self.records / self.batches
        per_record = self.bytes / self.records if self.records else 0.0
        codecs = ",".join(sorted(self.codecs))
        return (
            f"{self.records:,} records in {self.batches:,} batches ({per_batch:.1f} a batch), "
            f"{per_record:,.0f} B a record on disk, compression {codecs}"
        )


def read_segment(path: Path) -> Batches:
    """The batches of one ``.log`` segment (a torn batch at its end is left out)."""
    data = path.read_bytes()
    found = Batches()
    at = 0
    codecs: set[str] = set()
    while at + HEAD.size + BODY.size <= len(data):
        _, length = HEAD.unpack_from(data, at)
        end = at + HEAD.size + length
        if length < BODY.size or end > len(data):
            break
        fields = BODY.unpack_from(data, at + HEAD.size)
        magic, attributes, count = fields[1], fields[3], fields[10]
        if magic != 2:
            raise ValueError(f"{path}: message format v{magic} at byte {at}; only v2 is read")
        found.batches += 1
        found.bytes += end - at
        if attributes & 0x20:
            found.control += 1
        else:
            found.records += count
        codecs.add(CODECS.get(attributes & 0x07, f"codec {attributes & 0x07}"))
        at = end
    found.codecs = frozenset(codecs)
    return found


def partition_dirs(log_dirs: Path, name_part: str) -> Iterator[Path]:
    """The partition folders (``<topic>-<n>``) of the topics whose name contains
    ``name_part``."""
    for folder in sorted(log_dirs.iterdir()):
        topic, _, partition = folder.name.rpartition("-")
        if folder.is_dir() and partition.isdigit() and name_part in topic:
            yield folder


def topic_batches(log_dirs: Path, name_part: str) -> dict[str, Batches]:
    """Per topic whose name contains ``name_part``: its batches, all partitions summed."""
    out: dict[str, Batches] = {}
    for folder in partition_dirs(log_dirs, name_part):
        topic = folder.name.rpartition("-")[0]
        for segment in sorted(folder.glob("*.log")):
            out[topic] = out.get(topic, Batches()).add(read_segment(segment))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log_dirs", type=Path, help="the broker's log.dirs")
    p.add_argument("name_part", help="topics whose name contains this")
    args = p.parse_args(argv)
    for topic, found in topic_batches(args.log_dirs, args.name_part).items():
        print(f"{topic}: {found.line()}")


if __name__ == "__main__":
    main()
