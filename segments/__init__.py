"""Storage of messages: the ``SegmentStore`` SPI, its backends, the writer, the reader.

Owns the storage SPI (create, seal and fence, produce, consume, positions, delete), the
``kafka``, ``pulsar`` and ``embedded`` backends (siblings of the same inner shape, never
importing each other), the segment writer that follows a topic's produce pointer, the reader
that walks a subscription through segments in order, and the cutover protocol as a pure state
machine. Imports ``core`` and ``metastore``.
"""
