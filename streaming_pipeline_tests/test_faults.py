"""Fault injection on the real embedded stack: schema evolution, bad bytes, late events, registry outage
(killed runs are in test_kill_fuzz.py). Every expectation is computed in the test from what the test produced."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from confluent_kafka.serialization import MessageField
from pyspark.sql import functions as F

from streaming_pipeline.defs.gold.ride_window_aggregates import RideWindowsConfig
from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
from streaming_pipeline.lakehouse.registry_client import RegistryClient
from streaming_pipeline.lakehouse.tables import RIDES
from streaming_pipeline_tests.kafka_helpers import (
    SCHEMA_DIR,
    all_coordinates,
    avro_frame,
    confluent_header,
    delta_log_versions,
    end_offsets,
    produce_raw,
    write_rides_csv,
)
from streaming_pipeline_tests.pipeline_assets import pipeline_asset

raw_rides = pipeline_asset(RIDES.bronze_table)
dead_letter_records = pipeline_asset("dead_letter_records")
vendor_counts = pipeline_asset("vendor_counts")
ride_window_aggregates = pipeline_asset("ride_window_aggregates")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "rides"
VALUE_SUBJECT = "rides-value"


# ----------------------------------------------------------------------------- helpers


def _produce(stack, *args: str) -> None:
    code = cli_main(
        [
            "produce",
            "rides",
            *args,
            "--no-progress",
            "--bootstrap-servers",
            stack.bootstrap_servers,
            "--schema-registry-url",
            stack.schema_registry_url,
        ]
    )
    assert code == 0, f"produce {args} exited with {code}"


def _materialize(assets, resources) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, resources=resources, raise_on_error=False)
    assert result.success, "\n".join(_failure_messages(result))
    return result


def _failure_messages(result: dg.ExecuteInProcessResult) -> list[str]:
    """Messages of every step failure and of the exceptions chained under it."""
    messages = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error is not None:
                messages.append(f"{error.cls_name}: {error.message}")
                error = error.cause
    return messages


def _coordinates(frame) -> list[tuple[str, int, int]]:
    return [
        (r.kafka_topic, r.kafka_partition, r.kafka_offset)
        for r in frame.select("kafka_topic", "kafka_partition", "kafka_offset").collect()
    ]


def _read(spark, resources, table: str):
    return spark.read.format("delta").load(resources["lakehouse"].table_path(table))


def _registry(stack) -> RegistryClient:
    return RegistryClient(stack.schema_registry_url)


# ----------------------------------------------------------------------------- 2. schema evolution


def test_v2_rides_after_v1_add_a_column_null_for_old_rows(stack, pipeline_resources, spark, rides_csv):
    _produce(stack, "--csv", str(rides_csv))
    old_offsets = end_offsets(stack.bootstrap_servers, TOPIC)
    old_coordinates = all_coordinates(TOPIC, old_offsets)
    assert len(old_coordinates) == 266
    _materialize([raw_rides, vendor_counts], pipeline_resources)
    assert _read(spark, pipeline_resources, "raw_rides").count() == 266

    registry = _registry(stack)
    v1_id, _ = registry.latest(VALUE_SUBJECT)
    v2_schema = (SCHEMA_DIR / "ride_value_v2.avsc").read_text()
    key_schema = (SCHEMA_DIR / "ride_key.avsc").read_text()
    v2_id = registry.register(VALUE_SUBJECT, v2_schema)
    assert v2_id != v1_id

    fees = [1.25, 0.0, 2.5, 17.75, 0.5]
    new_rides = [
        {**ride, "airport_fee": fee}
        for ride, fee in zip(synthetic_rides(len(fees), SyntheticOptions(seed=5)), fees, strict=True)
    ]
    messages = []
    for ride in new_rides:
        value = avro_frame(registry, v2_schema, ride, TOPIC)
        assert confluent_header(value) == (0, v2_id)
        messages.append((avro_frame(registry, key_schema, ride["vendor_id"], TOPIC, MessageField.KEY), value))
    placed = produce_raw(stack.bootstrap_servers, TOPIC, messages)
    expected_new = {(TOPIC, p, o): ride for (p, o), ride in zip(placed, new_rides, strict=True)}

    _materialize([raw_rides, vendor_counts], pipeline_resources)

    raw = _read(spark, pipeline_resources, "raw_rides")
    assert "airport_fee" in raw.columns
    rows = {
        (r.kafka_topic, r.kafka_partition, r.kafka_offset): r
        for r in raw.select(
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "airport_fee",
            "schema_id",
            "vendor_id",
            "total_amount",
            "trip_distance",
        ).collect()
    }
    assert len(rows) == raw.count() == 271
    assert set(rows) == old_coordinates | set(expected_new)
    for coordinate in old_coordinates:
        assert rows[coordinate].airport_fee is None, coordinate
        assert rows[coordinate].schema_id == v1_id, coordinate
    for coordinate, ride in expected_new.items():
        row = rows[coordinate]
        assert (row.airport_fee, row.schema_id) == (ride["airport_fee"], v2_id), coordinate
        assert (row.vendor_id, row.total_amount, row.trip_distance) == (
            ride["vendor_id"],
            ride["total_amount"],
            ride["trip_distance"],
        ), coordinate

    csv_vendors = pd.read_csv(rides_csv)["VendorID"].tolist()
    expected_counts = pd.Series(csv_vendors + [r["vendor_id"] for r in new_rides]).value_counts()
    got_counts = {r.vendor_id: r.trip_count for r in _read(spark, pipeline_resources, "vendor_counts").collect()}
    assert sum(got_counts.values()) == 271
    assert got_counts == {int(v): int(n) for v, n in expected_counts.items()}


# ----------------------------------------------------------------------------- 3. bad bytes


def test_undecodable_records_go_to_dead_letters_and_nothing_is_lost(materialized_lakehouse, spark):
    """The session's lakehouse (materialized_lakehouse.py): the sample, four ride records and one pickup no schema
    decodes, more rides in a second run. Every record is in raw_rides or, byte for byte, in the dead letters."""
    lakehouse = materialized_lakehouse
    offsets = lakehouse.end_offsets[TOPIC]
    raw = spark.read.format("delta").load(lakehouse.table_path("raw_rides"))
    raw_coordinates = _coordinates(raw)
    assert len(raw_coordinates) == len(set(raw_coordinates)) == len(lakehouse.rides) == 266 + 40
    dead = spark.read.format("delta").load(lakehouse.table_path("dead_letter_records")).collect()
    assert len(dead) == len(lakehouse.bad) == 5
    by_coordinate = {(r.kafka_topic, r.kafka_partition, r.kafka_offset): r for r in dead}
    assert set(by_coordinate) == {(bad.topic, bad.partition, bad.offset) for bad in lakehouse.bad}
    ride_letters = {c for c in by_coordinate if c[0] == TOPIC}
    assert set(raw_coordinates) | ride_letters == all_coordinates(TOPIC, offsets)
    assert len(raw_coordinates) + len(ride_letters) == sum(offsets.values())

    for bad in lakehouse.bad:
        row = by_coordinate[(bad.topic, bad.partition, bad.offset)]
        assert bytes(row.raw_value) == bad.value, bad.name
        assert (None if row.raw_key is None else bytes(row.raw_key)) == bad.key, bad.name
        assert bad.error in row.error, (bad.name, row.error)
        assert row.failed_at is not None, bad.name


# ----------------------------------------------------------------------------- 4. late events


def _hand_made_rides(start: datetime, count: int) -> list[dict]:
    rides = []
    for k in range(count):
        pickup = start + timedelta(minutes=4 * k, seconds=(37 * k) % 60)
        rides.append(_ride(pickup, vendor_id=1 if k % 3 == 0 else 2, total_amount=5.0 + 0.25 * k))
    return rides


def _ride(pickup: datetime, *, vendor_id: int, total_amount: float) -> dict:
    # Amounts are multiples of 1/4, so every sum is exact in binary floating point.
    return {
        "vendor_id": vendor_id,
        "pickup_datetime": pickup,
        "dropoff_datetime": pickup + timedelta(minutes=9),
        "passenger_count": 1,
        "trip_distance": 2.5,
        "rate_code_id": 1,
        "store_and_fwd_flag": "N",
        "pu_location_id": 161,
        "do_location_id": 236,
        "payment_type": 1,
        "fare_amount": total_amount - 1.0,
        "extra": 0.5,
        "mta_tax": 0.5,
        "tip_amount": 0.0,
        "tolls_amount": 0.0,
        "improvement_surcharge": 0.0,
        "total_amount": total_amount,
        "congestion_surcharge": 0.0,
    }


def _window_rows(spark, resources) -> dict[tuple[int, int], object]:
    frame = _read(spark, resources, "ride_window_aggregates").select(
        F.expr("unix_seconds(window_start)").alias("ws"),
        F.expr("unix_seconds(window_end)").alias("we"),
        "vendor_id",
        "trip_count",
        "late_trip_count",
        "total_amount_sum",
        "is_final",
    )
    rows = frame.collect()
    keyed = {(r.ws, r.vendor_id): r for r in rows}
    assert len(keyed) == len(rows), "duplicate (window_start, vendor_id) rows"
    return keyed


def _per_window(rides: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "ws": [int(r["pickup_datetime"].timestamp()) // 600 * 600 for r in rides],
            "vendor_id": [r["vendor_id"] for r in rides],
            "total_amount": [r["total_amount"] for r in rides],
        }
    )
    return frame.groupby(["ws", "vendor_id"]).agg(n=("total_amount", "size"), s=("total_amount", "sum"))


def test_late_ride_is_counted_not_dropped(stack, pipeline_resources, spark, tmp_path):
    config = RideWindowsConfig()  # the windows the run below uses
    assert (config.interval("window_duration"), config.interval("watermark_delay")) == ("600 seconds", "900 seconds")
    on_time = _hand_made_rides(datetime(2020, 7, 1, 8, 0, tzinfo=UTC), 60)  # 4 hours
    _produce(stack, "--csv", str(write_rides_csv(tmp_path / "on_time.csv", on_time)))
    _materialize([raw_rides, ride_window_aggregates], pipeline_resources)

    max_pickup = max(int(r["pickup_datetime"].timestamp()) for r in on_time)
    watermark = max_pickup - 15 * 60
    expected_on_time = _per_window(on_time)
    first = _window_rows(spark, pipeline_resources)
    assert set(first) == set(expected_on_time.index)
    for (ws, vendor), expected in expected_on_time.iterrows():
        row = first[(ws, vendor)]
        assert (row.trip_count, row.late_trip_count, row.total_amount_sum) == (expected.n, 0, expected.s)
        assert row.we == ws + 600
        assert row.is_final == (row.we <= watermark), (ws, vendor)

    # One ride 2 hours before the latest pickup: its window ended long before the watermark.
    late_pickup = datetime.fromtimestamp(max_pickup - 2 * 3600, tz=UTC)
    late = _ride(late_pickup, vendor_id=2, total_amount=99.5)
    late_key = (int(late_pickup.timestamp()) // 600 * 600, 2)
    assert late_key in first and first[late_key].is_final, "precondition: the late ride's window is final already"
    _produce(stack, "--csv", str(write_rides_csv(tmp_path / "late.csv", [late])))
    _materialize([raw_rides, ride_window_aggregates], pipeline_resources)

    everything = _per_window(on_time + [late])
    second = _window_rows(spark, pipeline_resources)
    assert set(second) == set(everything.index)
    for key, expected in everything.iterrows():
        row = second[key]
        assert row.trip_count + row.late_trip_count == expected.n, key
        assert row.is_final == (row.we <= watermark), key  # the late ride does not move the watermark
    # The window was final before the late ride arrived: the ride is counted as late, the on-time
    # figures of the window stay what they were when it became final.
    late_row = second[late_key]
    assert (late_row.trip_count, late_row.late_trip_count, late_row.total_amount_sum) == (
        first[late_key].trip_count,
        1,
        first[late_key].total_amount_sum,
    ), f"late ride absorbed into a final window: before {first[late_key]}, after {late_row}"
    for key in everything.index:
        row = second[key]
        assert row.late_trip_count == (1 if key == late_key else 0), key
        assert row.total_amount_sum == expected_on_time.loc[key].s, key


# ----------------------------------------------------------------------------- 5. registry down


def test_registry_down_fails_run_clearly_and_loses_nothing(stack, pipeline_resources, spark, rides_csv):
    from streaming_pipeline.devstack.embedded.processes import pid_alive, stop_pid
    from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess, registry_answers

    _produce(stack, "--csv", str(rides_csv))
    offsets = end_offsets(stack.bootstrap_servers, TOPIC)
    assert sum(offsets.values()) == 266

    stop_pid(stack.registry_pid, timeout=15)
    assert not pid_alive(stack.registry_pid) and not registry_answers(stack.schema_registry_url)

    failed = dg.materialize([raw_rides], resources=pipeline_resources, raise_on_error=False)
    assert not failed.success
    messages = _failure_messages(failed)
    assert len(messages) >= 2, f"the failed run reported no product error: {messages}"
    assert any(f"schema registry at {stack.schema_registry_url} did not answer" in m for m in messages), messages
    # The product's own error (the first one under Dagster's "Error occurred while executing op")
    # is what the run's failure shows first: it must say that the registry is down, checked at the end.
    product_error = messages[1]
    lakehouse = pipeline_resources["lakehouse"]
    for table in ("raw_rides", "dead_letter_records"):
        path = lakehouse.table_path(table)
        if delta_log_versions(path):
            assert spark.read.format("delta").load(path).count() == 0, f"{table} got rows while the registry was down"

    # The registry comes back on its port with its data (the schema the producer registered).
    port = int(stack.schema_registry_url.rsplit(":", 1)[1])
    with SchemaRegistryProcess(stack.directory / "registry", port, log_dir=stack.directory / "logs") as restarted:
        assert restarted.pid != stack.registry_pid
        assert registry_answers(stack.schema_registry_url)
        _materialize([raw_rides], pipeline_resources)
    coordinates = _coordinates(_read(spark, pipeline_resources, "raw_rides"))
    assert len(coordinates) == len(set(coordinates)) == 266
    assert set(coordinates) == all_coordinates(TOPIC, offsets)
    # On a local disk the engine writes no Hadoop checksum twins (spark_conf/local.conf): each commit is its JSON
    # and Delta's .crc.
    log = Path(lakehouse.table_path("raw_rides")) / "_delta_log"
    assert [f.name for f in log.iterdir() if f.name.startswith(".")] == []
    dead_path = lakehouse.table_path("dead_letter_records")
    if delta_log_versions(dead_path):
        assert spark.read.format("delta").load(dead_path).count() == 0

    assert "registry" in product_error.lower() and stack.schema_registry_url in product_error, (
        f"the run's error does not say the schema registry is down: {product_error!r}"
    )


# ----------------------------------------------------------------------------- the object store stopped mid-run


def test_object_store_stopped_mid_run_fails_naming_it_and_the_next_run_is_exact(
    stack, session_object_store, session_stack, spark, spark_test_conf, rides_csv, tmp_path
):
    """raw_rides on the session's object store, 50 records a micro-batch: the store is stopped once the first batch
    has committed. The run fails with an error naming the store; once it is started again (on its port, with its
    data), the next run leaves every record exactly once."""
    import threading
    import time
    import uuid

    from streaming_pipeline.devstack.embedded.processes import pid_alive, stop_pid
    from streaming_pipeline.devstack.embedded.stack import EmbeddedStack
    from streaming_pipeline.lakehouse.engine.delta_log import latest_version
    from streaming_pipeline.resources import LakehouseResource
    from streaming_pipeline_tests.conftest import pipeline_resources_for

    _produce(stack, "--csv", str(rides_csv))
    offsets = end_offsets(stack.bootstrap_servers, TOPIC)
    assert sum(offsets.values()) == 266
    lakehouse = f"{session_object_store.lakehouse_dir}/store-stopped-{uuid.uuid4().hex[:8]}"
    resources = pipeline_resources_for(stack, lakehouse, spark_test_conf)
    resources["lakehouse"] = LakehouseResource(root=lakehouse, max_offsets_per_trigger=50)
    table = f"{lakehouse}/raw_rides"
    store_pid = EmbeddedStack(session_stack.directory).info().object_store_pid
    assert pid_alive(store_pid)
    stopped = threading.Event()

    def stop_after_the_first_commit() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not stopped.is_set():
            if (latest_version(table) or -1) >= 1:  # version 0 creates the table, 1 is the first batch's
                stop_pid(store_pid, timeout=15)
                stopped.set()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=stop_after_the_first_commit, daemon=True)
    watcher.start()
    try:
        failed = dg.materialize([raw_rides], resources=resources, raise_on_error=False)
    finally:
        stopped.set()
        watcher.join(timeout=30)
        restarted = session_stack.up()  # the store again, on its port, with its data
    assert not pid_alive(store_pid) and restarted.object_store_pid != store_pid
    assert not failed.success, "the run went on with its object store stopped"
    messages = _failure_messages(failed)
    assert any(
        f"LAKEHOUSE_DIR={lakehouse}" in m and f"AWS_ENDPOINT_URL={session_object_store.object_store_url}" in m
        for m in messages
    ), messages
    assert session_object_store.object_store_env["AWS_SECRET_ACCESS_KEY"] not in "\n".join(messages)

    _materialize([raw_rides], resources)
    coordinates = _coordinates(spark.read.format("delta").load(table))
    assert len(coordinates) == len(set(coordinates)) == 266
    assert set(coordinates) == all_coordinates(TOPIC, offsets)
