"""The maintenance job and schedule as Dagster loads them, and `streaming-pipeline maintain`'s refusals: an unknown
table, a retention below the minimum, a run in flight that writes the table. None of these starts Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test

from streaming_pipeline.components.maintenance import MAINTENANCE_JOB, MAINTENANCE_SCHEDULE
from streaming_pipeline.definitions import build_definitions, defs
from streaming_pipeline.devstack import cli
from streaming_pipeline.devstack import maintain as maintain_module
from streaming_pipeline.devstack.maintain import maintain, runs_writing
from streaming_pipeline.devstack.project import project_table_names
from streaming_pipeline.lakehouse.errors import ConfigurationError, MaintenanceError
from streaming_pipeline.lakehouse.settings import MaintenanceSettings, PipelineSettings
from streaming_pipeline.resources import SparkResource


def _ops_by_table(job: dg.JobDefinition) -> dict[str, dg.OpDefinition]:
    ops = [node for node in job.all_node_defs if isinstance(node, dg.OpDefinition)]
    return {op.tags["table"]: op for op in ops}


def test_the_job_has_one_op_per_delta_table_in_the_pool_of_the_step_that_writes_it() -> None:
    graph = defs.resolve_asset_graph()
    delta_tables = {key.to_user_string() for key in graph.get_all_asset_keys() if "delta" in graph.get(key).kinds}
    ops = _ops_by_table(defs.resolve_job_def(MAINTENANCE_JOB))

    assert set(ops) == delta_tables == set(project_table_names())
    assert len(ops) == len(defs.resolve_job_def(MAINTENANCE_JOB).all_node_defs)  # one op each, nothing else
    for table, op in ops.items():
        # The pool the asset's own step declares (`stream_step_args` or `checkpoint_pool`); none for a table whose
        # writer holds none.
        declared = graph.get(dg.AssetKey(table)).pools
        assert len(declared) <= 1
        assert op.pool == next(iter(declared), None), table
    # Every streaming step's pool is held by the job's run, so it waits for every live run and they wait for it.
    every_pool = {pool for key in graph.get_all_asset_keys() for pool in graph.get(key).pools}
    assert {op.pool for op in ops.values()} - {None} == every_pool


def test_the_schedule_runs_the_job_daily_and_ships_running() -> None:
    schedule = defs.resolve_schedule_def(MAINTENANCE_SCHEDULE)
    assert schedule.job_name == MAINTENANCE_JOB
    assert schedule.cron_schedule == MaintenanceSettings.from_env().cron_schedule
    assert MaintenanceSettings().cron_schedule == "0 3 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedule.execution_timezone == "UTC"


def test_the_maintenance_settings_are_read_and_checked() -> None:
    assert MaintenanceSettings.from_env({}) == MaintenanceSettings(168.0, "0 3 * * *")
    read = MaintenanceSettings.from_env({"DELTA_VACUUM_RETENTION_HOURS": "336", "TABLE_MAINTENANCE_CRON": "@weekly"})
    assert read == MaintenanceSettings(336.0, "@weekly")
    with pytest.raises(ConfigurationError, match="DELTA_VACUUM_RETENTION_HOURS='a week' is not a positive number"):
        MaintenanceSettings.from_env({"DELTA_VACUUM_RETENTION_HOURS": "a week"})
    with pytest.raises(ConfigurationError, match="TABLE_MAINTENANCE_CRON='daily' is not a cron schedule"):
        MaintenanceSettings.from_env({"TABLE_MAINTENANCE_CRON": "daily"})


def test_a_run_of_the_job_skips_the_tables_not_created_yet(tmp_path: Path) -> None:
    settings = PipelineSettings.from_env({"LAKEHOUSE_DIR": str(tmp_path / "empty")})
    job = build_definitions(settings).resolve_job_def(MAINTENANCE_JOB)
    # Spark at a port nobody listens on: the run would fail if any op asked for a session.
    unreachable = SparkResource(remote="sc://127.0.0.1:9")
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(resources={"spark": unreachable}, instance=instance)
    assert result.success
    assert not [event for event in result.all_events if event.is_asset_observation]
    skipped = [
        entry.user_message for entry in instance.all_logs(result.run_id) if "not created yet" in entry.user_message
    ]
    assert len(skipped) == len(project_table_names())


# ------------------------------------------------------------------------------------------- the command line


def test_an_unknown_table_is_a_usage_error_listing_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["maintain", "raw_rides", "rides"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "streaming-pipeline maintain: error: argument TABLE: invalid choice: 'rides'" in error
    assert all(name in error for name in project_table_names())


def test_a_retention_below_the_minimum_is_refused_before_anything_is_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def must_not_run(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("maintenance ran despite a retention below the minimum")

    monkeypatch.setattr(maintain_module, "maintain", must_not_run)
    assert cli.main(["maintain", "raw_rides", "--retain-hours", "24"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: --retain-hours of 24 hours is below the safe minimum of 168 hours")
    assert "Nothing was done" in error
    with pytest.raises(ConfigurationError, match="--retain-hours of 167.5 hours is below the safe minimum"):
        maintain(["raw_rides"], defs=defs, instance=dg.DagsterInstance.ephemeral(), retain_hours=167.5)


def test_a_run_in_flight_that_writes_a_table_keeps_maintain_off_it() -> None:
    instance = dg.DagsterInstance.ephemeral()
    live = create_run_for_test(instance, job_name="raw_rides_downstream_job", status=dg.DagsterRunStatus.STARTED)
    join = create_run_for_test(
        instance,
        job_name="__ASSET_JOB",
        asset_selection=frozenset({dg.AssetKey("ride_pickup_joins")}),
        status=dg.DagsterRunStatus.NOT_STARTED,
    )
    create_run_for_test(instance, job_name="raw_pickup_locations_downstream_job", status=dg.DagsterRunStatus.SUCCESS)

    def busy(*tables: str) -> set[str]:
        return {run.run_id for run in runs_writing(instance, defs, tables)}

    assert busy("vendor_counts") == {live.run_id}
    assert busy("dead_letter_records") == {live.run_id}  # every bronze run appends dead letters
    assert busy("join_late_rows") == {live.run_id, join.run_id}  # one step writes the join and its late rows
    assert busy("taxi_zones", "raw_pickup_locations") == set()  # the finished run is over
    runs_before = len(instance.get_runs())
    with pytest.raises(MaintenanceError, match=f"run\\(s\\) in flight write the tables to maintain: {live.run_id}"):
        maintain(["vendor_counts", "taxi_zones"], defs=defs, instance=instance)
    assert len(instance.get_runs()) == runs_before  # no maintenance run was started

    maintenance = create_run_for_test(instance, job_name=MAINTENANCE_JOB, status=dg.DagsterRunStatus.STARTED)
    assert busy("taxi_zones") == {maintenance.run_id}  # never two maintenance runs at once


# ------------------------------------------------------------------------------------------- on a real table


@pytest.mark.integration
def test_maintain_runs_the_ops_and_each_table_gets_an_observation_with_its_figures(spark, tmp_path: Path) -> None:
    """The command's core on the session's Spark: one line per table, and the table's observation in Dagster."""
    from streaming_pipeline.definitions import pipeline_definitions
    from streaming_pipeline.resources.from_settings import build_resources
    from streaming_pipeline_tests.conftest import SPARK_TEST_CONF

    resources = build_resources(PipelineSettings.from_env({"LAKEHOUSE_DIR": str(tmp_path / "lakehouse")}))
    resources["spark"] = SparkResource(stop_on_teardown=False, conf=SPARK_TEST_CONF)  # the session's own
    lakehouse = resources["lakehouse"]
    for batch in range(5):
        rows = [(vendor, batch) for vendor in (1, 2)]
        frame = spark.createDataFrame(rows, "vendor_id INT, trip_count BIGINT").coalesce(1)  # a file each
        frame.write.format("delta").mode("append").save(lakehouse.table_path("vendor_counts"))
    local_defs = dg.Definitions.merge(
        pipeline_definitions(), dg.Definitions(resources=resources, executor=dg.in_process_executor)
    )
    instance = dg.DagsterInstance.ephemeral()
    lines: list[str] = []

    run_id = maintain(["vendor_counts", "taxi_zones"], defs=local_defs, instance=instance, progress=lines.append)

    assert lines[0].startswith("vendor_counts: 5 -> 1 file(s), ") and "version 4 -> 5" in lines[0]
    assert lines[1] == "taxi_zones: not created yet, nothing to maintain"
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.tags["streaming-pipeline/maintain"] == "cli"
    observations = [
        entry.dagster_event.asset_observation_data.asset_observation  # type: ignore[union-attr]
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is not None and entry.dagster_event.is_asset_observation
    ]
    assert [o.asset_key.to_user_string() for o in observations] == ["vendor_counts"]
    figures = {name: value.value for name, value in observations[0].metadata.items()}
    assert {k: figures[k] for k in ("files_before", "files_after", "delta_version_before", "delta_version_after")} == {
        "files_before": 5,
        "files_after": 1,
        "delta_version_before": 4,
        "delta_version_after": 5,
    }
    assert figures["vacuumed_files"] == 0 and figures["vacuum_retention_hours"] == 168.0
    assert figures["bytes_after"] < figures["bytes_before"] and figures["checkpoint_version"] == "none yet"
