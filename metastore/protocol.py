"""The ``MetaStore`` protocol: a small versioned tree of JSON documents.

Both implementations (ZooKeeper and embedded SQLite) meet one contract, tested by
``tests/contract/metastore_contract.py``. Paths are ``/``-separated strings built only by
:mod:`metastore.paths`; they are relative to the store's root (a ZooKeeper chroot,
or the embedded file), so two stores with different roots never see each other.

Every write is a compare-and-set on the node's version::

    node = await store.get(paths.topic("p", "t"))
    await store.update(paths.topic("p", "t"), new_bytes, expected_version=node.version)
    # raises VersionConflict if anyone wrote in between: nobody's write is silently lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from core.lifecycle import Lifecycle
from metastore.lease import SessionLease


@dataclass(frozen=True)
class Node:
    """The bytes of one node and the version they were read at (0 after create)."""

    data: bytes
    version: int


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes


@dataclass(frozen=True)
class Update:
    path: str
    data: bytes
    expected_version: int


@dataclass(frozen=True)
class Delete:
    path: str
    expected_version: int = -1  # -1: any version


@dataclass(frozen=True)
class Check:
    """Fails the transaction unless ``path`` is at ``expected_version``."""

    path: str
    expected_version: int


Op = Create | Update | Delete | Check


@runtime_checkable
class MetaStore(Lifecycle, Protocol):
    """Versioned metadata, watches and ephemeral membership.

    Errors are values of the httpbus exception tree: ``NotFound``, ``AlreadyExists``,
    ``VersionConflict`` and ``MetaStoreUnavailable``; never a kazoo or sqlite3 error.
    """

    lease: SessionLease
    """While valid, this store's session cannot have expired on the server: a holder of an
    ephemeral lock acts on it only then (metastore/lease.py)."""

    async def start(self) -> None:
        """Connect (and open this store's session, which owns its ephemeral nodes)."""

    async def aclose(self) -> None:
        """Close the session: this store's ephemeral nodes vanish."""

    async def get(self, path: str) -> Node | None:
        """The node at ``path``, or None."""

    async def get_many(self, paths: Sequence[str]) -> list[Node | None]:
        """The nodes at ``paths`` in their order (None where absent), read in bulk: one
        request to the embedded store, ``multiRead`` requests to ZooKeeper. For a page that
        reads thousands of small nodes at once (the overview)."""

    async def children(self, path: str) -> list[str]:
        """Names of the children of ``path``, sorted; [] if it has none or does not exist."""

    async def children_many(self, paths: Sequence[str]) -> list[list[str]]:
        """:meth:`children` of each of ``paths``, in their order, read in bulk as
        :meth:`get_many` reads (a page of topics reads each one's segments)."""

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> Node:
        """Create ``path`` (and missing parents, empty); ``AlreadyExists`` if it exists."""

    async def update(self, path: str, data: bytes, *, expected_version: int) -> Node:
        """Replace the data if the node is at ``expected_version``; return the new node."""

    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        """Delete ``path`` (with its children if ``recursive``); ``NotFound`` if absent."""

    async def transaction(self, ops: Sequence[Op]) -> None:
        """Apply all ops or none. Parents of a ``Create`` must exist or be created earlier
        in the same transaction. A failed check or version raises ``VersionConflict``."""

    def watch(self, path: str) -> AsyncIterator[Node | None]:
        """The node now, then again each time it changes (None while it does not exist).

        Level-triggered: fast successive changes may be folded into one, but the last value
        is always delivered. Ends when the iterator is closed or the store is closed.
        """

    def watch_children(self, path: str) -> AsyncIterator[list[str]]:
        """The children of ``path`` now, then again each time the set changes."""

    async def join(self, group: str, member: str, data: bytes) -> None:
        """Register this process as an ephemeral ``member`` of ``group``; the membership
        ends when the session does (``aclose`` or a lost session)."""

    async def members(self, group: str) -> dict[str, bytes]:
        """The live members of ``group`` and their data."""
