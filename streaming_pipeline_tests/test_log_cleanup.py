"""After Delta's log cleanup: a table gets a checkpoint and loses the commit files it covers (what cleanup does once
they are 30 days old), so that none of the commit info its readers once relied on is left. The sensor, a new run,
its run-start checks, the asset checks, the incremental window reconcile and replay (from the earliest offsets, a
time and explicit offsets) all still give exact answers. Expectations come from what each test produced to Kafka."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.components.expectation_checks import source_check_keys
from streaming_pipeline.components.kafka_delta_source.sensors import build_offset_sensor, live_job
from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.cli import main as cli_main
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.replay import ReplayStart, empty_table, replay
from streaming_pipeline.lakehouse.bronze.ingestion import ingest_topic
from streaming_pipeline.lakehouse.bronze.offsets import (
    BronzeStateError,
    consumed_offsets,
    replay_app_id,
    table_start_offsets,
)
from streaming_pipeline.lakehouse.engine.delta_log import commits
from streaming_pipeline.lakehouse.settings import SensorSettings
from streaming_pipeline.lakehouse.tables import DEAD_LETTER_RECORDS, KAFKA_COLUMNS, RIDES, RIDES_TOPIC, ddl
from streaming_pipeline.resources import LakehouseResource
from streaming_pipeline_tests.conftest import pipeline_resources_for
from streaming_pipeline_tests.delta_helpers import checkpoint_and_clean
from streaming_pipeline_tests.kafka_helpers import all_coordinates, end_offsets
from streaming_pipeline_tests.materialized_lakehouse import table_versions
from streaming_pipeline_tests.pipeline_assets import pipeline_live_job

pytestmark = pytest.mark.integration

PIPELINE = pipeline_definitions()


def _produce(stack, count: int, seed: int) -> None:
    args = ["produce", "rides", "--synthetic", str(count), "--seed", str(seed), "--no-progress"]
    args += ["--bootstrap-servers", stack.bootstrap_servers, "--schema-registry-url", stack.schema_registry_url]
    assert cli_main(args) == 0


def _defs(resources) -> dg.Definitions:
    return dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=resources, executor=dg.in_process_executor)
    )


def _bronze_rides_defs(resources) -> dg.Definitions:
    """raw_rides, its topic's dead letters and its live job (which then selects raw_rides alone), with `resources`."""
    bronze = {dg.AssetKey("raw_rides"), dg.AssetKey(DEAD_LETTER_RECORDS.name)}
    return dg.Definitions(
        assets=[a for a in PIPELINE.assets if isinstance(a, dg.AssetsDefinition) and set(a.keys) <= bronze],
        jobs=[live_job(dg.AssetKey("raw_rides"), source_check_keys(RIDES))],
        resources=resources,
        executor=dg.in_process_executor,
    )


def _coordinates(spark, path: str) -> list[tuple[str, int, int]]:
    rows = spark.read.format("delta").load(path).select("kafka_topic", "kafka_partition", "kafka_offset").collect()
    return [(r[0], r[1], r[2]) for r in rows]


def _clean_every_table(spark, lakehouse_dir: Path | str) -> None:
    """A checkpoint and log cleanup on every table (none is read by a stream that will restart)."""
    for table in table_versions(lakehouse_dir):
        checkpoint_and_clean(spark, f"{lakehouse_dir}/{table}")
    markers = [c.user_metadata for c in commits(f"{lakehouse_dir}/raw_rides") or []]
    assert not any(m and "batch_id" in m for m in markers), "a bronze commit's info survived the cleanup"


@pytest.fixture()
def small_batches(pipeline_resources, lakehouse_dir: Path) -> dict[str, object]:
    """The pipeline's resources with micro-batches of at most 8 records, so that a run makes several commits."""
    return {**pipeline_resources, "lakehouse": LakehouseResource(root=str(lakehouse_dir), max_offsets_per_trigger=8)}


@pytest.mark.slow
def test_sensor_bronze_run_and_checks_go_on_exactly_after_log_cleanup(stack, small_batches, spark, lakehouse_dir):
    """The measured case: six bronze commits, an OPTIMIZE, a checkpoint, the covered commits deleted, more rides."""
    lakehouse: LakehouseResource = small_batches["lakehouse"]  # type: ignore[assignment]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    _produce(stack, 45, seed=21)
    bronze = {"resources": small_batches, "selection": "raw_rides"}
    assert dg.materialize([*PIPELINE.assets, *PIPELINE.asset_checks], **bronze).success
    first = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    spark.sql(f"OPTIMIZE delta.`{table}`")
    _clean_every_table(spark, lakehouse_dir)
    assert consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == first
    assert table_start_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == dict.fromkeys(first, 0)

    # The sensor sees exactly the 7 new records and requests a run.
    _produce(stack, 7, seed=22)
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    key = dg.AssetKey("raw_rides")
    job = pipeline_live_job(RIDES.bronze_table)
    sensor = build_offset_sensor(key, RIDES_TOPIC, job, SensorSettings(min_records=1), [RIDES.bronze_table])
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance,
            resources={"kafka": small_batches["kafka"], "lakehouse": lakehouse},
            definitions=_defs(small_batches),
        )
        result = sensor(context)
    assert isinstance(result, dg.SensorResult) and len(result.run_requests or []) == 1
    lag = [e.metadata["consumer_lag"].value for e in result.asset_events]
    assert lag == [7] == [sum(ends.values()) - sum(first.values())]

    # A run ingests exactly those, and the checks pass.
    run = dg.materialize([*PIPELINE.assets, *PIPELINE.asset_checks], **bronze)
    assert run.success
    coordinates = _coordinates(spark, table)
    assert len(coordinates) == len(set(coordinates)) == 52 and set(coordinates) == all_coordinates(RIDES_TOPIC, ends)
    rules = {rule.name for rule in RIDES.expectations}  # the rides' own rules are not this test's point
    checks = {e.check_name: e.passed for e in run.get_asset_check_evaluations() if e.check_name not in rules}
    assert checks == {
        "reconciles_with_kafka_offsets": True,
        "unique_kafka_coordinates": True,
        "consumer_lag_below_bound": True,
    }

    # The run-start checks still tell a reset checkpoint from a healthy one.
    _clean_every_table(spark, lakehouse_dir)
    for part in sorted(Path(checkpoint).rglob("*"), reverse=True):
        part.unlink() if part.is_file() else part.rmdir()
    with pytest.raises(BronzeStateError) as caught:
        ingest_topic(spark, small_batches["kafka"], small_batches["schema_registry"], lakehouse, source=RIDES)
    assert "the checkpoint is gone or empty" in str(caught.value)
    assert "streaming-pipeline replay raw_rides" in str(caught.value)


@pytest.mark.slow
def test_the_window_reconcile_stays_incremental_after_its_tables_log_is_cleaned_up(stack, small_batches, spark):
    """The windows table loses every commit that recorded a reconcile; the next one still starts from the last.
    (raw_rides keeps the commits its streams read last: a Delta stream restarts by reading its last batch again.)"""
    lakehouse: LakehouseResource = small_batches["lakehouse"]  # type: ignore[assignment]
    windows = lakehouse.table_path("ride_window_aggregates")
    # Only the windows and the table they read: the other assets play no part here.
    only_windows = {"resources": small_batches, "selection": ["raw_rides", "ride_window_aggregates"]}
    _produce(stack, 30, seed=26)
    assert dg.materialize(PIPELINE.assets, **only_windows).success
    _produce(stack, 6, seed=27)
    assert dg.materialize(PIPELINE.assets, **only_windows).success
    checkpoint_and_clean(spark, windows)
    markers = [c.user_metadata for c in commits(windows) or []]
    assert not any(m and m.get("writer") == "reconcile:ride_window_aggregates" for m in markers)

    _produce(stack, 5, seed=28)
    run = dg.materialize(PIPELINE.assets, **only_windows)
    metadata = next(
        m.materialization.metadata
        for m in run.get_asset_materialization_events()
        if m.asset_key == dg.AssetKey("ride_window_aggregates")
    )
    assert metadata["reconcile_full_recount"].value is False, metadata["reconcile"]
    counted = spark.read.format("delta").load(windows).selectExpr("sum(trip_count + late_trip_count)").first()[0]
    assert counted == 41


@pytest.mark.slow
def test_replay_from_earliest_a_time_and_offsets_rebuilds_exactly_after_log_cleanup(
    stack, session_object_store, spark, spark_test_conf
):
    """On the session's object store. Each replay starts after a cleanup of every table's log (the micro-batch
    size plays no part: each replay starts every stream on a new checkpoint). The code location holds raw_rides and
    its dead letters only, so that a replay rebuilds raw_rides alone: the tables downstream play no part in where a
    replay starts (a replay that rebuilds them is test_exactly_once_bronze's)."""
    lakehouse_dir = f"{session_object_store.lakehouse_dir}/replay-after-cleanup-{uuid.uuid4().hex[:8]}"
    pipeline_resources = pipeline_resources_for(stack, lakehouse_dir, spark_test_conf)
    lakehouse: LakehouseResource = pipeline_resources["lakehouse"]  # type: ignore[assignment]
    table, checkpoint = lakehouse.table_path("raw_rides"), lakehouse.checkpoint_path("raw_rides")
    _produce(stack, 24, seed=23)
    first = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    time.sleep(1.5)
    moment = datetime.now(UTC)
    time.sleep(1.5)
    _produce(stack, 9, seed=24)
    ends = end_offsets(stack.bootstrap_servers, RIDES_TOPIC)
    defs = _bronze_rides_defs(pipeline_resources)
    assert dg.materialize(defs.assets or [], resources=pipeline_resources).success

    def rebuilt(start: ReplayStart) -> set[tuple[str, int, int]]:
        spark.sql(f"OPTIMIZE delta.`{table}`")
        _clean_every_table(spark, lakehouse_dir)  # replay starts every stream on a new checkpoint
        replay(
            "raw_rides",
            start,
            defs=defs,
            sources=project_sources(),
            instance=dg.DagsterInstance.ephemeral(),
            progress=lambda _m: None,
        )
        coordinates = _coordinates(spark, table)
        assert len(coordinates) == len(set(coordinates))
        return set(coordinates)

    assert rebuilt(ReplayStart()) == all_coordinates(RIDES_TOPIC, ends)
    second_group = {(RIDES_TOPIC, p, o) for p, end in ends.items() for o in range(first.get(p, 0), end)}
    assert rebuilt(ReplayStart.parse(from_time=moment.isoformat())) == second_group
    assert table_start_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == first
    start = {p: max(0, end - 2) for p, end in sorted(ends.items())}
    assert rebuilt(ReplayStart(earliest=False, offsets=start)) == {
        (RIDES_TOPIC, p, o) for p, end in ends.items() for o in range(start[p], end)
    }
    assert consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == ends


def test_a_replay_whose_start_was_cleaned_up_before_its_first_batch_says_to_replay_again(spark, tmp_path: Path):
    table, checkpoint = str(tmp_path / "raw_rides"), str(tmp_path / "checkpoint")
    marker = {"replay_of": "raw_rides", "starting_offsets": {RIDES_TOPIC: {"0": 5, "1": 3}}}
    empty_table(spark, table, marker, ddl=ddl(KAFKA_COLUMNS), txn_app_id=replay_app_id("raw_rides"))
    assert consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC) == {0: 5, 1: 3}
    checkpoint_and_clean(spark, table)
    with pytest.raises(BronzeStateError) as caught:
        consumed_offsets(table, checkpoint, "raw_rides", RIDES_TOPIC)
    message = str(caught.value)
    assert "no longer in the Delta log" in message and "streaming-pipeline replay raw_rides" in message
