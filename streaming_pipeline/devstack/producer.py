"""Produce ride and pickup records to Kafka as Confluent-wire-format Avro."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.serialization import MessageField, SerializationContext

from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.records import CsvRow, Record, read_csv, shipped_zone_lookup
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.progress import Progress
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.schemas import load_schema
from streaming_pipeline.lakehouse.sources import source_for_topic
from streaming_pipeline.lakehouse.tables import TAXI_ZONE_LOOKUP
from streaming_pipeline.resources.kafka import KafkaResource

if TYPE_CHECKING:
    from pathlib import Path

    from confluent_kafka.schema_registry.avro import AvroSerializer

ACKS = ("0", "1", "all")
MAX_REPORTED_ERRORS = 20

_LIBRDKAFKA_LOG = logging.getLogger("streaming_pipeline.devstack.producer.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
_LIBRDKAFKA_LOG.propagate = False


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
    _check_arguments(topic, acks)
    encoder = _set_up_topic(kafka, registry, topic, partitions, value_schema)
    config = _producer_config(kafka, acks)
    # librdkafka's own log lines (e.g. "coordinator load in progress: retrying" on a fresh broker) go to logging;
    # what matters reaches the user through the delivery reports and the summary.
    producer = kafka.producer(**config, logger=_LIBRDKAFKA_LOG)
    result = ProduceResult(topic=topic)
    # A bar on a terminal, only the final line into a pipe or a log (streaming_pipeline.lakehouse.progress).
    progress = Progress(total, f"producing {topic}", "rec", enabled=show_progress)
    try:
        with _ctrl_c_requests_stop(stop_on_interrupt) as stop:
            _send_rows(producer, encoder, rows, result, _Pacer(rate), progress, stop)
        remaining = producer.flush(timeout=config["message.timeout.ms"] / 1000 + 5)
        if remaining:
            result.failed += remaining
            result.errors.append(f"{remaining} record(s) still undelivered when the flush timed out")
    finally:
        progress.close()
    return result


def _check_arguments(topic: str, acks: str) -> None:
    source_for_topic(project_sources(), topic)  # a ConfigurationError naming the declared topics
    if acks not in ACKS:
        raise ConfigurationError(f"--acks must be one of {', '.join(ACKS)}, got {acks!r}")


@dataclass
class _Encoder:
    """Key and value of a topic's records in the Confluent wire format, with the topic's registered schemas."""

    topic: str
    key_field: str
    key_serializer: AvroSerializer
    value_serializer: AvroSerializer
    #: The fields of a record key schema (a table topic's key), filled from the value's fields of the same names.
    key_fields: tuple[str, ...] = ()

    def encode(self, record: Record) -> tuple[bytes | None, bytes]:
        key: Any = record.get(self.key_field)
        if self.key_fields and key is not None:  # a record key: its fields, taken from the value
            key = {name: record.get(name) for name in self.key_fields}
        key_context = SerializationContext(self.topic, MessageField.KEY)
        key_bytes = None if key is None else self.key_serializer(key, key_context)
        # AvroSerializer returns None only for a None object; a record always serializes to bytes
        value_bytes = cast(bytes, self.value_serializer(record, SerializationContext(self.topic, MessageField.VALUE)))
        return key_bytes, value_bytes


def _set_up_topic(
    kafka: KafkaResource, registry: RegistryClient, topic: str, partitions: int, value_schema: str | None
) -> _Encoder:
    """Create the topic when missing and register its key and value schemas; the encoder for its records."""
    source = source_for_topic(project_sources(), topic)
    if source.key_schema is None or not source.key_field:
        raise ConfigurationError(f"the source of topic {topic!r} declares no key schema and key field to produce with")
    key_schema = load_schema(source.key_schema)
    value_schema = value_schema or load_schema(source.value_schema)
    kafka.ensure_topic(topic, partitions=partitions, cleanup_policy=source.cleanup_policy)
    registry.register(source.key_subject, key_schema)
    registry.register(source.value_subject, value_schema)
    parsed_key = json.loads(key_schema)
    is_record = isinstance(parsed_key, dict) and parsed_key.get("type") == "record"
    key_fields = tuple(c.name for c in source.key_columns) if is_record else ()
    return _Encoder(
        topic, source.key_field, registry.serializer(key_schema), registry.serializer(value_schema), key_fields
    )


def _producer_config(kafka: KafkaResource, acks: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "acks": acks,
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "message.timeout.ms": int(max(kafka.timeout_seconds, 5) * 3000),
        "queue.buffering.max.messages": 200000,
    }
    if acks == "all":
        config["enable.idempotence"] = True
    return config


def _send_rows(
    producer: Producer,
    encoder: _Encoder,
    rows: Iterable[CsvRow],
    result: ProduceResult,
    pacer: _Pacer,
    progress: Progress,
    stop: threading.Event,
) -> None:
    """Encode and send each good row, counting the bad ones, until the rows end or a stop is requested."""

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            result.sent += 1
        else:
            result.fail(f"delivery to {encoder.topic} failed: {err.str()}")

    for row in rows:
        if stop.is_set():
            result.interrupted = True
            return
        progress.update(1)
        if row.record is None:
            result.fail(row.error or f"line {row.line_number}: malformed")
            continue
        try:
            key_bytes, value_bytes = encoder.encode(row.record)
        except Exception as exc:  # a record the schema cannot encode
            result.fail(f"line {row.line_number}: cannot encode as Avro: {exc}")
            continue
        pacer.wait()
        _send(producer, encoder.topic, key_bytes, value_bytes, on_delivery, result, row.line_number)
        producer.poll(0)


def _send(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes,
    on_delivery: Callable[[KafkaError | None, Any], None],
    result: ProduceResult,
    line_number: int,
) -> None:
    """Hand one record to librdkafka, waiting for deliveries while its local queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.1)
        except KafkaException as exc:
            result.fail(f"line {line_number}: {exc}")
            return


def produce_zone_lookup(
    kafka: KafkaResource, registry: RegistryClient, csv_path: Path | None = None, *, show_progress: bool = False
) -> ProduceResult:
    """The TLC taxi-zone lookup (`csv_path`, default the one shipped with the package) to the `taxi_zones` table topic:
    one record per zone, keyed by its id. A zone already there gets a new version (the same values, when the file
    has not changed)."""
    path = csv_path or shipped_zone_lookup()
    rows = list(read_csv(path, TAXI_ZONE_LOOKUP))
    return produce(kafka, registry, TAXI_ZONE_LOOKUP.topic, rows, total=len(rows), show_progress=show_progress)
