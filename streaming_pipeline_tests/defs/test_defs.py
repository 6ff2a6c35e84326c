"""The Definitions as Dagster loads them: assets, groups, checks, sensors, jobs, and how a live run is ordered."""

from __future__ import annotations

import dagster as dg
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.outputs import StepOutputHandle
from dagster._core.execution.retries import RetryMode

from streaming_pipeline.components.streamed_table import streamed_tables
from streaming_pipeline.definitions import defs
from streaming_pipeline.lakehouse import tables

assert defs.component_tree is not None
#: Every table declared (bronze ones by their sources; a step's in the library or in its own module), with its layer:
#: the asset group it must be in.
GROUPS = {
    value.name: value.layer
    for value in [
        *vars(tables).values(),
        *(written.table for step in streamed_tables(defs.component_tree) for written in step.writes),
    ]
    if isinstance(value, tables.Table)
}


def test_definitions_load() -> None:
    dg.Definitions.validate_loadable(defs)


def test_every_table_is_an_asset_in_its_layer_group() -> None:
    assert len(GROUPS) == 12
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == set(GROUPS)
    assert {key: graph.get(dg.AssetKey(key)).group_name for key in GROUPS} == GROUPS


def test_every_table_asset_names_its_table_in_the_catalog() -> None:
    graph = defs.resolve_asset_graph()
    names = {key: graph.get(dg.AssetKey(key)).metadata.get("dagster/table_name") for key in GROUPS}
    assert names == {
        "raw_rides": "bronze.raw_rides",
        "raw_pickup_locations": "bronze.raw_pickup_locations",
        "dead_letter_records": "bronze.dead_letter_records",
        "taxi_zones": "bronze.taxi_zones",
        "taxi_zones_history": "bronze.taxi_zones_history",
        "rides_enriched": "silver.rides_enriched",
        "ride_pickup_joins": "silver.ride_pickup_joins",
        "join_late_rows": "silver.join_late_rows",
        "high_amount_rides": "silver.high_amount_rides",
        "low_amount_rides": "silver.low_amount_rides",
        "vendor_counts": "gold.vendor_counts",
        "ride_window_aggregates": "gold.ride_window_aggregates",
    }


def test_checks_guard_the_streaming_tables() -> None:
    graph = defs.resolve_asset_graph()
    checked = {key.asset_key.to_user_string() for key in graph.asset_check_keys}
    assert checked == {
        "raw_rides",
        "raw_pickup_locations",
        "taxi_zones",
        "ride_window_aggregates",
        "ride_pickup_joins",
        "vendor_counts",
        "high_amount_rides",
        "low_amount_rides",
        "rides_enriched",
    }


def test_in_triggered_mode_the_offset_sensors_and_the_automation_sensor_start_running() -> None:
    sensors = {sensor.name: sensor for sensor in defs.sensors or []}
    assert {name: sensor.default_status for name, sensor in sensors.items()} == {
        "raw_rides_offset_sensor": dg.DefaultSensorStatus.RUNNING,
        "raw_pickup_locations_offset_sensor": dg.DefaultSensorStatus.RUNNING,
        "taxi_zones_offset_sensor": dg.DefaultSensorStatus.RUNNING,
        "default_automation_condition_sensor": dg.DefaultSensorStatus.RUNNING,
        "continuous_streams_sensor": dg.DefaultSensorStatus.STOPPED,
    }
    assert sensors["continuous_streams_sensor"].job_name == "continuous_streams_job"
    assert sensors["raw_rides_offset_sensor"].job_name == "raw_rides_downstream_job"
    assert sensors["raw_pickup_locations_offset_sensor"].job_name == "raw_pickup_locations_downstream_job"


def _step_order(job_name: str) -> list[str]:
    """The order in which the in-process executor runs the job's steps, each taken to succeed at once."""
    plan = create_execution_plan(defs.resolve_job_def(job_name))
    order: list[str] = []
    with ActiveExecution(plan, retry_mode=RetryMode.DISABLED) as active:
        while not active.is_complete:
            (step,) = active.get_steps_to_execute(limit=1)
            order.append(step.key)
            for output in step.step_outputs:
                active.mark_step_produced_output(StepOutputHandle(step.key, output.name))
            active.mark_success(step.key)
    return order


def test_live_job_reaches_vendor_counts_right_after_bronze_and_the_windows_last() -> None:
    assert _step_order("raw_rides_downstream_job") == [
        "raw_rides",
        "vendor_counts",
        "high_amount_rides",
        "low_amount_rides",
        "rides_enriched",
        "ride_pickup_joins",
        "dead_letter_records",
        "ride_window_aggregates",
    ]
    assert _step_order("raw_pickup_locations_downstream_job") == [
        "raw_pickup_locations",
        "ride_pickup_joins",
        "dead_letter_records",
    ]


def test_the_live_jobs_keep_their_names_until_0_9_0_as_deprecated_jobs_of_the_same_assets() -> None:
    for bronze in ("raw_rides", "raw_pickup_locations"):
        job, renamed = defs.resolve_job_def(f"{bronze}_downstream_job"), defs.resolve_job_def(f"{bronze}_to_gold_job")
        assert renamed.asset_layer.selected_asset_keys == job.asset_layer.selected_asset_keys
        assert bronze in {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
        assert renamed.description is not None and renamed.description.startswith("Deprecated")


def test_automation_requests_nothing_in_a_new_lakehouse() -> None:
    # Every table comes from Kafka (the zones too, from their table topic): the sensors launch the runs when records
    # wait, and the eager tables follow them.
    result = dg.evaluate_automation_conditions(defs=defs, instance=dg.DagsterInstance.ephemeral())
    assert {r.key.to_user_string() for r in result.results if r.true_subset.size} == set()
