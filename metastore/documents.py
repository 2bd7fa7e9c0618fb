"""A typed document on a ``MetaStore``: a pydantic model stored as JSON in one node.

found = await read_versioned(store, paths.cutover(p, t), Cutover)
if found is not None:
    state, version = found  # update it with expected_version=version
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from .protocol import MetaStore

M = TypeVar("M", bound=BaseModel)


async def read_versioned(store: MetaStore, path: str, model: type[M]) -> tuple[M, int] | None:
    """The document at ``path`` and the node version it was read at (for a compare-and-set),
    or None if the node does not exist."""
    node = await store.get(path)
    if node is None:
        return None
    return model.model_validate_json(node.data), node.version
