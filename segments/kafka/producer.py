"""The durable produce path: one idempotent ``acks=all`` producer per store, and the fence probe.

librdkafka delivers its reports on whatever thread calls ``poll``; a daemon thread polls and
hands each report to the event loop with ``loop.call_soon_threadsafe``, resolving the future
the ``send`` is awaiting. So ``send`` returns only after the delivery report, and the event
loop never blocks.

The ack deadline is hard: a record whose report reaches us later than ``produce_timeout_s``
after its ``send`` began is failed (``StorageUnavailable``) even if the broker stored it. The
seal's race argument (see ``store``) rests on it: no record is ever acknowledged to a caller
more than ``produce_timeout_s`` after that caller handed it over.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from core.errors import HttpbusError, NotFound, StorageUnavailable

from ..protocol import Produced, Record
from .config import KafkaSettings
from .errors import translate, unavailable

log = logging.getLogger(__name__)

PROBE_HEADER = "httpbus-fence-probe"
# A probe is stamped a century ahead: a broker whose topic still takes writes refuses it as
# INVALID_TIMESTAMP (message.timestamp.after.max.ms), so a probe is never stored.
_PROBE_AHEAD_MS = 100 * 365 * 86_400_000

SendResult = Produced | HttpbusError  # what became of one record sent


class DurableProducer:
    """The store's long-lived idempotent producer and the thread that polls it."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._producer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._also_poll: Callable[[float], object] | None = None
        # Batches completed during the current poll, filled and drained on the poll thread.
        self._reports: list[asyncio.Future[None]] = []

    def start(
        self, loop: asyncio.AbstractEventLoop, also_poll: Callable[[float], object] | None = None
    ) -> None:
        """Create the producer (no network yet) and start polling it, and ``also_poll`` (the
        AdminClient, whose log lines reach Python only when it is polled)."""
        try:
            self._producer = Producer(self._settings.producer())
        except KafkaException as exc:
            raise translate(exc, "create producer") from exc
        self._loop = loop
        self._also_poll = also_poll
        self._thread = threading.Thread(target=self._poll, name="httpbus-kafka-poll", daemon=True)
        self._thread.start()

    @property
    def client(self) -> Any:
        """The confluent-kafka ``Producer`` (for metadata lookups)."""
        return self._producer

    async def send(self, topic: str, partition: int, record: Record) -> Produced:
        """Store one record; returns after its delivery report (``acks=all``)."""
        [outcome] = await self.send_many(topic, [(partition, record)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def send_many(self, topic: str, items: Sequence[tuple[int, Record]]) -> list[SendResult]:
        """Enqueue every record, then await every report; an outcome per record, in order.
        One future and one timer per call, completed by the poll thread when the last report
        is in; per record only ``produce`` and one small callback."""
        loop = self._loop
        assert loop is not None, "start() the store first"
        timeout = self._settings.produce_timeout_s
        batch = _Batch(
            loop.create_future(), len(items), time.monotonic() + timeout, self._delivered
        )
        produce = self._producer.produce
        refused = 0
        for index, (partition, record) in enumerate(items):
            try:
                produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    partition=partition,
                    headers=list(record.headers) or None,
                    timestamp=record.timestamp_ms or 0,
                    on_delivery=functools.partial(batch.report, index),
                )
            except BufferError as exc:
                batch.outcomes[index] = unavailable(
                    f"produce to {topic}", f"refused: local queue full ({exc})", stored=False
                )
                refused += 1
            except KafkaException as exc:
                batch.outcomes[index] = translate(exc, f"produce to {topic}")
                refused += 1
        if batch.expect(len(items) - refused):
            batch.future.set_result(None)
        if not batch.future.done():
            # A timer, not wait_for + shield: two fewer futures and a task per request.
            timer = loop.call_later(timeout, _expire, batch.future)
            try:
                await batch.future
            finally:
                timer.cancel()
        return batch.results(topic, timeout)

    def _delivered(self, batch: _Batch) -> None:
        # Runs on the poll thread, after a report completed ``batch``.
        self._reports.append(batch.future)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.poll(0.1)
                if self._also_poll is not None:
                    self._also_poll(0)
            except Exception:  # a bug in a callback must not stop deliveries
                log.exception("kafka producer poll failed")
            self._hand_over()

    def _hand_over(self) -> None:
        if not self._reports:
            return
        reports, self._reports = self._reports, []
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(_complete_all, reports)
        except RuntimeError:  # the loop closed meanwhile: nobody is waiting any more
            pass

    def purge_unsent(self) -> None:
        """Fail every record still queued here, not yet sent to a broker: their callers get a
        ``StorageUnavailable`` that says they were never stored (``_PURGE_QUEUE``). Records
        sent and unanswered are left alone: they may be stored."""
        if self._producer is not None:
            self._producer.purge(in_queue=True, in_flight=False, blocking=False)

    async def close(self) -> None:
        """Stop polling; records still unacknowledged after a short flush are purged (their
        callers, if still waiting, get ``StorageUnavailable``)."""
        if self._thread is None:
            return
        self._stop.set()
        thread, producer, self._thread = self._thread, self._producer, None
        await asyncio.to_thread(_shutdown, thread, producer)


def _shutdown(thread: threading.Thread, producer: Any) -> None:
    thread.join()
    producer.flush(1.0)
    producer.purge()
    producer.poll(0)
    producer.close()


def _complete_all(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Batch:
    """The outcomes of one ``send_many``. The poll thread stores each report as it comes
    (``report``: no lock, no object but the report itself) and counts them; the loop thread,
    once done enqueueing, says how many reports to ``expect``. Each side writes its own
    counter and then reads the other's (the GIL orders them), so at least one of the two sees
    the batch complete; completing twice is harmless (the future is checked)."""

    __slots__ = ("_expected", "_reported", "deadline", "done", "future", "outcomes")

    def __init__(
        self,
        future: asyncio.Future[None],
        size: int,
        deadline: float,
        done: Callable[[_Batch], None],
    ) -> None:
        self.future = future
        self.deadline = deadline
        # A report's message (acknowledged in time), or an error; None while unreported.
        self.outcomes: list[Any] = [None] * size
        self._reported = 0  # written by the poll thread only
        self._expected = -1  # written by the loop thread only: unknown while enqueueing
        self.done = done  # called on the poll thread by the report that completes the batch

    def expect(self, count: int) -> bool:
        """Every record is enqueued and ``count`` reports are due; True if all are in."""
        self._expected = count
        return self._reported == count

    def report(self, index: int, err: KafkaError | None, msg: Any) -> None:
        """The delivery callback (poll thread): never raises, does the least it can."""
        if err is not None:
            self.outcomes[index] = translate(err, f"produce to {msg.topic()}")
        elif time.monotonic() > self.deadline:
            self.outcomes[index] = unavailable(
                f"produce to {msg.topic()}", "acknowledged after the timeout"
            )
        else:
            self.outcomes[index] = msg
        self._reported += 1
        if self._reported == self._expected:
            self.done(self)

    def results(self, topic: str, timeout: float) -> list[SendResult]:
        """An outcome per record (loop thread); those still unreported are late. Read once:
        a report coming later is not seen by the caller, who has its answer."""
        out: list[SendResult] = []
        for outcome in list(self.outcomes):
            if outcome is None:
                out.append(
                    unavailable(f"produce to {topic}", f"not acknowledged within {timeout:g}s")
                )
            elif isinstance(outcome, HttpbusError):
                out.append(outcome)
            else:
                out.append(Produced(outcome.partition(), outcome.offset(), outcome.timestamp()[1]))
        return out


def probe_until_refused(
    settings: KafkaSettings, topic: str, partitions: int, timeout: float
) -> None:
    """Write a probe to every partition until the broker refuses each with MSG_SIZE_TOO_LARGE,
    i.e. until the zero ``max.message.bytes`` is in force on every partition leader. Blocking.

    A probe is stamped far in the future, so a broker that still takes writes refuses it
    (INVALID_TIMESTAMP) instead of storing it: probing never adds a record to the segment."""
    producer = Producer(settings.probe())
    deadline = time.monotonic() + timeout
    pending = set(range(partitions))
    try:
        while pending:
            if time.monotonic() > deadline:
                raise unavailable(f"seal {topic}", f"fence not in force within {timeout:g}s")
            refused = _probe_once(producer, topic, pending, deadline)
            pending -= refused
            if pending:
                time.sleep(0.05)
    finally:
        producer.purge()
        producer.poll(0)
        producer.close()


def _probe_once(producer: Any, topic: str, partitions: set[int], deadline: float) -> set[int]:
    errors: dict[int, KafkaError | None] = {}

    def report(err: KafkaError | None, msg: Any) -> None:
        errors[msg.partition()] = err

    stamp = int(time.time() * 1000) + _PROBE_AHEAD_MS
    for partition in partitions:
        producer.produce(
            topic,
            value=b"",
            partition=partition,
            timestamp=stamp,
            headers=[(PROBE_HEADER, b"1")],
            on_delivery=report,
        )
    producer.flush(max(0.1, deadline - time.monotonic()))
    refused = set()
    for partition, err in errors.items():
        if err is None:
            # Only a topic created elsewhere, without our timestamp bound, could store it.
            raise StorageUnavailable(f"kafka: seal {topic}: a fence probe was stored")
        code = err.code()
        if code == KafkaError.MSG_SIZE_TOO_LARGE:
            refused.add(partition)
        elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise NotFound(f"kafka: seal {topic}: no such topic")
    return refused
