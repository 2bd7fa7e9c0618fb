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

from ...core.errors import HttpbusError, NotFound, StorageUnavailable
from ..protocol import Produced, Record
from .config import KafkaSettings
from .errors import translate, unavailable

log = logging.getLogger(__name__)

PROBE_HEADER = "httpbus-fence-probe"
# A probe is stamped a century ahead: a broker whose topic still takes writes refuses it as
# INVALID_TIMESTAMP (message.timestamp.after.max.ms), so a probe is never stored.
_PROBE_AHEAD_MS = 100 * 365 * 86_400_000

Outcome = Produced | HttpbusError


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

    async def send_many(self, topic: str, items: Sequence[tuple[int, Record]]) -> list[Outcome]:
        """Enqueue every record, then await every report; an outcome per record, in order.
        One future per call, completed by the poll thread when the last report is in."""
        assert self._loop is not None, "start() the store first"
        deadline = time.monotonic() + self._settings.produce_timeout_s
        batch = _Batch(self._loop.create_future(), len(items), deadline)
        for index, (partition, record) in enumerate(items):
            refused = self._enqueue(topic, partition, record, batch, index)
            if refused is not None:
                batch.outcomes[index] = refused
        if batch.enqueued_all():
            batch.future.set_result(None)
        if not batch.future.done():
            try:
                await asyncio.wait_for(
                    asyncio.shield(batch.future), max(0.0, deadline - time.monotonic())
                )
            except TimeoutError:
                pass
        timeout = self._settings.produce_timeout_s
        late = unavailable(f"produce to {topic}", f"not acknowledged within {timeout:g}s")
        return [late if outcome is None else outcome for outcome in batch.snapshot()]

    def _enqueue(
        self, topic: str, partition: int, record: Record, batch: _Batch, index: int
    ) -> HttpbusError | None:
        try:
            self._producer.produce(
                topic,
                value=record.value,
                key=record.key,
                partition=partition,
                headers=list(record.headers) or None,
                timestamp=record.timestamp_ms or 0,
                on_delivery=functools.partial(self._delivered, batch, index),
            )
        except BufferError as exc:
            return unavailable(f"produce to {topic}", f"refused: local queue full ({exc})")
        except KafkaException as exc:
            return translate(exc, f"produce to {topic}")
        batch.sent()
        return None

    def _delivered(self, batch: _Batch, index: int, err: KafkaError | None, msg: Any) -> None:
        # Runs on the poll thread: never raise here, only record the outcome.
        outcome: Outcome
        if err is not None:
            outcome = translate(err, f"produce to {msg.topic()}")
        elif time.monotonic() > batch.deadline:
            outcome = unavailable(f"produce to {msg.topic()}", "acknowledged after the timeout")
        else:
            outcome = Produced(msg.partition(), msg.offset(), msg.timestamp()[1])
        if batch.report(index, outcome):
            # Handed to the loop once per poll: one cross-thread wake-up for many batches.
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


class _Batch:
    """The outcomes of one ``send_many``, filled in by the poll thread. ``sent`` (loop
    thread) and ``report`` (poll thread) count under a lock: a report can arrive before the
    loop has finished enqueueing the rest."""

    __slots__ = ("_done", "_lock", "_sent", "_total", "deadline", "future", "outcomes")

    def __init__(self, future: asyncio.Future[None], size: int, deadline: float) -> None:
        self.future = future
        self.deadline = deadline
        self.outcomes: list[Outcome | None] = [None] * size
        self._lock = threading.Lock()
        self._sent = 0
        self._done = 0
        self._total: int | None = None  # known once every record was enqueued

    def sent(self) -> None:
        with self._lock:
            self._sent += 1

    def enqueued_all(self) -> bool:
        """Mark the enqueueing done; True if every report is already in."""
        with self._lock:
            self._total = self._sent
            return self._done == self._total

    def report(self, index: int, outcome: Outcome) -> bool:
        """Record one report; True when it completes a fully enqueued batch."""
        with self._lock:
            self.outcomes[index] = outcome
            self._done += 1
            return self._done == self._total

    def snapshot(self) -> list[Outcome | None]:
        with self._lock:
            return list(self.outcomes)


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
