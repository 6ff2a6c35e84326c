"""Run retention: a daily job that deletes the finished runs Dagster's sensors and schedules launched, with their
event logs, once they are older than a number of days (docs/dagster-storage.md).

Live mode launches a run every ~25 s (~3,500 a day), each with its event log; nothing in Dagster deletes them. The
job deletes, in pages of `page_size`:

- successful and canceled runs last updated more than `run_retention_days` ago (DAGSTER_RUN_RETENTION_DAYS, 7),
- failed runs last updated more than `failed_run_retention_days` ago (DAGSTER_FAILED_RUN_RETENTION_DAYS, 30),

when a sensor or a schedule launched them (the `dagster/sensor_name` or `dagster/schedule_name` tag: the offset
sensors, the automation sensor, this job's schedule). Runs started by hand (the launchpad, `dagster asset
materialize`, `streaming-pipeline replay`, the checks) are kept. Never deleted: a run that is not finished, the run
executing this job, and a run that holds the latest materialization of an asset (so the catalog keeps each asset's
last materialization and an asset never looks missing to the automation conditions).

`DagsterInstance.delete_run` deletes the run and its events, materializations included. With Dagster's default
SQLite storage it leaves the run's own event-log file (`<DAGSTER_HOME>/history/runs/<run_id>.db`) behind, emptied;
this job removes it. It also deletes the run's captured logs (`<DAGSTER_HOME>/storage/<run_id>/` with the local
compute log manager) and the automation sensor's evaluation records older than `run_retention_days` (Dagster keeps
those 30 days, and they are the largest part of the storage under live mode).
"""

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from pydantic import Field, model_validator

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import RunRetentionSettings

SENSOR_NAME_TAG = "dagster/sensor_name"
SCHEDULE_NAME_TAG = "dagster/schedule_name"
#: The run tags that say a sensor or a schedule launched the run.
LAUNCHED_BY_TAGS = (SENSOR_NAME_TAG, SCHEDULE_NAME_TAG)
PAGE_SIZE = 100
#: SQLite's side files of a database.
_SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")

#: The defaults of the settings; the job's own default config is read from the environment when it is built.
_DEFAULTS = RunRetentionSettings()


@dataclass
class RetentionReport:
    """What one pass deleted."""

    #: deleted runs by status (SUCCESS, CANCELED, FAILURE)
    deleted: dict[str, int] = field(default_factory=dict)
    #: runs that qualified but hold the latest materialization of an asset
    kept_latest_materializations: int = 0
    #: per-run event-log files (SQLite) removed, and their bytes
    event_log_files_removed: int = 0
    event_log_bytes_removed: int = 0
    launched_by: dict[str, list[str]] = field(default_factory=dict)
    evaluations_purged_before: datetime | None = None

    @property
    def total(self) -> int:
        return sum(self.deleted.values())

    def summary(self) -> str:
        by_status = ", ".join(f"{n} {status.lower()}" for status, n in sorted(self.deleted.items()) if n) or "none"
        names = ", ".join(name for names in self.launched_by.values() for name in names) or "no sensor or schedule"
        text = f"deleted {self.total} finished run(s) ({by_status}) launched by {names}"
        if self.event_log_files_removed:
            text += (
                f"; removed {self.event_log_files_removed} event-log file(s), "
                f"{self.event_log_bytes_removed / 1e6:.1f} MB"
            )
        if self.kept_latest_materializations:
            text += f"; kept {self.kept_latest_materializations} run(s) holding an asset's latest materialization"
        if self.evaluations_purged_before is not None:
            text += f"; purged automation evaluations before {self.evaluations_purged_before:%Y-%m-%d %H:%M} UTC"
        return text

    def metadata(self) -> dict[str, Any]:
        return {
            "deleted_runs": dg.MetadataValue.int(self.total),
            **{
                f"deleted_{status.lower()}_runs": dg.MetadataValue.int(self.deleted.get(status, 0))
                for status in ("SUCCESS", "CANCELED", "FAILURE")
            },
            "kept_latest_materialization_runs": dg.MetadataValue.int(self.kept_latest_materializations),
            "event_log_files_removed": dg.MetadataValue.int(self.event_log_files_removed),
            "event_log_bytes_removed": dg.MetadataValue.int(self.event_log_bytes_removed),
            "launched_by": dg.MetadataValue.json(self.launched_by),
        }


def _launched_by(instance: dg.DagsterInstance) -> dict[str, list[str]]:
    """{tag: the sensor or schedule names} of every run a sensor or a schedule launched on this instance."""
    return {key: sorted(values) for key, values in instance.get_run_tags(tag_keys=list(LAUNCHED_BY_TAGS)) if values}


def _latest_materialization_runs(instance: dg.DagsterInstance) -> set[str]:
    """The runs that hold the latest materialization of an asset."""
    keys = instance.get_asset_keys()
    events = instance.get_latest_materialization_events(keys) if keys else {}
    return {event.run_id for event in events.values() if event is not None}


def _remove_event_log_file(instance: dg.DagsterInstance, run_id: str) -> tuple[int, int]:
    """(files, bytes) removed: `delete_run` empties a run's own SQLite event-log file but leaves it behind. The
    consolidated SQLite and PostgreSQL storages keep every run in one database: nothing to remove."""
    storage = instance.event_log_storage
    if not isinstance(storage, SqliteEventLogStorage):
        return 0, 0
    shard = Path(storage.path_for_shard(run_id))
    files = size = 0
    for path in (shard.with_name(shard.name + suffix) for suffix in _SQLITE_SUFFIXES):
        try:
            size += path.stat().st_size
            path.unlink()
            files += 1
        except FileNotFoundError:
            continue
    # The storage creates a run's tables once per process: a later read of this run id in this process must
    # create them again (as for any unknown run) rather than query a new, empty file.
    getattr(storage, "_initialized_dbs", set()).discard(run_id)
    return files, size


def _delete_run(instance: dg.DagsterInstance, run_id: str, report: RetentionReport) -> None:
    instance.delete_run(run_id)  # the run, its tags and its events
    files, size = _remove_event_log_file(instance, run_id)
    report.event_log_files_removed += files
    report.event_log_bytes_removed += size
    instance.compute_log_manager.delete_logs(prefix=[run_id])  # <base_dir>/<run_id>/ of the local manager


def _expired_pages(
    instance: dg.DagsterInstance, filters: dg.RunsFilter, *, protected: Collection[str], page_size: int
) -> Iterable[list[str]]:
    """Pages of at most `page_size` run ids that match `filters` and are not protected, until none is left. The
    caller deletes each page before asking for the next, so the first page is always the next one; a page is
    asked for with room for the protected runs, which match the filter but stay."""
    yielded: set[str] = set()
    while True:
        run_ids = instance.get_run_ids(filters, limit=page_size + len(protected))
        page = [run_id for run_id in run_ids if run_id not in protected][:page_size]
        if not page:
            return
        if yielded.intersection(page):  # a deletion did not take: stop rather than loop
            raise RuntimeError(f"run(s) {sorted(yielded.intersection(page))} still listed after being deleted")
        yielded.update(page)
        yield page


def delete_expired_runs(
    instance: dg.DagsterInstance,
    policy: RunRetentionSettings,
    *,
    now: datetime | None = None,
    keep_run_ids: Collection[str] = (),
    page_size: int = PAGE_SIZE,
    log: logging.Logger | None = None,
) -> RetentionReport:
    """Delete the finished runs that sensors and schedules launched and that `policy` no longer keeps (see the
    module's docstring); `now` (UTC) is when the pass runs."""
    now = (now or datetime.now(UTC)).astimezone(UTC)  # the run storage compares naive UTC timestamps
    report = RetentionReport(launched_by=_launched_by(instance))
    latest = _latest_materialization_runs(instance)
    protected = set(keep_run_ids) | latest
    kept_latest: set[str] = set()
    limits = (
        (dg.DagsterRunStatus.SUCCESS, policy.run_retention_days),
        (dg.DagsterRunStatus.CANCELED, policy.run_retention_days),
        (dg.DagsterRunStatus.FAILURE, policy.failed_run_retention_days),
    )
    for status, days in limits:
        cutoff = now - timedelta(days=days)
        for tag, names in report.launched_by.items():
            filters = dg.RunsFilter(statuses=[status], updated_before=cutoff, tags={tag: names})
            if latest:
                kept_latest.update(
                    instance.get_run_ids(
                        dg.RunsFilter(
                            run_ids=sorted(latest), statuses=[status], updated_before=cutoff, tags={tag: names}
                        )
                    )
                )
            for page in _expired_pages(instance, filters, protected=protected, page_size=page_size):
                for run_id in page:
                    _delete_run(instance, run_id, report)
                report.deleted[status.value] = report.deleted.get(status.value, 0) + len(page)
                if log:
                    log.debug(f"deleted {len(page)} {status.value.lower()} run(s) launched by {tag}={names}")
    report.kept_latest_materializations = len(kept_latest)
    storage = instance.schedule_storage
    if storage is not None and storage.supports_auto_materialize_asset_evaluations:
        before = now - timedelta(days=policy.run_retention_days)
        storage.purge_asset_evaluations(before=before.timestamp())
        report.evaluations_purged_before = before
    if log:
        log.info(report.summary())
    return report


class RunRetentionConfig(dg.Config):
    """How long finished runs are kept; the job's defaults come from the environment."""

    run_retention_days: int = Field(
        default=_DEFAULTS.run_retention_days,
        description="Delete successful and canceled runs last updated this many days ago "
        "(default: DAGSTER_RUN_RETENTION_DAYS).",
    )
    failed_run_retention_days: int = Field(
        default=_DEFAULTS.failed_run_retention_days,
        description="Delete failed runs last updated this many days ago, at least run_retention_days "
        "(default: DAGSTER_FAILED_RUN_RETENTION_DAYS).",
    )
    page_size: int = Field(default=PAGE_SIZE, description="Runs listed and deleted at a time.")

    @model_validator(mode="after")
    def _check(self) -> "RunRetentionConfig":
        self.policy()
        if self.page_size <= 0:
            raise ConfigurationError(f"page_size={self.page_size} is not a positive whole number")
        return self

    def policy(self) -> RunRetentionSettings:
        return RunRetentionSettings(
            run_retention_days=self.run_retention_days, failed_run_retention_days=self.failed_run_retention_days
        )


@dg.op(out=dg.Out(dg.Nothing))
def delete_expired_runs_op(context: dg.OpExecutionContext, config: RunRetentionConfig) -> None:
    """Delete the finished runs that sensors and schedules launched, older than the retention."""
    report = delete_expired_runs(
        context.instance,
        config.policy(),
        keep_run_ids={context.run_id},
        page_size=config.page_size,
        log=context.log,
    )
    context.add_output_metadata(report.metadata())


def run_retention_definitions(settings: RunRetentionSettings) -> dg.Definitions:
    """The retention job, `settings` its default config, and its daily schedule."""
    retention = RunRetentionConfig(
        run_retention_days=settings.run_retention_days, failed_run_retention_days=settings.failed_run_retention_days
    )

    @dg.job(
        name="dagster_run_retention_job",
        config=dg.RunConfig(ops={delete_expired_runs_op.name: retention}),
        description=(
            "Deletes the finished runs that sensors and schedules launched, with their event logs: successful and "
            "canceled ones after DAGSTER_RUN_RETENTION_DAYS (7), failed ones after DAGSTER_FAILED_RUN_RETENTION_DAYS "
            "(30). Keeps manual runs and the runs of each asset's latest materialization."
        ),
    )
    def dagster_run_retention_job() -> None:
        delete_expired_runs_op()

    schedule = dg.ScheduleDefinition(
        name="dagster_run_retention_schedule",
        job=dagster_run_retention_job,
        cron_schedule="17 3 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily at 03:17 UTC: deletes the expired runs of sensors and schedules (docs/dagster-storage.md).",
    )
    return dg.Definitions(jobs=[dagster_run_retention_job], schedules=[schedule])


@dg.definitions
def defs() -> dg.Definitions:
    """Read when the definitions load: DAGSTER_RUN_RETENTION_DAYS, DAGSTER_FAILED_RUN_RETENTION_DAYS."""
    return run_retention_definitions(RunRetentionSettings.from_env())
