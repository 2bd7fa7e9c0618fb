"""The embedded backend of the segment store: SQLite in WAL mode, durable, for ``httpbus dev``."""
