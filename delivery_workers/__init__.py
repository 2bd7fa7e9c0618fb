"""The delivery workers: consume, filter, order, push, retry, dead-letter.

Owns the per-subscription pipeline, the shared HTTP sender, group ordering, in-order commit,
multi-level retry queues, the DLQ, flow control and this worker's share of the subscriptions.
A deployable: imports ``core``, ``metastore``, ``segments`` and ``circuit_breaker``.
"""
