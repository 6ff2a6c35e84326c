"""Run retention (`defs/run_retention.py`): which finished runs the daily job deletes and which it keeps, the files
Dagster's SQLite storage leaves behind, the tick retention of the stack's dagster.yaml, and the settings' errors."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.events import StepMaterializationData
from dagster._core.scheduler.instigation import TickStatus

from streaming_pipeline.defs.run_retention import RunRetentionConfig, delete_expired_runs, run_retention_definitions
from streaming_pipeline.devstack.embedded.dagster_home import write_dagster_yaml
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import RunRetentionSettings

REPO = Path(__file__).resolve().parents[2]
JOB = "raw_rides_downstream_job"
RIDES_SENSOR = {"dagster/sensor_name": "raw_rides_offset_sensor"}
AUTOMATION_SENSOR = {"dagster/sensor_name": "default_automation_condition_sensor"}
SCHEDULE = {"dagster/schedule_name": "dagster_run_retention_schedule"}
DAY = 86_400

_EVENTS = {
    dg.DagsterRunStatus.SUCCESS: (dg.DagsterEventType.PIPELINE_START, dg.DagsterEventType.PIPELINE_SUCCESS),
    dg.DagsterRunStatus.FAILURE: (dg.DagsterEventType.PIPELINE_START, dg.DagsterEventType.PIPELINE_FAILURE),
    dg.DagsterRunStatus.CANCELED: (dg.DagsterEventType.PIPELINE_START, dg.DagsterEventType.PIPELINE_CANCELED),
    dg.DagsterRunStatus.STARTED: (dg.DagsterEventType.PIPELINE_START,),
    dg.DagsterRunStatus.CANCELING: (dg.DagsterEventType.PIPELINE_START, dg.DagsterEventType.PIPELINE_CANCELING),
}


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    """A DAGSTER_HOME with the dagster.yaml that `stack up` writes (SQLite storage)."""
    home = tmp_path / "dagster"
    write_dagster_yaml(home)
    return home


@pytest.fixture
def instance(dagster_home: Path):
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        yield instance


def _run(
    instance: dg.DagsterInstance,
    status: dg.DagsterRunStatus,
    *,
    age_days: float,
    tags: dict[str, str] | None = None,
    materializes: str | None = None,
) -> str:
    """A run whose status events (and so its update timestamp) are `age_days` old."""
    run_id = str(uuid.uuid4())
    instance.add_run(
        dg.DagsterRun(job_name=JOB, run_id=run_id, tags=tags or {}, status=dg.DagsterRunStatus.NOT_STARTED)
    )
    timestamp = time.time() - age_days * DAY
    events = list(_EVENTS[status])
    for event_type in events[:1]:
        instance.report_dagster_event(dg.DagsterEvent(event_type.value, JOB), run_id, timestamp=timestamp)
    if materializes:
        materialization = StepMaterializationData(dg.AssetMaterialization(asset_key=materializes))
        event = dg.DagsterEvent(
            dg.DagsterEventType.ASSET_MATERIALIZATION.value, JOB, event_specific_data=materialization
        )
        instance.report_dagster_event(event, run_id, timestamp=timestamp)
    for event_type in events[1:]:
        instance.report_dagster_event(dg.DagsterEvent(event_type.value, JOB), run_id, timestamp=timestamp)
    record = instance.get_run_record_by_id(run_id)
    assert record is not None and record.dagster_run.status == status
    return run_id


def _config(**overrides: int) -> dict:
    config = {"run_retention_days": 7, "failed_run_retention_days": 30, **overrides}
    return {"ops": {"delete_expired_runs_op": {"config": config}}}


def test_the_job_deletes_exactly_the_expired_runs_of_sensors_and_schedules(instance: dg.DagsterInstance) -> None:
    S, F, C = dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED
    older_vendor_counts = _run(instance, S, age_days=50, tags=RIDES_SENSOR, materializes="vendor_counts")
    deleted = {
        older_vendor_counts,
        _run(instance, S, age_days=8, tags=RIDES_SENSOR),
        _run(instance, C, age_days=8, tags=RIDES_SENSOR),
        _run(instance, F, age_days=31, tags=RIDES_SENSOR),
        _run(instance, S, age_days=8, tags=AUTOMATION_SENSOR),
        _run(instance, S, age_days=8, tags=SCHEDULE),
    }
    kept = {
        _run(instance, S, age_days=6, tags=RIDES_SENSOR),  # younger than 7 days
        _run(instance, F, age_days=8, tags=RIDES_SENSOR),  # a failure: 30 days
        _run(instance, dg.DagsterRunStatus.STARTED, age_days=40, tags=RIDES_SENSOR),  # in flight
        _run(instance, dg.DagsterRunStatus.CANCELING, age_days=40, tags=RIDES_SENSOR),  # in flight
        _run(instance, S, age_days=40),  # started by hand
        _run(instance, S, age_days=40, tags=RIDES_SENSOR, materializes="vendor_counts"),  # the latest materialization
    }

    job = run_retention_definitions(RunRetentionSettings()).resolve_job_def("dagster_run_retention_job")
    result = job.execute_in_process(instance=instance, run_config=_config(page_size=2), tags=SCHEDULE)

    assert result.success
    assert set(instance.get_run_ids()) == kept | {result.run_id}
    assert not deleted & set(instance.get_run_ids())
    output = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT)
    metadata = {k: v.value for k, v in output.step_output_data.metadata.items()}
    assert metadata["deleted_runs"] == 6
    assert (metadata["deleted_success_runs"], metadata["deleted_canceled_runs"], metadata["deleted_failure_runs"]) == (
        4,
        1,
        1,
    )
    assert metadata["kept_latest_materialization_runs"] == 1
    # The catalog keeps the asset's latest materialization; the deleted run's events are gone.
    latest = instance.get_latest_materialization_event(dg.AssetKey("vendor_counts"))
    assert latest is not None and latest.run_id in kept
    history = instance.fetch_materializations(dg.AssetKey("vendor_counts"), limit=10).records
    assert [record.run_id for record in history] == [latest.run_id]
    assert instance.all_logs(older_vendor_counts) == []


def test_the_run_executing_the_job_and_listed_runs_are_never_deleted(instance: dg.DagsterInstance) -> None:
    keep = _run(instance, dg.DagsterRunStatus.SUCCESS, age_days=100, tags=RIDES_SENSOR)
    gone = _run(instance, dg.DagsterRunStatus.SUCCESS, age_days=100, tags=RIDES_SENSOR)
    report = delete_expired_runs(instance, RunRetentionSettings(), keep_run_ids={keep})
    assert report.total == 1
    assert set(instance.get_run_ids()) == {keep}
    assert gone not in instance.get_run_ids()


def test_pages_are_bounded(instance: dg.DagsterInstance, caplog: pytest.LogCaptureFixture) -> None:
    for _ in range(5):
        _run(instance, dg.DagsterRunStatus.SUCCESS, age_days=8, tags=RIDES_SENSOR)
    logger = logging.getLogger("test_run_retention")
    with caplog.at_level(logging.DEBUG, logger="test_run_retention"):
        report = delete_expired_runs(instance, RunRetentionSettings(), page_size=2, log=logger)
    pages = [
        r.getMessage().split()[1]
        for r in caplog.records
        if r.getMessage().startswith("deleted ") and "[" in r.getMessage()
    ]
    assert pages == ["2", "2", "1"]
    assert report.total == 5 and report.deleted == {"SUCCESS": 5}
    assert instance.get_run_ids() == []
    assert "deleted 5 finished run(s) (5 success) launched by raw_rides_offset_sensor" in caplog.text


@dg.asset
def tiny() -> dg.MaterializeResult:
    print("a line for the captured logs")  # noqa: T201
    return dg.MaterializeResult(metadata={"rows": 1})


def test_a_deleted_runs_event_log_file_and_captured_logs_are_removed(
    instance: dg.DagsterInstance, dagster_home: Path
) -> None:
    first = dg.materialize([tiny], instance=instance, tags=RIDES_SENSOR).run_id
    second = dg.materialize([tiny], instance=instance, tags=RIDES_SENSOR).run_id
    shard = dagster_home / "history" / "runs" / f"{first}.db"
    logs = dagster_home / "storage" / first
    assert shard.is_file() and logs.is_dir()

    report = delete_expired_runs(instance, RunRetentionSettings(), now=datetime.now(UTC) + timedelta(days=8))

    assert report.total == 1  # the second run holds tiny's latest materialization
    assert report.event_log_files_removed == 1 and report.event_log_bytes_removed > 0
    assert not shard.exists() and not logs.exists()
    assert (dagster_home / "history" / "runs" / f"{second}.db").is_file()
    assert (dagster_home / "storage" / second).is_dir()
    assert set(instance.get_run_ids()) == {second}


def test_dagster_delete_run_leaves_the_event_log_file_behind(instance: dg.DagsterInstance, dagster_home: Path) -> None:
    """Why the job removes the file: Dagster empties a run's SQLite event log but keeps the file (and the run's
    captured logs). When this fails, Dagster removes them itself and `_remove_event_log_file` can go."""
    run_id = dg.materialize([tiny], instance=instance).run_id
    instance.delete_run(run_id)
    assert (dagster_home / "history" / "runs" / f"{run_id}.db").is_file()
    assert (dagster_home / "storage" / run_id).is_dir()


def test_the_daily_schedule_runs_the_job_from_the_start() -> None:
    schedule = run_retention_definitions(RunRetentionSettings()).resolve_schedule_def("dagster_run_retention_schedule")
    assert schedule.job_name == "dagster_run_retention_job"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert schedule.cron_schedule == "17 3 * * *"


def test_the_environment_sets_the_jobs_default_config_when_the_definitions_are_built() -> None:
    settings = RunRetentionSettings.from_env(
        {"DAGSTER_RUN_RETENTION_DAYS": "3", "DAGSTER_FAILED_RUN_RETENTION_DAYS": "9"}
    )
    job = run_retention_definitions(settings).resolve_job_def("dagster_run_retention_job")
    assert job.run_config_schema.config_type.fields["ops"].default_value == {
        "delete_expired_runs_op": {
            "config": {"run_retention_days": 3, "failed_run_retention_days": 9, "page_size": 100}
        }
    }


# ------------------------------------------------------------------------------------------------ dagster.yaml

SENSOR_TICKS = {TickStatus.SKIPPED: 1, TickStatus.SUCCESS: 7, TickStatus.FAILURE: 30, TickStatus.STARTED: 7}
SCHEDULE_TICKS = {TickStatus.SKIPPED: 7, TickStatus.SUCCESS: 30, TickStatus.FAILURE: 30, TickStatus.STARTED: 30}


def test_the_stack_dagster_yaml_loads_with_its_tick_retention(instance: dg.DagsterInstance) -> None:
    assert instance.get_tick_retention_settings(InstigatorType.SENSOR) == SENSOR_TICKS
    assert instance.get_tick_retention_settings(InstigatorType.SCHEDULE) == SCHEDULE_TICKS


def test_the_postgres_dagster_yaml_and_docker_compose_keep_the_same_retention(tmp_path: Path) -> None:
    embedded = yaml.safe_load(write_dagster_yaml(tmp_path / "sqlite").read_text())["retention"]
    postgres = write_dagster_yaml(tmp_path / "pg", {"username": "dagster", "hostname": "127.0.0.1", "db_name": "d"})
    assert yaml.safe_load(postgres.read_text())["retention"] == embedded
    assert yaml.safe_load((REPO / "docker" / "dagster.yaml").read_text())["retention"] == embedded


# ------------------------------------------------------------------------------------------------ settings


def test_the_retention_settings_come_from_the_environment() -> None:
    assert RunRetentionSettings.from_env({}) == RunRetentionSettings(7, 30)
    env = {"DAGSTER_RUN_RETENTION_DAYS": "3", "DAGSTER_FAILED_RUN_RETENTION_DAYS": "14"}
    assert RunRetentionSettings.from_env(env) == RunRetentionSettings(3, 14)
    # Unset, the failures' retention is never shorter than the others'.
    assert RunRetentionSettings.from_env({"DAGSTER_RUN_RETENTION_DAYS": "60"}) == RunRetentionSettings(60, 60)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DAGSTER_RUN_RETENTION_DAYS": "0"}, "DAGSTER_RUN_RETENTION_DAYS='0' is not a positive whole number"),
        ({"DAGSTER_RUN_RETENTION_DAYS": "a week"}, "DAGSTER_RUN_RETENTION_DAYS='a week' is not a positive whole"),
        ({"DAGSTER_FAILED_RUN_RETENTION_DAYS": "-1"}, "DAGSTER_FAILED_RUN_RETENTION_DAYS='-1' is not a positive"),
        (
            {"DAGSTER_RUN_RETENTION_DAYS": "10", "DAGSTER_FAILED_RUN_RETENTION_DAYS": "5"},
            "DAGSTER_FAILED_RUN_RETENTION_DAYS='5' is shorter than DAGSTER_RUN_RETENTION_DAYS=10",
        ),
    ],
)
def test_a_bad_retention_setting_is_an_error_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RunRetentionSettings.from_env(env)


def test_a_bad_launchpad_value_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="failed_run_retention_days=3 is shorter than run_retention_days=7"):
        RunRetentionConfig(run_retention_days=7, failed_run_retention_days=3)
    with pytest.raises(ConfigurationError, match="run_retention_days=0 is not a positive"):
        RunRetentionConfig(run_retention_days=0)
    with pytest.raises(ConfigurationError, match="page_size=0"):
        RunRetentionConfig(page_size=0)
