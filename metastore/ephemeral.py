"""Ephemeral report nodes: what a live process says of itself (quota use, write health),
gone with its session."""

from __future__ import annotations

from core.errors import AlreadyExists, NotFound

from .protocol import MetaStore


async def put_ephemeral(store: MetaStore, path: str, data: bytes) -> None:
    """Set ``path`` to ``data``, creating it ephemeral (this session's) if missing."""
    try:
        await store.update(path, data, expected_version=-1)
    except NotFound:
        try:
            await store.create(path, data, ephemeral=True)
        except AlreadyExists:  # made meanwhile: ours, from a call still in flight
            await store.update(path, data, expected_version=-1)


async def remove(store: MetaStore, path: str) -> None:
    """Delete ``path`` if it is there."""
    try:
        await store.delete(path)
    except NotFound:
        pass
