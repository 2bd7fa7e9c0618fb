"""What the ZooKeeper and embedded stores share: path checks, the watch iterator, what a
refused re-join does.

A watch is a background *pump* task that reads the current value, hands it to a one-value
slot and sleeps until something wakes it (a ZooKeeper watch firing, a local write, a poll
seeing another process's write). The consumer's iterator takes from the slot, so bursts of
changes fold into the newest value and the last value is never lost. The pump holds no
reference to the iterator: dropping the iterator (``break`` out of ``async for``) cancels
the pump, which unregisters itself, so nothing leaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from core.errors import AlreadyExists, HttpbusError, Malformed, MetaStoreUnavailable
from metastore.lease import SessionLease

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A reader built once per watch: given the event that wakes the pump, returns a coroutine
#: function reading the current value (and, for ZooKeeper, arming a watch that sets the event).
ReaderFactory = Callable[[asyncio.Event], Callable[[], Awaitable[T]]]


def check_path(path: str) -> str:
    """Return ``path`` if it is absolute, without empty, ``.`` or ``..`` parts; else Malformed."""
    if path == "/":
        return path
    parts = path.split("/")
    if not path.startswith("/") or any(p in ("", ".", "..") for p in parts[1:]):
        raise Malformed(f"invalid metastore path {path!r}")
    return path


def rejoin_refused(lease: SessionLease, path: str, exc: HttpbusError) -> None:
    """A membership made again after an expired session was refused (``exc``). Taken by
    another live session: another process holds this member id now, so this one's lease is
    revoked (metastore/lease.py) and it acts in that member's name no more."""
    log.error("cannot re-register member %s: %s", path, exc)
    if isinstance(exc, AlreadyExists):
        lease.revoke(f"member {path} is held by another live process: restart this one")


def parent_of(path: str) -> str:
    """The parent of a checked path ("/" for a top-level node)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def ancestors(path: str) -> list[str]:
    """The proper ancestors of a checked path below "/", outermost first."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


class WatchHub:
    """The live watch pumps of one store: wake them all, or end them all on close."""

    def __init__(self) -> None:
        self.closed = False
        self._events: set[asyncio.Event] = set()
        self._retrying: set[asyncio.Event] = set()  # of pumps whose last read failed
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def wake_all(self) -> None:
        """Make every pump re-read its value (after a write, a reconnect, a poll hit)."""
        for event in self._events:
            event.set()

    def wake_retrying(self) -> None:
        """Make the pumps whose last read failed read again now (the store is back), not
        after their retry wait; the others have a read on the wire or a watch armed."""
        for event in self._retrying:
            event.set()

    async def close(self) -> None:
        """End every watch of the store: their iterators stop after the values they hold.

        Each pump is woken as well as cancelled, and sees ``closed`` whenever it wakes, so
        it ends even if a cancellation is lost on the way (as Python 3.11's ``wait_for`` can
        lose one when its inner future finishes in the same loop step)."""
        self.closed = True
        self.wake_all()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Slot(Generic[T]):
    """The newest value not yet taken, deduplicated against the last value taken."""

    def __init__(self) -> None:
        self._ready = asyncio.Event()
        self._pending: list[T] = []  # zero or one value
        self._taken: list[T] = []  # zero or one value
        self._done = False
        self._error: BaseException | None = None

    def publish(self, value: T) -> None:
        self._pending.clear()
        if not self._taken or self._taken[0] != value:
            self._pending.append(value)
            self._ready.set()

    def finish(self, error: BaseException | None = None) -> None:
        self._done = True
        self._error = error
        self._ready.set()

    async def take(self) -> T:
        while True:
            if self._pending:
                value = self._pending.pop()
                self._taken[:] = [value]
                return value
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()


async def _pump(
    make_reader: ReaderFactory[T], slot: _Slot[T], hub: WatchHub, retry_s: float
) -> None:
    wake = asyncio.Event()
    read = make_reader(wake)
    hub._events.add(wake)
    error: BaseException | None = None
    try:
        while not hub.closed:
            wake.clear()  # before the read: a change during the read wakes us again
            try:
                value = await read()
            except MetaStoreUnavailable as exc:
                log.debug("watch read failed, retrying: %s", exc)
                hub._retrying.add(wake)
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(retry_s):
                            await wake.wait()
                finally:
                    hub._retrying.discard(wake)
                continue
            slot.publish(value)
            if not hub.closed:
                await wake.wait()
    except Exception as exc:  # a bad path or a bug: the consumer sees it at its next step
        error = exc
    finally:
        hub._events.discard(wake)
        slot.finish(error)


class WatchIterator(AsyncIterator[T]):
    """The async iterator returned by ``watch``/``watch_children`` (see the module doc)."""

    def __init__(self, make_reader: ReaderFactory[T], hub: WatchHub, retry_s: float) -> None:
        self._make_reader = make_reader
        self._hub = hub
        self._retry_s = retry_s
        self._slot: _Slot[T] = _Slot()
        self._task: asyncio.Task[None] | None = None

    def __aiter__(self) -> WatchIterator[T]:
        return self

    async def __anext__(self) -> T:
        if self._task is None:
            if self._hub.closed:
                raise StopAsyncIteration
            # Started lazily: watch() may be called outside a running loop.
            self._task = asyncio.create_task(
                _pump(self._make_reader, self._slot, self._hub, self._retry_s)
            )
            self._hub._tasks.add(self._task)
            self._task.add_done_callback(self._hub._tasks.discard)
        return await self._slot.take()

    async def aclose(self) -> None:
        """Stop watching; the iterator ends."""
        self._slot.finish()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                task.cancel()
