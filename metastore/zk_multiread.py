"""ZooKeeper's ``multiRead``: many ``getData`` (or ``getChildren``) in one request and answer.

A page of a list reads hundreds of nodes (a topic's node, its produce pointer, its segments;
a subscription's node, pointer and status). Sent as one ``getData`` each, every read costs
kazoo a request of its own on its connection thread (serialize, wake the thread, write,
read, deserialize, hand back to the loop): a first page of 100 topics spent about half its
time waiting on that thread (docs/capacity.md, "Lists"). ZooKeeper 3.6 and later take a
batch of reads as one request (``OpCode.multiRead``, 22): the answer holds each read's data
and stat, or its own error (a missing node fails that read only, unlike a ``multi`` of
writes). kazoo does not offer it, so :class:`MultiRead` is the request, in kazoo's own
serialization, sent through the client's request queue like any of its requests.

A server without it (before 3.6) answers ``UnimplementedError``; the store then reads one by
one (``ZooKeeperMetaStore.get_many``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import (
    GetChildren,
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22
ERROR = -1
CHUNK = 128
"""Reads per request: an answer of 128 status documents (~2 KB each) stays far below the
1 MB ``jute.maxbuffer`` a Java client enforces on what it reads."""

Read = tuple[bytes, ZnodeStat] | list[str] | None | Exception
"""One read's outcome: data and stat (``getData``), the children's names (``getChildren``),
None if the node does not exist, or the error."""


class MultiRead(NamedTuple):
    """A ``multiRead`` on ``paths`` (absolute: kazoo's chroot is not applied): ``getData``
    of each, or ``getChildren`` with ``children``."""

    paths: Sequence[str]
    children: bool = False
    type: int = MULTI_READ

    def serialize(self) -> bytearray:
        op = GetChildren if self.children else GetData
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(op.type, False, -1).serialize()
            out += op(path, None).serialize()
        out += multiheader_struct.pack(-1, True, -1)
        return out

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Read]:
        """The reads' outcomes, in the order asked."""
        out: list[Read] = []
        kind, done, _ = multiheader_struct.unpack_from(data, offset)
        offset += multiheader_struct.size
        while not done:
            one, offset = _one(kind, data, offset)
            out.append(one)
            kind, done, _ = multiheader_struct.unpack_from(data, offset)
            offset += multiheader_struct.size
        return out


def _one(kind: int, data: bytes, offset: int) -> tuple[Read, int]:
    """One read's outcome in ``data`` at ``offset``, and the offset after it."""
    if kind == GetData.type:
        value, offset = read_buffer(data, offset)
        stat = ZnodeStat._make(stat_struct.unpack_from(data, offset))
        return (value or b"", stat), offset + stat_struct.size
    if kind == GetChildren.type:
        count = int_struct.unpack_from(data, offset)[0]
        offset += int_struct.size
        names = []
        for _ in range(max(count, 0)):
            name, offset = read_string(data, offset)
            names.append(name)
        return names, offset
    if kind == ERROR:
        code = int_struct.unpack_from(data, offset)[0]
        return (None if code == NoNodeError.code else EXCEPTIONS[code]()), offset + 4
    raise ValueError(f"multiRead: an answer of type {kind} was not asked for")


def send(client: Any, paths: Sequence[str], children: bool = False) -> Any:
    """Queue a :class:`MultiRead` on kazoo ``client``; its async result, as ``*_async`` give.

    ``KazooClient._call`` is how kazoo's own ``*_async`` methods queue a request (it checks
    the session's state and wakes the connection thread); there is no public way to send a
    request kazoo does not define."""
    result = client.handler.async_result()
    client._call(MultiRead(paths, children), result)
    return result
