"""Connection settings of the embedded store, derived from the cluster config.

:class:`~segments.config.EmbeddedClusterConfig` is what an operator writes (the file
and the produce timeout); :class:`EmbeddedSettings` adds the knobs of this backend with
defaults that suit ``httpbus dev`` and unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Self

from ..config import EmbeddedClusterConfig


@dataclass(frozen=True)
class EmbeddedSettings:
    """How one store opens and uses its SQLite file.

    ``produce_timeout_s`` bounds every call: a produce not committed by then, or a database
    locked by someone else for that long, fails with ``StorageUnavailable``.
    """

    path: Path
    produce_timeout_s: float = 10.0
    # How often a waiting read checks for commits made by other connections (processes).
    poll_interval_s: float = 0.05
    # How often expired messages are deleted; each pass is a few indexed deletes.
    retention_interval_s: float = 30.0
    # Group commit: the most records one transaction takes from the produce queue.
    max_batch_records: int = 2_000

    @property
    def busy_timeout_ms(self) -> int:
        """How long SQLite itself waits for another connection's write lock: half the produce
        budget, so a locked database fails the batch (nothing stored) before callers give up."""
        return max(1, int(self.produce_timeout_s * 500))

    @property
    def write_by_s(self) -> float:
        """A queued record not yet written this long after its ``produce`` call is refused
        unwritten: the caller's timeout then cannot fire on a record that gets stored later
        (short of the disk stalling inside the COMMIT)."""
        return self.produce_timeout_s * 0.9

    @classmethod
    def from_cluster(cls, config: EmbeddedClusterConfig) -> Self:
        """The settings of a configured ``embedded`` cluster."""
        return cls(path=Path(config.path), produce_timeout_s=config.produce_timeout_s)
