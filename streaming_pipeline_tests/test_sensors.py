"""Offset sensors against a real broker, and the live path: sensor -> bronze run -> eager downstream."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from streaming_pipeline.assets import ALL_ASSETS
from streaming_pipeline.producer import produce, rows_from_records
from streaming_pipeline.resources import KafkaResource
from streaming_pipeline.sensors import build_offset_sensor, consumer_lag
from streaming_pipeline.settings import RIDES_TOPIC
from streaming_pipeline.synthetic import SyntheticOptions, synthetic_rides


def test_consumer_lag_counts_records_past_the_checkpoint_per_partition() -> None:
    assert consumer_lag({0: 10, 1: 5, 2: 0}, {0: 4, 1: 5}) == {0: 6, 1: 0, 2: 0}


def test_sensor_skips_with_reason_when_kafka_is_down(tmp_path) -> None:
    sensor = build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC)
    resources = {
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1", timeout_seconds=2),
        "lakehouse": _lakehouse(tmp_path),
    }
    result = sensor(dg.build_sensor_context(resources=resources))
    assert isinstance(result, dg.SkipReason)
    assert "Kafka is not reachable" in result.skip_message


def _lakehouse(tmp_path):
    from streaming_pipeline.resources import LakehouseResource

    return LakehouseResource(root=str(tmp_path / "lakehouse"))


def _produce_rides(resources, count: int, seed: int) -> None:
    result = produce(resources["kafka"], resources["schema_registry"], RIDES_TOPIC,
                     rows_from_records(synthetic_rides(count, SyntheticOptions(seed=seed))), show_progress=False)
    assert (result.sent, result.failed) == (count, 0)


@pytest.mark.integration
def test_sensor_waits_for_enough_records_then_requests_one_run_per_offset_snapshot(pipeline_resources) -> None:
    resources = {"kafka": pipeline_resources["kafka"], "lakehouse": pipeline_resources["lakehouse"]}
    sensor = build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC, min_new_records=10, max_wait_seconds=3600)

    empty = sensor(dg.build_sensor_context(resources=resources))
    assert empty.run_requests in (None, [])
    assert "no new records" in empty.skip_reason.skip_message

    _produce_rides(pipeline_resources, 4, seed=1)
    few = sensor(dg.build_sensor_context(resources=resources))
    assert not few.run_requests
    assert "4 new record(s)" in few.skip_reason.skip_message
    assert few.asset_events[0].metadata["consumer_lag"].value == 4

    _produce_rides(pipeline_resources, 6, seed=2)
    enough = sensor(dg.build_sensor_context(resources=resources, cursor=few.cursor))
    assert len(enough.run_requests) == 1
    end_offsets = pipeline_resources["kafka"].end_offsets(RIDES_TOPIC)
    assert sum(end_offsets.values()) == 10
    snapshot = ",".join(f"{p}:{o}" for p, o in sorted(end_offsets.items()))
    assert enough.run_requests[0].run_key == f"{RIDES_TOPIC}@{snapshot}"
    assert enough.run_requests[0].asset_selection == [dg.AssetKey("raw_rides")]

    again = sensor(dg.build_sensor_context(resources=resources, cursor=enough.cursor))
    assert not again.run_requests
    assert "already requested" in again.skip_reason.skip_message


@pytest.mark.integration
def test_sensor_requests_a_run_when_the_oldest_waiting_record_is_older_than_max_wait(pipeline_resources) -> None:
    from confluent_kafka import Producer

    kafka = pipeline_resources["kafka"]
    resources = {"kafka": kafka, "lakehouse": pipeline_resources["lakehouse"]}
    kafka.ensure_topic(RIDES_TOPIC)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(RIDES_TOPIC, value=b"fresh", partition=0, timestamp=int(time.time() * 1000))
    producer.flush(10)
    patient = build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC, min_new_records=1000, max_wait_seconds=60)
    fresh = patient(dg.build_sensor_context(resources=resources))
    assert not fresh.run_requests
    assert "waiting for 1000" in fresh.skip_reason.skip_message

    producer.produce(RIDES_TOPIC, value=b"old", partition=1, timestamp=int((time.time() - 120) * 1000))
    producer.flush(10)
    stale = patient(dg.build_sensor_context(resources=resources, cursor=fresh.cursor))
    assert len(stale.run_requests) == 1


@pytest.mark.integration
def test_produced_rides_reach_raw_rides_and_vendor_counts_without_manual_materialization(pipeline_resources, spark) -> None:
    """The live path through Dagster's own APIs: sensor tick -> its run -> automation conditions -> their runs."""
    sensor = build_offset_sensor(dg.AssetKey("raw_rides"), RIDES_TOPIC, min_new_records=1)
    defs = dg.Definitions(assets=ALL_ASSETS, sensors=[sensor], resources=pipeline_resources, executor=dg.in_process_executor)
    instance = dg.DagsterInstance.ephemeral()
    _produce_rides(pipeline_resources, 25, seed=4)
    # The automation sensor ticks all the time; its first tick only records the state (nothing new yet).
    baseline = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    assert baseline.total_requested == 0

    tick = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": pipeline_resources["kafka"], "lakehouse": pipeline_resources["lakehouse"]}))
    assert len(tick.run_requests) == 1
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=tick.run_requests[0].asset_selection).success

    automation = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=baseline.cursor)
    requested = {key for key in (dg.AssetKey(n) for n in ("vendor_counts", "ride_window_aggregates", "ride_pickup_joins", "dead_letter_records"))
                 if automation.get_num_requested(key) > 0}
    assert dg.AssetKey("vendor_counts") in requested
    assert dg.AssetKey("ride_window_aggregates") in requested
    assert job.execute_in_process(instance=instance, asset_selection=sorted(requested, key=str)).success

    lakehouse = pipeline_resources["lakehouse"]
    raw = spark.read.format("delta").load(lakehouse.table_path("raw_rides"))
    counts = spark.read.format("delta").load(lakehouse.table_path("vendor_counts")).toPandas()
    expected = {}
    for ride in synthetic_rides(25, SyntheticOptions(seed=4)):
        expected[ride["vendor_id"]] = expected.get(ride["vendor_id"], 0) + 1
    assert raw.count() == 25
    assert dict(zip(counts["vendor_id"], counts["trip_count"])) == expected
