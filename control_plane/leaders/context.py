"""What every elected role of one control plane works with, in one value.

The roles share a handful of collaborators: the :class:`~control_plane.services.cutovers.Cutovers`
facade (which carries the metastore, the catalog, the clock and the clusters), the started
segment stores by cluster, and the member id the process stands for election under. They are
put together once, where the roles are assembled (``control_plane.app``, then
:func:`.roles.roles`), and a role takes the context plus only what is its own (an interval,
a judge, an archive storage)::

    context = LeaderContext(cutovers, stores, settings.member_id)
    retirement = SegmentRetirement(context, interval_s=300.0)

A new role therefore gets its collaborators in one argument, and they are the same objects
every other role of the process uses. A role subclasses :class:`ContextRole`, which stands for
election as the context's member and keeps the facade, the catalog and the stores at hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from control_plane.leaders.election import LeaderElection
from control_plane.services.cutovers import Cutovers
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore


@dataclass(frozen=True)
class LeaderContext:
    """The collaborators the elected roles of one control plane share."""

    cutovers: Cutovers
    stores: Mapping[str, SegmentStore]  # the started store of each storage cluster
    member_id: str  # who this process is in ``/leader/{role}``

    @property
    def metastore(self) -> MetaStore:
        return self.cutovers.metastore

    @property
    def catalog(self) -> Catalog:
        return self.cutovers.catalog


class ContextRole(LeaderElection):
    """An elected role over a :class:`LeaderContext`: the election under ``role`` as the
    context's member, and the context's facade, catalog and stores at hand as
    ``self.cutovers``, ``self.catalog`` and ``self.stores``."""

    def __init__(self, context: LeaderContext, role: str) -> None:
        super().__init__(context.metastore, role, context.member_id)
        self.cutovers = context.cutovers
        self.catalog = context.catalog
        self.stores = context.stores
