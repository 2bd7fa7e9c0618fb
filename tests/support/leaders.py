"""An elected role run on its own in a test: the :class:`LeaderContext` it takes.

    archiver = Archiver(leader_context(meta, {"kafka-main": store}, "cp-1"), storage)

A test that drives cutovers builds its own ``Cutovers`` (with its clusters and timeouts) and
passes it; otherwise the context's facade knows no cluster, which a role that starts no
cutover (archiver, replayer, retirement) never asks for.
"""

from __future__ import annotations

from collections.abc import Mapping

from control_plane.leaders.context import LeaderContext
from control_plane.services.cutovers import Cutovers
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.cutover.machine import Timeouts
from segments.protocol import SegmentStore


def leader_context(
    meta: MetaStore,
    stores: Mapping[str, SegmentStore],
    member: str,
    cutovers: Cutovers | None = None,
) -> LeaderContext:
    """The context of the roles of member ``member`` over ``meta`` and ``stores``."""
    if cutovers is None:
        cutovers = Cutovers(meta, Catalog(meta), {}, Timeouts(), "test")
    return LeaderContext(cutovers, stores, member)
