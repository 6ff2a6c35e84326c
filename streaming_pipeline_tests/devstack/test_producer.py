"""The producer CLI and Kafka semantics on a real broker and registry: round trip of every field,
keys and partitions, consumer groups and committed offsets, and the CLI's errors."""

from __future__ import annotations

import csv
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.serialization import MessageField, SerializationContext

from streaming_pipeline.devstack.cli import main
from streaming_pipeline.lakehouse.errors import BrokerUnavailableError
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.tables import RIDES_TOPIC

pytestmark = pytest.mark.integration

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture(scope="module")
def kafka_stack(session_stack):
    """The session's broker and registry, cleared once for the module: its tests use topics and groups of their own."""
    return session_stack.clear()


def _cli(stack, *args: str) -> int:
    return main(
        [
            *args,
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
            "--timeout",
            "5",
        ]
    )


def _consumer(stack, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": stack.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _drain(consumer: Consumer, expected: int, seconds: float = 30) -> list:
    messages, deadline = [], time.monotonic() + seconds
    while len(messages) < expected and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(500, 0.5) if m.error() is None]
    return messages


def _expected_csv_rows(path: Path) -> list[dict]:
    """The CSV read with the csv module only, converted by hand to the Avro field names and types."""
    as_int = lambda v: None if v == "" else int(v)  # noqa: E731
    as_float = lambda v: None if v == "" else float(v)  # noqa: E731
    as_time = lambda v: datetime.strptime(v, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)  # noqa: E731
    rows = []
    with path.open(newline="") as handle:
        for r in csv.DictReader(handle):
            rows.append(
                {
                    "vendor_id": as_int(r["VendorID"]),
                    "pickup_datetime": as_time(r["tpep_pickup_datetime"]),
                    "dropoff_datetime": as_time(r["tpep_dropoff_datetime"]),
                    "passenger_count": as_int(r["passenger_count"]),
                    "trip_distance": float(r["trip_distance"]),
                    "rate_code_id": as_int(r["RatecodeID"]),
                    "store_and_fwd_flag": r["store_and_fwd_flag"] or None,
                    "pu_location_id": int(r["PULocationID"]),
                    "do_location_id": int(r["DOLocationID"]),
                    "payment_type": as_int(r["payment_type"]),
                    "fare_amount": float(r["fare_amount"]),
                    "extra": float(r["extra"]),
                    "mta_tax": float(r["mta_tax"]),
                    "tip_amount": float(r["tip_amount"]),
                    "tolls_amount": float(r["tolls_amount"]),
                    "improvement_surcharge": float(r["improvement_surcharge"]),
                    "total_amount": float(r["total_amount"]),
                    "congestion_surcharge": as_float(r["congestion_surcharge"]),
                }
            )
    return rows


def test_csv_rides_round_trip_every_field_and_keys_pick_partitions(kafka_stack, rides_csv: Path) -> None:
    assert _cli(kafka_stack, "produce", "rides", "--csv", str(rides_csv)) == 0
    expected = _expected_csv_rows(rides_csv)
    consumer = _consumer(kafka_stack, "round-trip")
    consumer.subscribe([RIDES_TOPIC])
    messages = _drain(consumer, len(expected))
    consumer.close()
    assert len(messages) == len(expected) == 266

    registry = RegistryClient(kafka_stack.schema_registry_url)
    values, keys = registry.deserializer(), registry.deserializer()
    decoded = []
    partitions_by_key: dict[int, set[int]] = {}
    for message in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        value = values(message.value(), SerializationContext(RIDES_TOPIC, MessageField.VALUE))
        key = keys(message.key(), SerializationContext(RIDES_TOPIC, MessageField.KEY))
        assert key == value["vendor_id"]
        partitions_by_key.setdefault(key, set()).add(message.partition())
        decoded.append(value)
    # Within a partition the producer's order is kept, so each vendor's rides come back in CSV order.
    for vendor in {r["vendor_id"] for r in expected}:
        assert [r for r in decoded if r["vendor_id"] == vendor] == [r for r in expected if r["vendor_id"] == vendor]
    assert all(len(parts) == 1 for parts in partitions_by_key.values())  # same key, same partition


def test_consumer_groups_split_partitions_resume_and_start_over(kafka_stack) -> None:
    topic = "groups_demo"
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_stack.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": kafka_stack.bootstrap_servers})
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=str(i).encode(), partition=i % 2)
    producer.flush(10)

    members = [_consumer(kafka_stack, "splitters", **{"session.timeout.ms": 6000}) for _ in range(3)]
    for member in members:
        member.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for member in members:
            member.poll(0.2)
        assignments = [member.assignment() for member in members]
        # not just "both partitions assigned": the first member to join holds both until the others arrive
        if sorted(len(a) for a in assignments) == [0, 1, 1]:
            break
    sizes = sorted(len(a) for a in assignments)
    assert sizes == [0, 1, 1]  # two consumers share the two partitions, the third stays idle
    for member in members:
        member.close()

    first = _consumer(kafka_stack, "resumers")
    first.subscribe([topic])
    got = _drain(first, 20)
    assert sorted(int(m.value()) for m in got) == list(range(20))
    first.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 5)], asynchronous=False)
    first.close()
    restarted = _consumer(kafka_stack, "resumers")
    restarted.subscribe([topic])
    resumed = _drain(restarted, 10)
    restarted.close()
    assert sorted((m.partition(), m.offset()) for m in resumed) == [(p, o) for p in (0, 1) for o in range(5, 10)]

    fresh = _consumer(kafka_stack, "newcomers")
    fresh.subscribe([topic])
    everything = _drain(fresh, 20)
    fresh.close()
    assert len(everything) == 20


def test_cli_reports_missing_file(kafka_stack, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.csv"
    assert _cli(kafka_stack, "produce", "rides", "--csv", str(missing)) == 1
    assert f"error: CSV file not found: {missing}" in capsys.readouterr().err


def test_cli_reports_malformed_row_by_line_and_sends_the_good_ones(
    kafka_stack, rides_csv: Path, tmp_path: Path, capsys
) -> None:
    lines = rides_csv.read_text().splitlines()
    broken = lines[2].split(",")
    broken[4] = "far"  # trip_distance
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([lines[0], lines[1], ",".join(broken), lines[3]]) + "\n")
    before = _end_total(kafka_stack, RIDES_TOPIC)
    assert _cli(kafka_stack, "produce", "rides", "--csv", str(bad)) == 1
    captured = capsys.readouterr()
    assert f"{bad}: line 3: column trip_distance: cannot read 'far' as float" in captured.err
    assert "rides: 2 sent, 1 failed" in captured.out
    assert _end_total(kafka_stack, RIDES_TOPIC) == before + 2


def test_cli_fails_fast_on_unreachable_broker(kafka_stack, rides_csv: Path, capsys) -> None:
    started = time.monotonic()
    code = main(
        [
            "produce",
            "rides",
            "--csv",
            str(rides_csv),
            "--no-progress",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--schema-registry-url",
            kafka_stack.schema_registry_url,
            "--timeout",
            "3",
        ]
    )
    assert code == 1
    assert time.monotonic() - started < 30
    assert "error: Kafka at 127.0.0.1:1 did not answer within 3 s" in capsys.readouterr().err


def test_cli_rejected_schema_names_subject_and_sends_nothing(kafka_stack, rides_csv: Path, capsys) -> None:
    assert _cli(kafka_stack, "produce", "rides", "--synthetic", "1") == 0
    before = _end_total(kafka_stack, RIDES_TOPIC)
    code = _cli(
        kafka_stack,
        "produce",
        "rides",
        "--csv",
        str(rides_csv),
        "--schema",
        str(SCHEMAS / "ride_value_incompatible.avsc"),
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "rejected the schema for subject 'rides-value'" in err and "HTTP 409" in err
    assert _end_total(kafka_stack, RIDES_TOPIC) == before


def _end_total(stack, topic: str) -> int:
    from streaming_pipeline.resources import KafkaResource

    return sum(KafkaResource(bootstrap_servers=stack.bootstrap_servers).end_offsets(topic).values())


def test_cli_ctrl_c_flushes_and_reports_what_reached_the_topic(kafka_stack) -> None:
    """SIGINT mid-run: exit 130 with the summary, and the count it reports is exactly what the topic received."""
    before = _end_total(kafka_stack, RIDES_TOPIC)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streaming_pipeline.devstack.cli",
            "produce",
            "rides",
            "--synthetic",
            "100000",
            "--rate",
            "200",
            "--no-progress",
            "--bootstrap-servers",
            kafka_stack.bootstrap_servers,
            "--schema-registry-url",
            kafka_stack.schema_registry_url,
        ],
        cwd=SCHEMAS.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def sending() -> bool:
        try:
            return _end_total(kafka_stack, RIDES_TOPIC) > before
        except BrokerUnavailableError:  # the producer has just created the topic: no partition leader yet
            return False

    try:
        # interrupt once records are flowing (imports, topic and schemas come first), ~3 s into sending
        deadline = time.monotonic() + 60
        while not sending() and process.poll() is None:
            assert time.monotonic() < deadline, "the producer sent nothing within 60 s"
            time.sleep(0.2)
        time.sleep(3)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (out, err)
    summary = re.search(r"^rides: (\d+) sent, 0 failed, interrupted", out, re.MULTILINE)
    assert summary, (out, err)
    sent = int(summary.group(1))
    assert 0 < sent < 100000
    assert _end_total(kafka_stack, RIDES_TOPIC) - before == sent  # nothing lost, nothing unreported
