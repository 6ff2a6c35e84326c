"""Exactly once in the hard cases, on the real embedded broker and registry with an in-process Spark:
a checkpoint reset, a table deleted, a topic recreated, retention past unread records, a lakehouse given as a
file:// URI, an emptied registry. Expectations come from what each test produced to Kafka."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.replay import ReplayStart, replay
from streaming_pipeline.lakehouse.bronze.ingestion import ingest_topic
from streaming_pipeline.lakehouse.bronze.offsets import (
    BronzeStateError,
    checkpoint_kafka_offsets,
    consumed_offsets,
    table_start_offsets,
    topic_problems,
)
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.lakehouse.tables import RIDES, RIDES_TOPIC
from streaming_pipeline_tests.cli_helpers import produce_with_cli
from streaming_pipeline_tests.kafka_helpers import all_coordinates, delete_topics, end_offsets
from streaming_pipeline_tests.project_tables import default_high_amount_threshold

pytestmark = pytest.mark.integration


def _produce(stack, count: int, seed: int) -> None:
    code = cli_main(
        [
            "produce",
            "rides",
            "--synthetic",
            str(count),
            "--seed",
            str(seed),
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
        ]
    )
    assert code == 0


def _ingest(spark, resources):
    return ingest_topic(
        spark,
        resources["kafka"],
        resources["schema_registry"],
        resources["lakehouse"],
        source=RIDES,
    )


PIPELINE = pipeline_definitions()


def _coordinates(spark, path: str) -> list[tuple[str, int, int]]:
    rows = spark.read.format("delta").load(path).select("kafka_topic", "kafka_partition", "kafka_offset").collect()
    return [(r[0], r[1], r[2]) for r in rows]


def _defs(resources) -> dg.Definitions:
    return dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=resources, executor=dg.in_process_executor)
    )


def _vendor_total(spark, resources) -> int:
    path = resources["lakehouse"].table_path("vendor_counts")
    return sum(r["trip_count"] for r in spark.read.format("delta").load(path).collect())


def _rides_handler(stack, lakehouse, tmp_path: Path):
    """The raw_rides foreachBatch handler, called directly (one worker, one registry client), with no checkpoint."""
    from streaming_pipeline.lakehouse.bronze.batches import BronzeBatchWriter
    from streaming_pipeline.lakehouse.schemas import load_schema

    return BronzeBatchWriter(
        registry_url=stack.schema_registry_url,
        registry_auth=None,
        subject="rides-value",
        fallback_reader_schema=load_schema("ride_value.avsc"),
        table_path=lakehouse.table_path("raw_rides"),
        dead_letter_path=lakehouse.table_path("dead_letter_records"),
        asset_name="raw_rides",
        checkpoint_dir=str(tmp_path / "no-checkpoint"),
    )


def _crash_before_writing(path: str, handler, batch, monkeypatch) -> None:
    """Batch 0 given to the bronze handler, whose process dies as it is about to append to the table at `path`."""
    import streaming_pipeline.lakehouse.bronze.batches as batches

    real_append_once = batches.append_once

    def crash_before(frame, to, *args, **kwargs):
        if to == path:
            raise RuntimeError("the engine died")
        return real_append_once(frame, to, *args, **kwargs)

    monkeypatch.setattr(batches, "append_once", crash_before)
    with pytest.raises(RuntimeError, match="the engine died"):
        handler(batch, 0)
    monkeypatch.setattr(batches, "append_once", real_append_once)


@pytest.mark.slow
def test_checkpoint_reset_stops_the_run_and_replay_rebuilds_everything_exactly_once(stack, pipeline_resources, spark):
    lakehouse = pipeline_resources["lakehouse"]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    produce_with_cli(stack, "zones", "--csv")  # the zones rides_enriched joins, from their table topic
    _produce(stack, 40, seed=1)
    defs = _defs(pipeline_resources)
    assert dg.materialize(PIPELINE.assets, resources=pipeline_resources).success  # every table
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    assert sum(ends.values()) == 40 == _vendor_total(spark, pipeline_resources)
    # What the table consumed is in its Delta log, and agrees with the checkpoint.
    assert (
        consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC)
        == ends
        == checkpoint_kafka_offsets(checkpoint)[RIDES_TOPIC]
    )

    shutil.rmtree(checkpoint)
    _produce(stack, 5, seed=2)
    with pytest.raises(BronzeStateError) as caught:
        _ingest(spark, pipeline_resources)
    message = str(caught.value)
    assert "checkpoint is gone or empty" in message
    assert table in message and checkpoint in message
    assert "streaming-pipeline replay raw_rides --from earliest" in message
    assert len(_coordinates(spark, table)) == 40, "the refused run changed the table"

    report = replay(
        "raw_rides",
        ReplayStart(),
        defs=defs,
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _m: None,
    )
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    coordinates = _coordinates(spark, table)
    assert len(coordinates) == len(set(coordinates)) == 45
    assert set(coordinates) == all_coordinates(RIDES_TOPIC, ends)
    assert (report.rows_before, report.rows_after) == (40, 45)
    assert report.starting_offsets == {p: 0 for p in ends}
    assert set(report.reset_tables) == {
        "vendor_counts",
        "ride_window_aggregates",
        "ride_pickup_joins",
        "high_amount_rides",
        "low_amount_rides",
        "rides_enriched",
        "join_late_rows",
    }
    # Downstream was rebuilt from the new table, not added to the old counts.
    assert _vendor_total(spark, pipeline_resources) == 45
    enriched = spark.read.format("delta").load(lakehouse.table_path("rides_enriched")).count()
    assert enriched == 45
    # The branches were rebuilt too: their writers' idempotency ids belong to the new checkpoint, so the new
    # query's batch 0, 1, ... are not mistaken for batches the old query already wrote.
    amounts = [r["total_amount"] for r in spark.read.format("delta").load(table).select("total_amount").collect()]
    threshold = default_high_amount_threshold()  # the default the run used
    for branch, expected in (
        ("high_amount_rides", sum(1 for a in amounts if a is not None and a >= threshold)),
        ("low_amount_rides", sum(1 for a in amounts if a is not None and a < threshold)),
    ):
        assert spark.read.format("delta").load(lakehouse.table_path(branch)).count() == expected, branch
    # The old content stays readable through time travel.
    old = spark.read.format("delta").option("versionAsOf", report.version_before).load(table).count()
    assert old == 40
    # The replaced checkpoint was moved aside, not deleted; the new one is consistent: a re-run adds nothing.
    assert any("_replaced" in target for target in report.moved_checkpoints.values())
    _ingest(spark, pipeline_resources)
    assert len(_coordinates(spark, table)) == 45


def test_table_deleted_while_its_checkpoint_is_kept_stops_the_run(stack, pipeline_resources, spark):
    lakehouse = pipeline_resources["lakehouse"]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    _produce(stack, 20, seed=3)
    _ingest(spark, pipeline_resources)
    shutil.rmtree(table)
    with pytest.raises(BronzeStateError) as caught:
        _ingest(spark, pipeline_resources)
    message = str(caught.value)
    assert "the table does not exist" in message and "deleted or recreated" in message
    assert table in message and checkpoint in message and "streaming-pipeline replay raw_rides" in message


@pytest.mark.slow
def test_recreated_topic_is_reported_by_run_and_sensor_and_replay_reads_the_new_topic(stack, pipeline_resources, spark):
    lakehouse = pipeline_resources["lakehouse"]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    _produce(stack, 30, seed=4)
    _ingest(spark, pipeline_resources)
    delete_topics(stack.bootstrap_servers, [RIDES_TOPIC])
    _produce(stack, 6, seed=5)  # recreates the topic: offsets start at 0 again
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    consumed = consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC)
    problems = topic_problems(
        "raw_rides", RIDES_TOPIC, consumed, pipeline_resources["kafka"].watermark_offsets(RIDES_TOPIC)
    )
    expected_backwards = {p: (c, ends.get(p, 0)) for p, c in consumed.items() if c > ends.get(p, 0)}
    assert problems.went_backwards == expected_backwards and expected_backwards
    with pytest.raises(BronzeStateError) as caught:
        _ingest(spark, pipeline_resources)
    assert "offsets went backwards" in str(caught.value) and "streaming-pipeline replay raw_rides" in str(caught.value)

    # The sensor says the same instead of "no new records", and requests no run that would fail.
    from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor
    from streaming_pipeline_tests.pipeline_assets import pipeline_live_job

    key = dg.AssetKey("raw_rides")
    sensor = build_offset_sensor(
        key, RIDES_TOPIC, pipeline_live_job("raw_rides"), SensorSettings(), [RIDES.bronze_table]
    )
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance,
            resources={"kafka": pipeline_resources["kafka"], "lakehouse": lakehouse},
            definitions=_defs(pipeline_resources),
        )
        result = sensor(context)
    skip = result.skip_reason.skip_message if isinstance(result, dg.SensorResult) else result.skip_message
    assert "offsets went backwards" in skip and not (isinstance(result, dg.SensorResult) and result.run_requests)

    report = replay(
        "raw_rides",
        ReplayStart(),
        defs=_defs(pipeline_resources),
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _m: None,
    )
    coordinates = _coordinates(spark, table)
    assert len(coordinates) == len(set(coordinates)) == 6
    assert set(coordinates) == all_coordinates(RIDES_TOPIC, ends)
    assert (report.rows_before, report.rows_after) == (30, 6)
    assert _vendor_total(spark, pipeline_resources) == 6


@pytest.mark.slow
def test_records_deleted_unread_stop_the_run_and_replay_from_offsets_starts_where_asked(
    stack, pipeline_resources, spark
):
    lakehouse = pipeline_resources["lakehouse"]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    _produce(stack, 20, seed=6)
    _ingest(spark, pipeline_resources)
    _produce(stack, 20, seed=7)
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    consumed = consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC)
    # Retention deletes records of partition 0 up to two past what the table has read.
    cut = consumed[0] + 2
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(RIDES_TOPIC, 0, cut)])
    for future in futures.values():
        future.result(timeout=30)
    with pytest.raises(BronzeStateError) as caught:
        _ingest(spark, pipeline_resources)
    message = str(caught.value)
    assert f"[0] offsets {consumed[0]}..{cut - 1} (2 record(s))" in message
    assert "deleted (retention)" in message and "streaming-pipeline replay raw_rides" in message

    # A replay of the kept records from explicit offsets: partition 0 from the cut, partition 1 from 3.
    start = ReplayStart.parse(from_offsets=f"0:{cut},1:3")
    replay(
        "raw_rides",
        start,
        defs=_defs(pipeline_resources),
        sources=project_sources(),
        instance=dg.DagsterInstance.ephemeral(),
        progress=lambda _m: None,
    )
    expected = {(RIDES_TOPIC, 0, o) for o in range(cut, ends[0])} | {(RIDES_TOPIC, 1, o) for o in range(3, ends[1])}
    coordinates = _coordinates(spark, table)
    assert len(coordinates) == len(set(coordinates)) and set(coordinates) == expected
    assert table_start_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == {0: cut, 1: 3}
    # The reconcile check counts from where the replay started.
    result = dg.materialize(
        [*PIPELINE.assets, *PIPELINE.asset_checks],
        resources=pipeline_resources,
        selection="raw_rides",
        raise_on_error=False,
    )
    checks = {e.asset_check_key.name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["reconciles_with_kafka_offsets"] is True and checks["unique_kafka_coordinates"] is True


def test_lakehouse_as_file_uri_keeps_consumed_offsets_readable(stack, pipeline_resources, spark, tmp_path: Path):
    from streaming_pipeline.resources import LakehouseResource

    lakehouse = LakehouseResource(root=(tmp_path / "uri-lakehouse").as_uri())
    assert lakehouse.root.startswith("file:///")
    resources = {**pipeline_resources, "lakehouse": lakehouse}
    _produce(stack, 12, seed=8)
    _ingest(spark, resources)
    _produce(stack, 7, seed=9)
    _ingest(spark, resources)
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    assert consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == ends
    assert checkpoint_kafka_offsets(checkpoint)[RIDES_TOPIC] == ends
    coordinates = _coordinates(spark, table)
    assert len(coordinates) == len(set(coordinates)) == 19


def test_emptied_registry_stops_the_stream_instead_of_dead_lettering_everything(stack, pipeline_resources, spark):
    from streaming_pipeline.lakehouse.errors import StreamingRunError

    lakehouse = pipeline_resources["lakehouse"]
    _produce(stack, 10, seed=10)
    url = stack.schema_registry_url
    schema = httpx.get(f"{url}/subjects/rides-value/versions/latest").json()["schema"]
    for permanent in ("false", "true"):
        assert httpx.delete(f"{url}/subjects/rides-value", params={"permanent": permanent}).status_code == 200
    with pytest.raises(StreamingRunError) as caught:
        _ingest(spark, pipeline_resources)
    assert "has no versions of subject 'rides-value'" in str(caught.value)
    assert checkpoint_kafka_offsets(lakehouse.checkpoint_path("raw_rides")) == {}, "the checkpoint moved on"
    for name in ("raw_rides", "dead_letter_records"):
        path = lakehouse.table_path(name)
        if Path(path, "_delta_log").is_dir():
            assert spark.read.format("delta").load(path).count() == 0, f"{name} got rows"

    # With the schema registered again, the batch is read again: every record lands once, as a row or (if the
    # registry gave the schema a new id) as a dead letter.
    assert httpx.post(f"{url}/subjects/rides-value/versions", json={"schema": schema}).status_code == 200
    _ingest(spark, pipeline_resources)
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    rows = _coordinates(spark, lakehouse.table_path("raw_rides"))
    dead_letters = lakehouse.table_path("dead_letter_records")  # created by the first batch that has any
    dead = spark.read.format("delta").load(dead_letters).count() if Path(dead_letters, "_delta_log").is_dir() else 0
    assert len(rows) + dead == sum(ends.values()) == 10


def test_reader_schema_registered_between_micro_batches_is_used_by_the_next_one(
    stack, pipeline_resources, spark, tmp_path
):
    """One handler (one worker, one registry client) across two micro-batches: v2, registered after the first,
    reads the second with its own field."""
    from confluent_kafka.serialization import MessageField

    from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
    from streaming_pipeline.lakehouse.registry_client import RegistryClient
    from streaming_pipeline_tests.kafka_helpers import SCHEMA_DIR, avro_frame, produce_raw

    lakehouse = pipeline_resources["lakehouse"]
    _produce(stack, 4, seed=11)
    v1_end = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    handler = _rides_handler(stack, lakehouse, tmp_path)

    def kafka_batch(start: dict[int, int], end: dict[int, int]):
        import json

        return (
            spark.read.format("kafka")
            .options(**pipeline_resources["kafka"].spark_options())
            .option("subscribe", RIDES_TOPIC)
            .option("startingOffsets", json.dumps({RIDES_TOPIC: {str(p): o for p, o in start.items()}}))
            .option("endingOffsets", json.dumps({RIDES_TOPIC: {str(p): o for p, o in end.items()}}))
            .load()
        )

    handler(kafka_batch({p: 0 for p in v1_end}, v1_end), 0)

    registry = RegistryClient(stack.schema_registry_url)
    v1_id, _ = registry.latest("rides-value")
    v2_schema = (SCHEMA_DIR / "ride_value_v2.avsc").read_text()
    v2_id = registry.register("rides-value", v2_schema)
    assert v2_id != v1_id
    key_schema = (SCHEMA_DIR / "ride_key.avsc").read_text()
    fees = [3.25, 0.75, 1.5]
    rides = [
        {**r, "airport_fee": f}
        for r, f in zip(synthetic_rides(len(fees), SyntheticOptions(seed=12)), fees, strict=True)
    ]
    placed = produce_raw(
        stack.bootstrap_servers,
        RIDES_TOPIC,
        [
            (
                avro_frame(registry, key_schema, r["vendor_id"], RIDES_TOPIC, MessageField.KEY),
                avro_frame(registry, v2_schema, r, RIDES_TOPIC),
            )
            for r in rides
        ],
    )
    handler(kafka_batch(v1_end, end_offsets(stack.bootstrap_servers, RIDES_TOPIC)), 1)

    table = spark.read.format("delta").load(lakehouse.table_path("raw_rides"))
    rows = {
        (r.kafka_partition, r.kafka_offset): (r.airport_fee, r.schema_id)
        for r in table.select("kafka_partition", "kafka_offset", "airport_fee", "schema_id").collect()
    }
    assert len(rows) == 4 + 3
    for (partition, offset), ride in zip(placed, rides, strict=True):
        assert rows[(partition, offset)] == (ride["airport_fee"], v2_id)
    # The v1 rows: no fee, and the id of the schema they were written with.
    assert [row for (p, o), row in rows.items() if (p, o) not in set(placed)] == [(None, v1_id)] * 4


def test_a_batch_replayed_after_a_crash_gets_its_dead_letters_from_the_schemas_its_rows_were_decoded_with(
    stack, pipeline_resources, spark, tmp_path, monkeypatch
):
    """Batch 0 holds 3 v1 rides and 2 rides written with v2 while v2 was registered under another subject only:
    their schema id is no version of rides-value, so they are dead letters. The run crashes after the rows'
    commit, before the dead letters' (the Delta append of the dead letters raises). Then v2 is registered under
    rides-value too (the same id) and the batch is replayed: its dead letters are still the 2 v2 rides. Decoded
    with today's registry, they would be good rides, which the replay does not write (the batch's rows are in),
    so they would be nowhere."""
    import json

    from confluent_kafka.serialization import MessageField

    from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
    from streaming_pipeline.lakehouse.registry_client import RegistryClient
    from streaming_pipeline_tests.kafka_helpers import SCHEMA_DIR, avro_frame, produce_raw

    lakehouse = pipeline_resources["lakehouse"]
    _produce(stack, 3, seed=21)
    registry = RegistryClient(stack.schema_registry_url)
    v2_schema = (SCHEMA_DIR / "ride_value_v2.avsc").read_text()
    v2_id = registry.register("elsewhere-value", v2_schema)
    key_schema = (SCHEMA_DIR / "ride_key.avsc").read_text()
    v2_rides = [{**r, "airport_fee": 1.25} for r in synthetic_rides(2, SyntheticOptions(seed=22))]
    placed = produce_raw(
        stack.bootstrap_servers,
        RIDES_TOPIC,
        [
            (
                avro_frame(registry, key_schema, r["vendor_id"], RIDES_TOPIC, MessageField.KEY),
                avro_frame(registry, v2_schema, r, "elsewhere"),
            )
            for r in v2_rides
        ],
    )
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    batch = (
        spark.read.format("kafka")
        .options(**pipeline_resources["kafka"].spark_options())
        .option("subscribe", RIDES_TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", json.dumps({RIDES_TOPIC: {str(p): o for p, o in ends.items()}}))
        .load()
    )
    handler = _rides_handler(stack, lakehouse, tmp_path)

    _crash_before_writing(lakehouse.table_path("dead_letter_records"), handler, batch, monkeypatch)
    assert registry.register("rides-value", v2_schema) == v2_id  # today, v2's id is a version of rides-value

    handler(batch, 0)  # the replay of batch 0

    good = {
        (r.kafka_partition, r.kafka_offset)
        for r in spark.read.format("delta")
        .load(lakehouse.table_path("raw_rides"))
        .select("kafka_partition", "kafka_offset")
        .collect()
    }
    dead = [
        (r.kafka_partition, r.kafka_offset)
        for r in spark.read.format("delta")
        .load(lakehouse.table_path("dead_letter_records"))
        .select("kafka_partition", "kafka_offset")
        .collect()
    ]
    assert sorted(dead) == sorted(placed)
    assert len(good) == 3 and not good & set(dead)
    assert good | set(dead) == {(p, o) for _, p, o in all_coordinates(RIDES_TOPIC, ends)}


def test_a_batch_of_good_records_is_read_once_and_leaves_the_dead_letter_table_alone(stack, pipeline_resources, spark):
    """The handler knows its own commit by its marker as the Delta log holds it (JSON: partition keys are strings),
    so a batch whose records all decode is not decoded a second time for dead letters, which would read the Kafka
    batch twice (Spark counts 2 input rows per record) and commit an empty append to the dead-letter table."""
    lakehouse = pipeline_resources["lakehouse"]
    _produce(stack, 7, seed=31)
    first = _ingest(spark, pipeline_resources)
    _produce(stack, 4, seed=32)
    second = _ingest(spark, pipeline_resources)
    assert (first.report.input_rows, first.rows_written, first.dead_letters) == (7, 7, 0)
    assert (second.report.input_rows, second.rows_written, second.dead_letters) == (4, 4, 0)
    dead_letters = lakehouse.table_path("dead_letter_records")
    assert not Path(dead_letters, "_delta_log").exists(), "a batch without dead letters committed to their table"


def test_a_source_s_rules_warn_drop_to_its_quarantine_and_fail_each_micro_batch_once(
    stack, pipeline_resources, spark, tmp_path, monkeypatch
):
    """A source's expectations in its bronze handler: batch 0 has rides breaking a warn rule, a drop rule, two drop
    rules at once, and a warn and a drop rule; the run crashes between the table's append and the quarantine's,
    and the rerun of the batch leaves each ride in one of the two tables, once, and the counts in the table's
    commit once. Batch 1 breaks the fail rule: an error naming table, rule and value, and nothing of it written."""
    import json
    from datetime import timedelta

    from confluent_kafka.serialization import MessageField

    from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
    from streaming_pipeline.lakehouse.bronze.ingestion import batch_writer
    from streaming_pipeline.lakehouse.engine.delta_log import commits, latest_version
    from streaming_pipeline.lakehouse.errors import ExpectationError
    from streaming_pipeline.lakehouse.expectations import Expectation, counts_of_observed
    from streaming_pipeline.lakehouse.registry_client import RegistryClient
    from streaming_pipeline.lakehouse.sources import SourceTopic
    from streaming_pipeline_tests.kafka_helpers import SCHEMA_DIR, avro_frame, produce_raw

    rules = (
        Expectation("dropoff_after_pickup", "dropoff_datetime > pickup_datetime", "warn"),
        Expectation("amount_not_negative", "total_amount >= 0", "drop"),
        Expectation("distance_not_negative", "trip_distance >= 0", "drop"),
        Expectation("known_vendor", "vendor_id IN (1, 2)", "fail"),
    )
    source = SourceTopic.declared(topic="checked_rides", value_schema="ride_value.avsc", expectations=rules)
    lakehouse = pipeline_resources["lakehouse"]
    handler = batch_writer(pipeline_resources["schema_registry"], lakehouse, source)
    handler.checkpoint_dir = str(tmp_path / "no-checkpoint")
    table, quarantine = lakehouse.table_path("raw_checked_rides"), lakehouse.table_path("raw_checked_rides_quarantine")
    assert source.quarantine is not None and handler.quarantine_path == quarantine

    registry = RegistryClient(stack.schema_registry_url)
    schema = (SCHEMA_DIR / "ride_value.avsc").read_text()
    registry.register("checked_rides-value", schema)
    rides = list(synthetic_rides(12, SyntheticOptions(seed=41)))
    swapped = {"pickup_datetime": rides[1]["dropoff_datetime"], "dropoff_datetime": rides[1]["pickup_datetime"]}
    rides[1] = {**rides[1], **swapped}  # warn only
    rides[0] = {**rides[0], "total_amount": -5.0}  # one drop rule
    rides[2] = {**rides[2], "total_amount": -1.0, "trip_distance": -0.5}  # two drop rules
    late = rides[3]["pickup_datetime"] - timedelta(minutes=1)
    rides[3] = {**rides[3], "dropoff_datetime": late, "trip_distance": -2.0}  # a warn and a drop rule

    def broken(ride: dict) -> list[str]:
        holds = {
            "dropoff_after_pickup": ride["dropoff_datetime"] > ride["pickup_datetime"],
            "amount_not_negative": ride["total_amount"] >= 0,
            "distance_not_negative": ride["trip_distance"] >= 0,
            "known_vendor": ride["vendor_id"] in (1, 2),
        }
        return [name for name, ok in holds.items() if not ok]

    def send(batch_rides: list[dict], after: dict[int, int] | None = None) -> tuple[list[tuple[int, int]], object]:
        placed = produce_raw(
            stack.bootstrap_servers,
            "checked_rides",
            [(None, avro_frame(registry, schema, r, "checked_rides", MessageField.VALUE)) for r in batch_rides],
            partition=0,
        )
        ends = end_offsets(stack.bootstrap_servers, "checked_rides")
        start = after or {p: 0 for p in ends}
        frame = (
            spark.read.format("kafka")
            .options(**pipeline_resources["kafka"].spark_options())
            .option("subscribe", "checked_rides")
            .option("startingOffsets", json.dumps({"checked_rides": {str(p): o for p, o in start.items()}}))
            .option("endingOffsets", json.dumps({"checked_rides": {str(p): o for p, o in ends.items()}}))
            .load()
        )
        return placed, frame

    placed, batch = send(rides)
    _crash_before_writing(quarantine, handler, batch, monkeypatch)
    assert latest_version(table) == 0 and latest_version(quarantine) is None  # the crash came between the two
    handler(batch, 0)  # the rerun of batch 0

    dropping = {"amount_not_negative", "distance_not_negative"}
    offset_of = {i: offset for i, (_, offset) in enumerate(placed)}
    kept = sorted(offset_of[i] for i, r in enumerate(rides) if not dropping & set(broken(r)))
    set_aside = {offset_of[i]: broken(r) for i, r in enumerate(rides) if dropping & set(broken(r))}
    assert sorted(r.kafka_offset for r in spark.read.format("delta").load(table).collect()) == kept
    rows = spark.read.format("delta").load(quarantine).collect()
    assert {r.kafka_offset: list(r._rules_broken) for r in rows} == set_aside and len(rows) == len(set_aside) == 3
    assert {r._batch_id for r in rows} == {0}
    counted = counts_of_observed([(c.user_metadata or {}).get("expectations") for c in commits(table) or []], rules)
    assert counted.rows == 12 and counted.dropped == 3
    assert counted.violations == {rule.name: sum(rule.name in broken(r) for r in rides) for rule in rules}
    assert counted.violations["dropoff_after_pickup"] == 2

    versions = latest_version(table), latest_version(quarantine)
    more = [dict(r) for r in synthetic_rides(3, SyntheticOptions(seed=42))]
    more[1]["vendor_id"] = 7
    _, batch = send(more, end_offsets(stack.bootstrap_servers, "checked_rides"))
    for _attempt in range(2):  # the next run reads the same records, and fails the same way
        with pytest.raises(ExpectationError) as failed:
            handler(batch, 1)
        message = str(failed.value)
        assert "raw_checked_rides: micro-batch 1" in message and "'known_vendor' (vendor_id IN (1, 2))" in message
        assert '{"vendor_id":7}' in message
        assert (latest_version(table), latest_version(quarantine)) == versions
