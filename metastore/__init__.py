"""Where the metadata lives: the ``MetaStore`` protocol and its implementations.

Owns the protocol (get, create, compare-and-set update, delete, multi-op transactions, watches,
ephemeral membership), the ZooKeeper implementation on kazoo, the embedded SQLite one used by
``httpbus dev``, and the one module that builds every ZooKeeper path. Imports only ``core``.
"""

from metastore.protocol import Check, Create, Delete, MetaStore, Node, Op, Update

# The implementations are imported from their modules (``metastore.zookeeper``,
# ``metastore.embedded``) so that using one never loads the other's client library.
__all__ = ["Check", "Create", "Delete", "MetaStore", "Node", "Op", "Update"]
