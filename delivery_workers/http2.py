"""HTTP/2 to HTTPS endpoints that offer it: one connection as an asyncio Protocol over the
``h2`` state machine, many deliveries in flight on it at once (one stream each).

HTTP/2 is only ever *negotiated*: the sender's TLS context offers ``h2`` and ``http/1.1``
through ALPN, and :func:`negotiated` picks this protocol only when the endpoint's TLS
handshake selected ``h2``; everything else (an endpoint that does not offer it, every
cleartext ``http://`` endpoint: no h2c upgrade, no prior knowledge) speaks HTTP/1.1 through
:class:`.http1.Connection`. So the worker never claims a protocol it did not agree on.

A delivery is the same request (:func:`.sender.build_request`) and is classified the same
way as on HTTP/1.1 (see :mod:`.http1`): header names go out lower-case as HTTP/2 asks,
``Host`` becomes ``:authority``; the answer keeps the status, ``Retry-After``, ``Location``
and at most :data:`.sender.MAX_RESPONSE_BYTES` of the body (a longer one is cancelled with
``RST_STREAM``). A stream the endpoint refused (``REFUSED_STREAM``) or left unprocessed
under a ``GOAWAY`` had no effect, so it fails as :class:`ConnectionLost` with
``answered=False`` and is sent once more on another connection, as on HTTP/1.1. Request
bodies respect the endpoint's flow-control windows; answers are acknowledged as they come,
so a slow reader never stalls the other streams.

The :class:`~.answer_limits.AnswerLimits` hold here too: a header block decodes to at most
``max_head_bytes`` (hpack's own limit, advertised as ``SETTINGS_MAX_HEADER_LIST_SIZE``), at
most ``max_head_bytes`` arrive without completing a frame the state machine reports (a
``CONTINUATION`` flood), and a stream's headers, header lines and interim answers are
counted; over a limit the stream fails as :class:`~.answer_limits.InvalidAnswer`, the whole
connection when the flood is not a stream's. Phases are timed by the attempt's deadline.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from .answer_limits import AnswerLimits, InvalidAnswer
from .http1 import (
    DEFAULT_LIMITS,
    Answer,
    Connection,
    ConnectionLost,
    InvalidRequest,
    Origin,
    PooledConnection,
)
from .sender import MAX_RESPONSE_BYTES, OutgoingRequest

ALPN = ["h2", "http/1.1"]
"""What the sender offers in the TLS handshake, most preferred first."""
DEFAULT_MAX_STREAMS = 100
"""Streams used at once before the endpoint's SETTINGS say how many it takes."""
_WANTED = {b"retry-after": "retry-after", b"location": "location"}
_UNPROCESSED = {h2.errors.ErrorCodes.REFUSED_STREAM}
_FRAME_ROOM = 16_384 + 9  # one frame of the default maximum size, and its header


class _Stream:
    """One request on the connection: the body still to send, the answer so far."""

    __slots__ = ("body", "headers", "interim", "pending", "started", "status", "waiter")

    def __init__(self, waiter: asyncio.Future[Answer], pending: bytes) -> None:
        self.waiter = waiter
        self.pending = memoryview(pending)
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.started = False
        self.interim = 0


class H2Connection(PooledConnection):
    """One HTTP/2 connection to one origin, carrying up to the endpoint's
    ``MAX_CONCURRENT_STREAMS`` requests at once."""

    http2 = True

    def __init__(
        self, origin_key: tuple[str, str, int], limits: AnswerLimits = DEFAULT_LIMITS
    ) -> None:
        super().__init__(origin_key, limits)
        # Outbound headers are checked already (``encode_request`` refuses what HTTP cannot
        # carry) and lower-cased here: h2's own pass over them doubles a request's cost.
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config=config)
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: DEFAULT_MAX_STREAMS,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_head_bytes,
            },
        )
        self._h2.decoder.max_header_list_size = limits.max_head_bytes
        self._quiet = 0  # bytes received since the state machine last reported an event
        self._streams: dict[int, _Stream] = {}
        self._max_streams = DEFAULT_MAX_STREAMS
        self._going_away = False

    # --- what the pool asks
    @property
    def available(self) -> bool:
        """Whether another request may start on it now."""
        return not self.closed and not self._going_away and len(self._streams) < self._max_streams

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    @property
    def reusable(self) -> bool:
        return not self.closed and not self._going_away

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._h2.initiate_connection()
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._fail_all(f"not HTTP/2: {exc}", invalid=True)
            self.close()
            return
        self._quiet = 0 if events else self._quiet + len(data)
        if self._quiet > self.limits.max_head_bytes + _FRAME_ROOM:
            self._fail_all(f"over {self.limits.max_head_bytes} bytes in one header block", True)
            self.close()
            return
        for event in events:
            self._on(event)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.gone.done():
            self.gone.set_result(None)
        reason = f": {exc}" if exc else ""
        self._fail_all(f"the endpoint closed the connection{reason}")

    # --- the sender's side
    def request(self, out: OutgoingRequest, origin: Origin) -> asyncio.Future[Answer]:
        """Start a request on a new stream; the future is the answer (or
        :class:`ConnectionLost`). :class:`InvalidRequest` if h2 refuses a header."""
        headers = [
            (b":method", out.method.encode("ascii")),
            (b":scheme", b"https"),
            (b":authority", origin.host_header.encode("ascii")),
            (b":path", origin.target.encode("latin-1")),
        ]
        headers += [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in out.headers]
        headers.append((b"content-length", str(len(out.body)).encode("ascii")))
        try:
            stream_id = self._h2.get_next_available_stream_id()
        except h2.exceptions.NoAvailableStreamIDError:  # a billion requests: a new one
            self._going_away = True
            raise ConnectionLost("no stream ids left on the connection", answered=False) from None
        try:
            self._h2.send_headers(stream_id, headers, end_stream=not out.body)
        except h2.exceptions.TooManyStreamsError:
            # The endpoint's limit is lower than we counted: full until a stream ends.
            self._max_streams = len(self._streams)
            raise ConnectionLost("the endpoint takes no more streams", answered=False) from None
        except h2.exceptions.ProtocolError as exc:
            raise InvalidRequest(str(exc)) from None
        stream = _Stream(asyncio.get_running_loop().create_future(), out.body)
        self._streams[stream_id] = stream
        stream.waiter.add_done_callback(lambda _: self._abandon(stream_id))
        self._send_body(stream_id, stream)
        self._flush()
        return stream.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # --- internals
    def _on(self, event: Any) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            stream.started = True
            problem = self._header_problem(event.headers)
            if problem is not None:
                self._refuse(event.stream_id, problem)
                return
            for name, value in event.headers:
                if name == b":status":
                    stream.status = int(value)
                elif (wanted := _WANTED.get(name)) is not None:
                    stream.headers[wanted] = value.decode("latin-1")
        elif isinstance(event, h2.events.DataReceived):
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if stream is not None:
                stream.body += event.data
                if len(stream.body) >= MAX_RESPONSE_BYTES:  # enough: keep the start
                    self._finish(event.stream_id, stream)
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            self._finish(event.stream_id, stream)
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            answered = stream.started or event.error_code not in _UNPROCESSED
            self._fail(
                event.stream_id, f"stream reset by the endpoint ({event.error_code!r})", answered
            )
        elif isinstance(event, h2.events.InformationalResponseReceived) and stream is not None:
            stream.interim += 1
            most = self.limits.max_interim_answers
            problem = self._header_problem(event.headers)
            if problem is None and stream.interim > most:
                problem = f"more than {most} interim 1xx answers"
            if problem is not None:
                self._refuse(event.stream_id, problem)
        elif isinstance(event, h2.events.WindowUpdated):
            for stream_id, waiting in list(self._streams.items()):
                if waiting.pending and event.stream_id in (0, stream_id):
                    self._send_body(stream_id, waiting)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            changed = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
            if changed is not None:
                self._max_streams = changed.new_value
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._going_away = True
            last = event.last_stream_id if event.last_stream_id is not None else 0
            for stream_id in [s for s in self._streams if s > last]:
                self._fail(stream_id, "the endpoint is going away (GOAWAY)", False)

    def _send_body(self, stream_id: int, stream: _Stream) -> None:
        while stream.pending:
            window = min(
                self._h2.local_flow_control_window(stream_id), self._h2.max_outbound_frame_size
            )
            if window <= 0:
                return  # the rest goes when the endpoint opens its window
            chunk, stream.pending = stream.pending[:window], stream.pending[window:]
            self._h2.send_data(stream_id, bytes(chunk), end_stream=not stream.pending)

    def _finish(self, stream_id: int, stream: _Stream) -> None:
        if not stream.waiter.done():
            body = bytes(stream.body[:MAX_RESPONSE_BYTES])
            stream.waiter.set_result(Answer(stream.status, stream.headers, body))

    def _fail(self, stream_id: int, message: str, answered: bool) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not stream.waiter.done():
            stream.waiter.set_exception(ConnectionLost(message, answered=answered))

    def _fail_all(self, message: str, invalid: bool = False) -> None:
        for stream_id in list(self._streams):
            if invalid:
                self._refuse(stream_id, message)
            else:
                self._fail(stream_id, message, self._streams[stream_id].started)

    def _header_problem(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        limits = self.limits
        if len(headers) > limits.max_headers + 1:  # and :status
            return f"more than {limits.max_headers} headers"
        for name, value in headers:
            if len(name) + len(value) + 4 > limits.max_header_line_bytes:  # as "n: v\r\n"
                return f"a header line over {limits.max_header_line_bytes} bytes"
        return None

    def _refuse(self, stream_id: int, problem: str) -> None:
        """Fail the stream's attempt as an invalid answer (its done callback resets it)."""
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.waiter.done():
            stream.waiter.set_exception(InvalidAnswer(problem))

    def _abandon(self, stream_id: int) -> None:
        """The caller has its answer (or gave up): forget the stream, cancel it if the
        endpoint is still on it."""
        if self._streams.pop(stream_id, None) is None or self.closed:
            return
        stream = self._h2.streams.get(stream_id)
        if stream is not None and not stream.closed:
            try:
                self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:  # the connection is closing meanwhile
                pass
            self._flush()
        if not self._streams:
            self.idle_since = asyncio.get_running_loop().time()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Negotiating(asyncio.Protocol):
    """The protocol factory's product for a new connection: once the TLS handshake is done
    it hands the transport to :class:`H2Connection` if ALPN selected ``h2``, else to
    :class:`.http1.Connection` (``chosen``)."""

    def __init__(
        self, origin_key: tuple[str, str, int], limits: AnswerLimits = DEFAULT_LIMITS
    ) -> None:
        self.origin_key = origin_key
        self.limits = limits
        self.chosen: Connection | H2Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        chosen: Connection | H2Connection
        if negotiated(transport) == "h2":
            chosen = H2Connection(self.origin_key, self.limits)
        else:
            chosen = Connection(self.origin_key, self.limits)
        self.chosen = chosen
        transport.set_protocol(chosen)
        chosen.connection_made(transport)


def negotiated(transport: asyncio.BaseTransport) -> str | None:
    """The protocol ALPN selected on a TLS transport; None on cleartext or without ALPN."""
    tls = transport.get_extra_info("ssl_object")
    return None if tls is None else cast(ssl.SSLObject, tls).selected_alpn_protocol()
