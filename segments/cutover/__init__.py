"""The cutover of a topic's produce pointer, apart from the storage it moves between.

- :mod:`.machine` — the protocol as a pure state machine (phases, acknowledgements, timeouts);
- :mod:`.records` — its records in the metastore, read and written by the coordinator and
  every producer.
"""
