"""Automatic failover of a topic to a standby cluster (issue 20, docs/failover.md).

- :mod:`.health` — producers' write figures per segment and the leader's verdict on them;
- :mod:`.records` — where those figures, and the segments left unsealed, live in the
  metastore.

The emergency cutover itself is the cutover machine's (``segments.cutover.machine``) with
``failover`` set: the same phases and acknowledgements, without the seal.
"""
