"""What the storage keeps for a subscription beside its segments: the shared pieces every
worker and the control plane read the same way.

- :mod:`.layout` — the subscription's internal topics (delay levels, hold, replay, DLQ), named
  in one place and recorded in the metastore;
- :mod:`.retry_meta` — the retry headers a message carries in those topics;
- :mod:`.dlq` — the DLQ topic as its own index (entries, removals, replay).
"""
