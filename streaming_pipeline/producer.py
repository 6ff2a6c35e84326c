"""Produce ride and pickup records to Kafka as Confluent-wire-format Avro."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.serialization import MessageField, SerializationContext
from tqdm import tqdm

from streaming_pipeline.errors import ConfigurationError
from streaming_pipeline.records import CsvRow, Record
from streaming_pipeline.resources.kafka import KafkaResource
from streaming_pipeline.registry_client import RegistryClient
from streaming_pipeline.schemas import TOPIC_SCHEMA_FILES, key_subject, load_schema, value_subject
from streaming_pipeline.settings import PICKUPS_TOPIC, RIDES_TOPIC

ACKS = ("0", "1", "all")
MAX_REPORTED_ERRORS = 20

_LIBRDKAFKA_LOG = logging.getLogger("streaming_pipeline.producer.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False

#: Which field of a record is the message key, per topic (DESIGN section 4).
KEY_FIELDS = {RIDES_TOPIC: "vendor_id", PICKUPS_TOPIC: "pu_location_id"}


@dataclass
class ProduceResult:
    topic: str
    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    #: Ctrl-C stopped reading rows; what was read before was still delivered (or counted as failed).
    interrupted: bool = False

    def fail(self, message: str) -> None:
        self.failed += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(message)


class _Pacer:
    """Sleeps so that at most `rate` records per second are handed to the producer."""

    def __init__(self, rate: float | None) -> None:
        if rate is not None and rate <= 0:
            raise ConfigurationError(f"--rate must be a positive number of events per second, got {rate:g}")
        self.rate = rate
        self.started = time.monotonic()
        self.count = 0

    def wait(self) -> None:
        self.count += 1
        if self.rate is None:
            return
        due = self.started + self.count / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


@contextlib.contextmanager
def _ctrl_c_requests_stop(enabled: bool) -> Iterator[threading.Event]:
    """While records are handed to librdkafka, turn the first Ctrl-C into a request to stop between records.

    A KeyboardInterrupt can be raised at any bytecode, also inside a delivery callback after librdkafka has
    delivered a record but before it was counted: the summary would then under-report the topic. So the
    first SIGINT only sets the event and puts the default handler back, and a second one raises as usual.
    Only the main thread owns signal handlers, and only where SIGINT means KeyboardInterrupt is it changed.
    """
    stop = threading.Event()
    if (
        not enabled
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield stop
        return

    def request_stop(_signum: int, _frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, request_stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def rows_from_records(records: Iterable[Record]) -> Iterator[CsvRow]:
    for number, record in enumerate(records, start=1):
        yield CsvRow(number, record)


def produce(
    kafka: KafkaResource,
    registry: RegistryClient,
    topic: str,
    rows: Iterable[CsvRow],
    *,
    total: int | None = None,
    rate: float | None = None,
    acks: str = "all",
    partitions: int = 2,
    value_schema: str | None = None,
    show_progress: bool = True,
    stop_on_interrupt: bool = False,
) -> ProduceResult:
    """Send every good row to `topic`; count malformed rows and delivery failures as failed.

    Topic and schemas are set up first, so a broker that does not answer or a schema the registry
    rejects stops everything before one record is sent.

    With `stop_on_interrupt` (the CLI), Ctrl-C stops reading rows but still flushes what librdkafka holds,
    so the result counts every record that reached the topic and says `interrupted`; a second Ctrl-C
    aborts the flush. Without it, KeyboardInterrupt propagates as usual (the demo and the benchmark abort).
    """
    if topic not in TOPIC_SCHEMA_FILES:
        raise ConfigurationError(f"unknown topic {topic!r}; choose one of {', '.join(TOPIC_SCHEMA_FILES)}")
    if acks not in ACKS:
        raise ConfigurationError(f"--acks must be one of {', '.join(ACKS)}, got {acks!r}")
    key_file, value_file = TOPIC_SCHEMA_FILES[topic]
    key_schema = load_schema(key_file)
    value_schema = value_schema or load_schema(value_file)

    kafka.ensure_topic(topic, partitions=partitions)
    registry.register(key_subject(topic), key_schema)
    registry.register(value_subject(topic), value_schema)
    key_serializer = registry.serializer(key_schema)
    value_serializer = registry.serializer(value_schema)

    producer_config: dict[str, Any] = {
        "acks": acks,
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "message.timeout.ms": int(max(kafka.timeout_seconds, 5) * 3000),
        "queue.buffering.max.messages": 200000,
    }
    if acks == "all":
        producer_config["enable.idempotence"] = True
    # librdkafka's own log lines (e.g. "coordinator load in progress: retrying" on a fresh broker) go to logging;
    # what matters reaches the user through the delivery reports and the summary.
    producer = kafka.producer(**producer_config, logger=_LIBRDKAFKA_LOG)
    result = ProduceResult(topic=topic)
    key_field = KEY_FIELDS[topic]
    pacer = _Pacer(rate)

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            result.sent += 1
        else:
            result.fail(f"delivery to {topic} failed: {err.str()}")

    progress = tqdm(total=total, unit="rec", desc=f"producing {topic}", disable=not show_progress, file=sys.stderr)
    key_context = SerializationContext(topic, MessageField.KEY)
    value_context = SerializationContext(topic, MessageField.VALUE)
    try:
        with _ctrl_c_requests_stop(stop_on_interrupt) as stop:
            for row in rows:
                if stop.is_set():
                    result.interrupted = True
                    break
                progress.update(1)
                if row.record is None:
                    result.fail(row.error or f"line {row.line_number}: malformed")
                    continue
                try:
                    key = row.record.get(key_field)
                    key_bytes = None if key is None else key_serializer(key, key_context)
                    value_bytes = value_serializer(row.record, value_context)
                except Exception as exc:  # a record the schema cannot encode
                    result.fail(f"line {row.line_number}: cannot encode as Avro: {exc}")
                    continue
                pacer.wait()
                while True:
                    try:
                        producer.produce(topic, key=key_bytes, value=value_bytes, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.1)  # local queue full: wait for deliveries
                    except KafkaException as exc:
                        result.fail(f"line {row.line_number}: {exc}")
                        break
                producer.poll(0)
        remaining = producer.flush(timeout=producer_config["message.timeout.ms"] / 1000 + 5)
        if remaining:
            result.failed += remaining
            result.errors.append(f"{remaining} record(s) still undelivered when the flush timed out")
    finally:
        progress.close()
    return result
