"""Table topics (`mode: upsert`) on the real embedded broker and registry with an in-process Spark: the project's
`taxi_zones` topic, keyed by zone id, through inserts, updates, tombstones and undecodable records, over several
runs, a crash between the MERGE and the batch's commit, a replay from earliest, and a broker that compacted the
topic. The expected tables are computed here from the records the test sent (their keys, values, offsets and
timestamps), not by the code under test."""

from __future__ import annotations

import time
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.serialization import MessageField

from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor
from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.replay import ReplayStart, replay
from streaming_pipeline.lakehouse.bronze import table_batches
from streaming_pipeline.lakehouse.bronze.ingestion import ingest_topic
from streaming_pipeline.lakehouse.bronze.offsets import topic_problems
from streaming_pipeline.lakehouse.bronze.table_reconcile import reconcile_table_topic
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.schemas import load_schema
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.lakehouse.tables import TAXI_ZONE_LOOKUP
from streaming_pipeline_tests.kafka_helpers import avro_frame, end_offsets
from streaming_pipeline_tests.pipeline_assets import pipeline_live_job

pytestmark = pytest.mark.integration

TOPIC = TAXI_ZONE_LOOKUP.topic
KEY_SCHEMA, VALUE_SCHEMA = load_schema(TAXI_ZONE_LOOKUP.key_schema or ""), load_schema(TAXI_ZONE_LOOKUP.value_schema)
#: A value frame whose schema id no registry has: a dead letter.
UNDECODABLE_VALUE = b"\x00\x7f\xff\xff\x00garbage"


class Sent:
    """What the test sent: (location_id or None for an undecodable key, zone or None for a tombstone, good value,
    partition, offset, timestamp in ms), in the order sent."""

    def __init__(self) -> None:
        self.records: list[tuple[int | None, str | None, bool, int, int, int]] = []

    def good(self) -> list[tuple[int, str | None, int, int, int]]:
        """Decodable records (key and value, or a tombstone), by offset."""
        found = [(k, z, p, o, t) for k, z, ok, p, o, t in self.records if k is not None and ok]
        return sorted(found, key=lambda r: (r[2], r[3]))

    def current(self) -> dict[int, tuple[str, int, int]]:
        """{location_id: (zone, partition, offset)} of each key's latest decodable record that is no tombstone."""
        latest: dict[int, tuple[str | None, int, int]] = {}
        for key, zone, partition, offset, _ in self.good():
            latest[key] = (zone, partition, offset)
        return {k: (z, p, o) for k, (z, p, o) in latest.items() if z is not None}

    def versions(self) -> list[tuple[int, str, int, int | None, bool]]:
        """(location_id, zone, valid_from ms, valid_to ms, is_current) of every version: each decodable value, valid
        until the key's next decodable record (a tombstone too)."""
        by_key: dict[int, list[tuple[str | None, int]]] = {}
        for key, zone, _, _, timestamp in self.good():
            by_key.setdefault(key, []).append((zone, timestamp))
        found = []
        for key, records in by_key.items():
            for index, (zone, since) in enumerate(records):
                if zone is None:
                    continue
                until = records[index + 1][1] if index + 1 < len(records) else None
                found.append((key, zone, since, until, until is None))
        return sorted(found)


def _send(stack: Any, registry: RegistryClient, sent: Sent, records: list[tuple[Any, Any]]) -> None:
    """Send (location_id | b"raw key", zone | None | b"raw value") records to partition 0 of the topic, each with a
    timestamp of its own (1 s apart), and note them in `sent`."""
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "enable.idempotence": True})
    delivered: list[tuple[int, int]] = []
    base = int(time.time() * 1000) - 100_000 + 1000 * len(sent.records)
    timestamps = []
    for index, (key, zone) in enumerate(records):
        key_bytes = (
            key
            if isinstance(key, bytes)
            else avro_frame(registry, KEY_SCHEMA, {"location_id": key}, TOPIC, MessageField.KEY)
        )
        if zone is None or isinstance(zone, bytes):
            value_bytes = zone
        else:
            zone_id = key if isinstance(key, int) else 5
            datum = {"location_id": zone_id, "borough": "Queens", "zone": zone, "service_zone": "Boro Zone"}
            value_bytes = avro_frame(registry, VALUE_SCHEMA, datum, TOPIC)
        timestamps.append(base + 1000 * index)
        producer.produce(
            TOPIC,
            key=key_bytes,
            value=value_bytes,
            partition=0,
            timestamp=timestamps[-1],
            on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())) if err is None else None,
        )
        assert producer.flush(30) == 0  # one at a time: offsets follow the order sent
    assert len(delivered) == len(records)
    for (key, zone), (partition, offset), timestamp in zip(records, delivered, timestamps, strict=True):
        good_value = not isinstance(zone, bytes)
        sent.records.append(
            (
                None if isinstance(key, bytes) else key,
                zone if good_value else None,
                good_value,
                partition,
                offset,
                timestamp,
            )
        )


def _create_topic(stack: Any, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config=config or {})])
    futures[TOPIC].result(30)


def _registry(stack: Any) -> RegistryClient:
    registry = RegistryClient(stack.schema_registry_url)
    registry.register(TAXI_ZONE_LOOKUP.key_subject, KEY_SCHEMA)
    registry.register(TAXI_ZONE_LOOKUP.value_subject, VALUE_SCHEMA)
    return registry


def _ingest(spark: Any, resources: dict[str, Any]) -> Any:
    return ingest_topic(
        spark, resources["kafka"], resources["schema_registry"], resources["lakehouse"], source=TAXI_ZONE_LOOKUP
    )


def _current(spark: Any, resources: dict[str, Any]) -> dict[int, tuple[str, int, int]]:
    rows = spark.read.format("delta").load(resources["lakehouse"].table_path("taxi_zones")).collect()
    assert len(rows) == len({r.location_id for r in rows}), "one row per key"
    return {r.location_id: (r.zone, r.kafka_partition, r.kafka_offset) for r in rows}


def _versions(spark: Any, resources: dict[str, Any]) -> list[tuple[int, str, int, int | None, bool]]:
    rows = spark.read.format("delta").load(resources["lakehouse"].table_path("taxi_zones_history")).collect()

    def ms(moment: Any) -> int | None:
        return None if moment is None else round(moment.timestamp() * 1000)

    return sorted((r.location_id, r.zone, ms(r.valid_from), ms(r.valid_to), r.is_current) for r in rows)


def _dead_letters(spark: Any, resources: dict[str, Any]) -> list[tuple[int, int, str]]:
    path = resources["lakehouse"].table_path("dead_letter_records")
    rows = spark.read.format("delta").load(path).where(f"kafka_topic = '{TOPIC}'").collect()
    return sorted((r.kafka_partition, r.kafka_offset, r.error.split(":")[0]) for r in rows)


def _assert_exact(spark: Any, resources: dict[str, Any], sent: Sent) -> None:
    assert _current(spark, resources) == sent.current()
    assert _versions(spark, resources) == sent.versions()
    reconciled = reconcile_table_topic(spark, resources["kafka"], resources["lakehouse"], TAXI_ZONE_LOOKUP)
    assert reconciled.passed, reconciled


@pytest.mark.slow
def test_a_table_topic_keeps_the_latest_value_per_key_and_every_version_through_a_crash_and_a_replay(
    stack, pipeline_resources, spark, monkeypatch
):
    _create_topic(stack)
    registry, sent = _registry(stack), Sent()
    _send(
        stack,
        registry,
        sent,
        [(1, "Newark"), (2, "Jamaica Bay"), (3, "Allerton"), (2, "Jamaica Bay North"), (3, None)]
        + [(4, UNDECODABLE_VALUE), (b"no frame", "Astoria"), (99, None)],
    )
    first = _ingest(spark, pipeline_resources)
    assert (first.rows_written, first.rows_deleted, first.dead_letters) == (2, 0, 2)
    _assert_exact(spark, pipeline_resources, sent)
    assert _current(spark, pipeline_resources).keys() == {1, 2}
    undecodable = [(p, o) for k, _, ok, p, o, _ in sent.records if k is None or not ok]
    assert _dead_letters(spark, pipeline_resources) == sorted(
        [
            (*undecodable[0], f"unknown schema id {int.from_bytes(UNDECODABLE_VALUE[1:5], 'big')}"),
            (*undecodable[1], "key"),
        ]
    )

    # A crash after the MERGEs, before the batch's transaction: the run fails, the next one runs the batch again.
    _send(stack, registry, sent, [(3, "Allerton North"), (1, None), (2, "Jamaica"), (4, "Astoria"), (2, "Jamaica B")])
    real_append = table_batches.append_once
    crashes = []

    def crash_once(frame, path, app_id, *args, **kwargs):  # type: ignore[no-untyped-def]
        if path.endswith("/taxi_zones") and not crashes:
            crashes.append(app_id)
            raise RuntimeError("killed between the MERGE and the batch's commit")
        return real_append(frame, path, app_id, *args, **kwargs)

    monkeypatch.setattr(table_batches, "append_once", crash_once)
    with pytest.raises(Exception, match="killed between"):
        _ingest(spark, pipeline_resources)
    again = _ingest(spark, pipeline_resources)
    assert crashes and again.report.batches == 1
    monkeypatch.undo()
    _assert_exact(spark, pipeline_resources, sent)
    assert _current(spark, pipeline_resources) == {
        2: ("Jamaica B", *sent.current()[2][1:]),
        3: ("Allerton North", *sent.current()[3][1:]),
        4: ("Astoria", *sent.current()[4][1:]),
    }

    # A replay from earliest rebuilds both tables from the topic: the same rows, versions and validity.
    defs = dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=pipeline_resources, executor=dg.in_process_executor)
    )
    replay(
        "taxi_zones",
        ReplayStart(),
        defs=defs,
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _m: None,
    )
    _assert_exact(spark, pipeline_resources, sent)
    assert len(_dead_letters(spark, pipeline_resources)) == 2
    assert _ingest(spark, pipeline_resources).report.input_rows == 0


@pytest.mark.slow
def test_a_compacted_table_topic_is_exact_and_raises_no_alarm_where_a_stream_source_would(
    stack, pipeline_resources, spark
):
    # Segments of a few records, cleaned as soon as they roll: the broker compacts within seconds.
    _create_topic(
        stack,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
            "max.compaction.lag.ms": "1000",
        },
    )
    registry, sent = _registry(stack), Sent()
    for round_ in range(8):
        _send(stack, registry, sent, [(k, f"zone {k} v{round_}") for k in (1, 2, 3)] + [(4, None)])
        time.sleep(0.3)
    kafka = pipeline_resources["kafka"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _kept(spark, kafka) >= len(sent.records) - 2:
        _send(stack, registry, sent, [(5, f"filler {len(sent.records)}")])  # rolls the segment the others sit in
        time.sleep(1)
    kept = _kept(spark, kafka)
    assert kept < len(sent.records) - 2, "the broker did not compact the topic"

    run = _ingest(spark, pipeline_resources)
    assert run.dead_letters == 0
    assert _current(spark, pipeline_resources) == sent.current()
    reconciled = reconcile_table_topic(spark, kafka, pipeline_resources["lakehouse"], TAXI_ZONE_LOOKUP)
    # Keys 1 to 3, and 5 when a filler was needed to roll the segment (4 ends with a tombstone).
    assert reconciled.passed and reconciled.rows == len(sent.current()), reconciled
    # Records gone before the table read them are no alarm for a table topic, and still one for a stream.
    consumed = {0: 0}
    watermarks = {0: (3, sum(end_offsets(stack.bootstrap_servers, TOPIC).values()))}
    assert not topic_problems("taxi_zones", TOPIC, consumed, watermarks, table_topic=True)
    assert "deleted (retention)" in topic_problems("raw_rides", TOPIC, consumed, watermarks).message()
    # The offset sensor asks for a run of a new record, and the checks see nothing wrong.
    _send(stack, registry, sent, [(1, "zone 1 last")])
    key = dg.AssetKey("taxi_zones")
    sensor = build_offset_sensor(
        key,
        TOPIC,
        pipeline_live_job("taxi_zones"),
        SensorSettings(min_records=1),
        ["taxi_zones", "taxi_zones_history"],
        table_topic=True,
    )
    defs = pipeline_definitions()
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance,
            resources={"kafka": kafka, "lakehouse": pipeline_resources["lakehouse"]},
            definitions=dg.Definitions.merge(defs, dg.Definitions(resources=pipeline_resources)),
        )
        result = sensor(context)
    assert isinstance(result, dg.SensorResult) and len(result.run_requests or []) == 1, result
    checks = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=dg.AssetSelection.assets("taxi_zones", "taxi_zones_history"),
        resources=pipeline_resources,
    )
    assert _current(spark, pipeline_resources) == sent.current()
    evaluations = checks.get_asset_check_evaluations()
    assert {e.check_name: e.passed for e in evaluations} == {
        "reconciles_with_kafka_offsets": True,
        "one_row_per_key": True,
        "consumer_lag_below_bound": True,
    }


def _kept(spark: Any, kafka: Any) -> int:
    """Records the topic holds now (fewer than its offsets once compacted)."""
    return (
        spark.read.format("kafka")
        .options(**kafka.spark_options())
        .option("subscribe", TOPIC)
        .option("failOnDataLoss", "false")
        .load()
        .count()
    )
