"""The ``start()`` / ``aclose()`` shape every long-lived component of httpbus has.

Subclass :class:`AsyncResource` and implement both; ``async with`` then starts and closes it::

    async with KafkaSegmentStore(config) as store:
        await store.produce(...)
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self, runtime_checkable


@runtime_checkable
class Lifecycle(Protocol):
    """The seam every long-lived component offers: the base of the ``MetaStore``,
    ``SegmentStore`` and ``EndpointSender`` protocols."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class AsyncResource:
    """The usual implementation of :class:`Lifecycle`: ``async with`` calls ``start`` and
    ``aclose``."""

    async def start(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
