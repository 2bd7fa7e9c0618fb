"""A typed document on a ``MetaStore``: a pydantic model stored as JSON in one node.

found = await read_versioned(store, paths.cutover(p, t), Cutover)
if found is not None:
    state, version = found  # update it with expected_version=version
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pydantic import BaseModel

from .protocol import Create, MetaStore, Update

M = TypeVar("M", bound=BaseModel)


async def read_versioned(store: MetaStore, path: str, model: type[M]) -> tuple[M, int] | None:
    """The document at ``path`` and the node version it was read at (for a compare-and-set),
    or None if the node does not exist."""
    node = await store.get(path)
    if node is None:
        return None
    return model.model_validate_json(node.data), node.version


class TopicDocuments(Generic[M]):
    """Typed access to one kind of document a topic has (at ``path(project, topic)``), written
    by compare-and-set only: :meth:`get` reads it with the version to set against, and
    :meth:`write_op` is the operation that writes it in a transaction."""

    def __init__(self, store: MetaStore, model: type[M], path: Callable[[str, str], str]) -> None:
        self.store = store
        self._model = model
        self._path = path

    async def get(self, project: str, topic: str) -> tuple[M, int] | None:
        """The topic's latest document and the version it was read at, or None."""
        return await read_versioned(self.store, self._path(project, topic), self._model)

    async def replace(self, project: str, topic: str, doc: M, version: int) -> int:
        """Replace the document if it is still at ``version``; the new version."""
        data = doc.model_dump_json().encode()
        node = await self.store.update(self._path(project, topic), data, expected_version=version)
        return node.version

    def write_op(self, project: str, topic: str, doc: M, version: int | None) -> Create | Update:
        """Create the document where none was read (``version`` None), else replace it if it
        is still at ``version``."""
        data = doc.model_dump_json().encode()
        path = self._path(project, topic)
        return Create(path, data) if version is None else Update(path, data, version)
