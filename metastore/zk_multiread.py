"""ZooKeeper's ``multiRead``: many ``getData`` in one request and one answer.

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
    GetData,
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    stat_struct,
)
from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22
ERROR = -1
CHUNK = 128
"""Reads per request: an answer of 128 status documents (~2 KB each) stays far below the
1 MB ``jute.maxbuffer`` a Java client enforces on what it reads."""

Read = tuple[bytes, ZnodeStat] | None | Exception
"""One read's outcome: data and stat, None if the node does not exist, or the error."""


class MultiRead(NamedTuple):
    """A ``multiRead`` of ``getData`` on ``paths`` (absolute: kazoo's chroot is not applied)."""

    paths: Sequence[str]
    type: int = MULTI_READ

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(GetData.type, False, -1).serialize()
            out += GetData(path, None).serialize()
        out += multiheader_struct.pack(-1, True, -1)
        return out

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Read]:
        """The reads' outcomes, in the order asked."""
        out: list[Read] = []
        kind, done, _ = multiheader_struct.unpack_from(data, offset)
        offset += multiheader_struct.size
        while not done:
            if kind == GetData.type:
                value, offset = read_buffer(data, offset)
                out.append((value or b"", ZnodeStat._make(stat_struct.unpack_from(data, offset))))
                offset += stat_struct.size
            elif kind == ERROR:
                code = int_struct.unpack_from(data, offset)[0]
                offset += int_struct.size
                out.append(None if code == NoNodeError.code else EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead: an answer of type {kind} was not asked for")
            kind, done, _ = multiheader_struct.unpack_from(data, offset)
            offset += multiheader_struct.size
        return out


def send(client: Any, paths: Sequence[str]) -> Any:
    """Queue a :class:`MultiRead` on kazoo ``client``; its async result, as ``*_async`` give.

    ``KazooClient._call`` is how kazoo's own ``*_async`` methods queue a request (it checks
    the session's state and wakes the connection thread); there is no public way to send a
    request kazoo does not define."""
    result = client.handler.async_result()
    client._call(MultiRead(paths), result)
    return result
