"""kazoo's threading handler with a wait on its socket that costs one system call.

kazoo's connection thread waits on its socket before every read of a message's header,
every read of its body, every write, and each turn of its loop, through
``kazoo.handlers.utils.selector_select``, which makes a fresh ``epoll`` for each wait: create,
register each socket, wait, close, five system calls. Each of them lets go of the GIL and
takes it back, and while the event loop is busy taking it back waits up to the
interpreter's switch interval (5 ms). A worker starting 10^4 units waits about three times
per answer, so its answers came slowly exactly when the loop was busiest, and a heartbeat
queued behind them came back after its lease had lapsed (bench/scale.py, issue 35).

``poll`` needs no object in the kernel: registering is bookkeeping in the interpreter, and the
wait is one system call. Like ``selector_select`` it has no limit on descriptor numbers
(``select.select`` stops at 1 024).
"""

from __future__ import annotations

import math
import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

_READ = select.POLLIN | select.POLLPRI
# What else poll reports (hang-up, error, a closed descriptor) wakes a reader as
# ``selector_select`` does: the read that follows finds out what happened.
_NOT_WRITE = ~select.POLLOUT


class PollHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """See the module doc."""

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        poller = select.poll()
        wanted: dict[int, int] = {}
        objects: dict[int, list[Any]] = {}
        for mask, fileobjs in ((_READ, rlist), (select.POLLOUT, wlist)):
            for fileobj in fileobjs:
                fd = fileobj_to_fd(fileobj)
                wanted[fd] = wanted.get(fd, 0) | mask
                objects.setdefault(fd, []).append(fileobj)
        for fd, mask in wanted.items():
            poller.register(fd, mask)
        ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000.0))
        readable: list[Any] = []
        writable: list[Any] = []
        for fd, events in ready:
            if events & _NOT_WRITE:
                readable.extend(objects[fd])
            elif events & select.POLLOUT:
                writable.extend(objects[fd])
        return readable, writable, []
